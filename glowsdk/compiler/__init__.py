"""The compiler pipeline: graph in, compiled function out (paper 3.6)."""
from .pipeline import compile_function

__all__ = ["compile_function"]
