"""Backends: the built-in ones (interpreter, cpu, npu), found by name like a vendor's; the contract they implement
is the compiler's (glowsdk.compiler.backend)."""
from .registry import available_backends, get_backend

__all__ = ["available_backends", "get_backend"]
