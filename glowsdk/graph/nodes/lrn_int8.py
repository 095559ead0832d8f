"""The integer arithmetic of an int8 LRN (nn.LRN's doc): the lookup table every target shares.

On raw integers u = q - offset, the normaliser (bias + alpha/size * scale^2 * S)^-beta depends only on
the window's sum of squares S, an integer in 0..size * m^2 (m the largest |u| the type holds). S is
compressed to a 256-entry index by a right shift (the least that maps the largest S to 255), and each
entry holds the normaliser at the middle of its bucket, in fixed point with as many fraction bits as
keep u * T below 2^31. The interpreter's kernel (reference/kernels/nn.py) and the NPU's layer
(backends/npu/lrn.py: REDUCE-free shifted VADDs, VSHRI, LUT32, VMUL, REQUANT) both read this table,
so they agree bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TABLE_SIZE = 256
PRODUCT_BITS = 23
"""Entries stay below 2^23, so |u| * T < 255 * 2^23 < 2^31: the product is exact in int32."""
MAX_FRACTION_BITS = 30


@dataclass(frozen=True)
class LrnTable:
    index_shift: int
    """k: the table index is S >> k"""
    fraction_bits: int
    """F: the entries are the normaliser times 2^F"""
    entries: np.ndarray
    """T, TABLE_SIZE int64 values"""


def lrn_table(scale: float, offset: int, size: int, alpha: float, beta: float, bias: float) -> LrnTable:
    """The table of an int8 LRN whose input (and result) type has `scale` and `offset`.

    T[i] = round_half_even(2^F * (bias + alpha/size * scale^2 * (i * 2^k + (2^k - 1) / 2))^-beta), in float64
    from float32 `scale`; ValueError when the normaliser is not positive or too large for F >= 0.
    """
    if not (bias > 0 and alpha >= 0):
        raise ValueError(f"an int8 LRN needs bias > 0 and alpha >= 0, got bias {bias} and alpha {alpha}")
    largest = max(abs(-128 - offset), abs(127 - offset))
    shift = max(0, (size * largest * largest).bit_length() - 8)
    middle = np.arange(TABLE_SIZE, dtype=np.float64) * 2.0 ** shift + (2.0 ** shift - 1) / 2
    s = np.float64(np.float32(scale))
    normaliser = (np.float64(bias) + np.float64(alpha) / size * s * s * middle) ** -np.float64(beta)
    fraction = MAX_FRACTION_BITS
    while fraction >= 0 and np.rint(np.ldexp(normaliser.max(), fraction)) >= 1 << PRODUCT_BITS:
        fraction -= 1
    if fraction < 0:
        raise ValueError(f"an int8 LRN's normaliser reaches {normaliser.max():.3g}: above 2^{PRODUCT_BITS}")
    return LrnTable(shift, fraction, np.rint(np.ldexp(normaliser, fraction)).astype(np.int64))
