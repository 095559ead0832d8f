"""The interpreter backend: numpy execution, the golden functional reference."""
from .backend import InterpreterBackend

__all__ = ["InterpreterBackend"]
