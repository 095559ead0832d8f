"""The TinyVec-1's kernels, as its functional simulator runs them: numpy, float32, one per primitive.

Each kernel writes its result into the destination view it is given (memory the
allocator placed) and returns the cycles the chip would take: one per 16
elements on the vector unit, one per 16 x 16 multiply-accumulates on the array.
`KERNELS` is the table the program loader dispatches on; a primitive missing
here must also be missing from the backend's declaration.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

LANES = 16
MACS_PER_CYCLE = 16 * 16

Kernel = Callable[..., int]
KERNELS: dict[str, Kernel] = {}


def impl(*kinds: str) -> Callable[[Kernel], Kernel]:
    """Register a kernel for the primitive kinds `kinds`."""
    def register(kernel: Kernel) -> Kernel:
        KERNELS.update(dict.fromkeys(kinds, kernel))
        return kernel
    return register


UFUNCS = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
          "Max": np.maximum, "Min": np.minimum}  # maximum/minimum propagate NaN, as the primitives do


@impl(*UFUNCS)
def elementwise(instr, out: np.ndarray, lhs: np.ndarray, rhs: np.ndarray) -> int:
    UFUNCS[instr.kind](lhs, rhs, out=out)
    return -(-out.size // LANES)


@impl("Reshape")
def reshape(instr, out: np.ndarray, x: np.ndarray) -> int:
    """Only when the IR optimiser could not make it a view: a copy through the DMA."""
    np.copyto(out, x.reshape(out.shape))
    return -(-out.size // LANES)


@impl("MatMul")
def matmul(instr, out: np.ndarray, lhs: np.ndarray, rhs: np.ndarray) -> int:
    np.matmul(lhs, rhs, out=out)
    return -(-out.size * lhs.shape[-1] // MACS_PER_CYCLE)


@impl("Conv")
def conv2d(instr, out: np.ndarray, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None) -> int:
    """im2col, then one matrix product per group on the MAC array."""
    (sh, sw), (dh, dw), group = instr.strides, instr.dilations, instr.group
    top, left, bottom, right = instr.pads
    n, c = x.shape[:2]
    m, per_group, kh, kw = w.shape
    oh, ow = out.shape[2:]
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    columns = np.empty((n, c, kh, kw, oh, ow), np.float32)
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
            cols = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
            columns[:, :, i, j] = padded[:, :, rows, cols]
    filters = m // group
    for g in range(group):
        patch = columns[:, g * per_group:(g + 1) * per_group].reshape(n, per_group * kh * kw, oh * ow)
        weights = w[g * filters:(g + 1) * filters].reshape(filters, -1)
        out[:, g * filters:(g + 1) * filters] = np.matmul(weights, patch).reshape(n, filters, oh, ow)
    if bias is not None:
        out += bias.reshape(1, m, 1, 1)
    return -(-out.size * per_group * kh * kw // MACS_PER_CYCLE)
