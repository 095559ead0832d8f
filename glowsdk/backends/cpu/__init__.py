"""The LLVM CPU backend (paper section 5): specialised kernels, operator stacking, host JIT."""
from .backend import CpuBackend

__all__ = ["CpuBackend"]
