"""libjit: the CPU backend's kernels as LLVM IR builders, one table entry per instruction kind."""
from . import (  # noqa: F401  (register their kernels)
    conv, data, elementwise, int8_conv, int8_matmul, matmul, normalize, pool, reduce, resize, sort)
from .table import KERNELS, KernelRecord

__all__ = ["KERNELS", "KernelRecord"]
