"""Backends: the built-in ones and the plugin contract vendors implement."""
from .base import Backend, CompiledFunction, CompileOptions, TensorInfo
from .registry import available_backends, get_backend

__all__ = ["Backend", "CompiledFunction", "CompileOptions", "TensorInfo", "available_backends", "get_backend"]
