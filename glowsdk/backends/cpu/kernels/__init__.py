"""libjit: the CPU backend's kernels as LLVM IR builders, one table entry per instruction kind."""
from . import conv, data, elementwise, int8_conv, int8_matmul, matmul, pool, reduce, sort  # noqa: F401  (register their kernels)
from .table import KERNELS, KernelRecord

__all__ = ["KERNELS", "KernelRecord"]
