"""glowsdk backend for an imaginary MAC-array chip: float32 MatMul, Add and Max, nothing else.

Written against the documented contract only (vendor_guide/backend_api.md, partial_chips.md): it
declares its three primitives and its throughput, and glowsdk lowers, places and falls back for it.
"""
from .backend import MacArrayBackend

__all__ = ["MacArrayBackend"]
