"""libjit: the CPU backend's kernels as LLVM IR builders, one table entry per instruction kind."""
from . import conv, data, elementwise, matmul, pool, reduce  # noqa: F401  (register their kernels)
from .table import KERNELS, KernelRecord

__all__ = ["KERNELS", "KernelRecord"]
