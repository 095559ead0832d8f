"""The exact integer arithmetic of quantized values and of the NPU's instructions, as vectorised numpy.

The ISA table states each instruction's semantics in words; these functions
are the same rules as code, so the NPU's instructions (isa/families/), the
graph's integer nodes, the reference kernels and the compiler's constant folder
share one definition of rounding and saturation. It sits at the bottom of the
layers, beside errors.py, so each of them reaches it without importing another. All work in int64, which holds every
intermediate exactly: |x * M| < 2^62 for an int32 x and a 31-bit multiplier.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

INT8_MIN, INT8_MAX = -128, 127
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
MAX_SHIFT = 31
"""Requantize shifts s lie in -MAX_SHIFT..MAX_SHIFT, so the total right shift 31 + s lies in 0..62."""

ArrayLike = np.ndarray | int


def saturate(x: np.ndarray, space: str) -> np.ndarray:
    """`sat(space, x)`: clamp to int8 (spad) or int32 (acc) and return that dtype."""
    if space == "spad":
        return np.clip(x, INT8_MIN, INT8_MAX).astype(np.int8)
    return np.clip(x, INT32_MIN, INT32_MAX).astype(np.int32)


def wrap32(x: np.ndarray) -> np.ndarray:
    """Reduce modulo 2^32 into -2^31..2^31-1 (MATMUL's accumulation)."""
    return np.asarray(x, np.int64).astype(np.int32)


def shift_amount(b: ArrayLike) -> np.ndarray:
    """The shift a VSHL/VSHR operand b stands for: b clamped to 0..31."""
    return np.clip(np.asarray(b, np.int64), 0, 31)


BINARY_OPS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "ADD": np.add,
    "SUB": np.subtract,
    "MUL": np.multiply,
    "MIN": np.minimum,
    "MAX": np.maximum,
    "SHL": lambda a, b: a << shift_amount(b),
    "SHR": lambda a, b: a >> shift_amount(b),
}
"""The value of V<op> / V<op>I on int64 operands, before saturation to the destination."""


def binary(op: str, a: ArrayLike, b: ArrayLike, dst_space: str) -> np.ndarray:
    """`sat(dst_space, a <op> b)` for the vector engine's binary and immediate families."""
    return saturate(BINARY_OPS[op](np.asarray(a, np.int64), np.asarray(b, np.int64)), dst_space)


def round_shift(t: ArrayLike, total_shift: ArrayLike) -> np.ndarray:
    """t / 2^S rounded half to even, for 0 <= S <= 62 and |t| < 2^62.

    Half to even (convergent rounding) is ONNX's rounding, so an imported QLinear
    model and glowsdk's own quantized graphs requantize alike on every target.
    """
    t = np.asarray(t, np.int64)
    s = np.asarray(total_shift, np.int64)
    floor = t >> s
    remainder = t - (floor << s)
    half = np.where(s > 0, np.left_shift(np.int64(1), np.maximum(s - 1, 0)), 0)
    up = (remainder > half) | ((remainder == half) & (s > 0) & ((floor & 1) == 1))
    return floor + up


def requantize(x: ArrayLike, multiplier: ArrayLike, shift: ArrayLike, zero_point: int,
               lo: int = INT8_MIN, hi: int = INT8_MAX) -> np.ndarray:
    """REQUANT: min(max(round(x * M / 2^(31 + s)) + zero_point, lo), hi) as int8.

    `multiplier` and `shift` are scalars or broadcast along x's last axis (per-channel).
    """
    t = np.asarray(x, np.int64) * np.asarray(multiplier, np.int64)
    q = round_shift(t, 31 + np.asarray(shift, np.int64))
    return np.clip(q + zero_point, lo, hi).astype(np.int8)


def rounded_average(total: ArrayLike, count: ArrayLike) -> np.ndarray:
    """POOL avg: total / count rounded half to even (count >= 1)."""
    total = np.asarray(total, np.int64)
    count = np.asarray(count, np.int64)
    floor = total // count
    twice = 2 * (total - floor * count)
    return floor + ((twice > count) | ((twice == count) & ((floor & 1) == 1)))


def divide_rounded(a: ArrayLike, b: ArrayLike, shift: int = 0) -> np.ndarray:
    """VDIV: a * 2^shift / b rounded to nearest, ties to even, for b != 0 and |a * 2^shift| < 2^62.

    Computed on magnitudes so the tie rule is symmetric in sign: -5 / 2 = -2, as 5 / 2 = 2.
    """
    a = np.asarray(a, np.int64) << np.int64(shift)
    b = np.asarray(b, np.int64)
    sign = np.where((a < 0) != (b < 0), -1, 1)
    return sign * rounded_average(np.abs(a), np.abs(b))


def quantize_multiplier(real: float) -> tuple[int, int]:
    """(M, s) with M * 2^-(31 + s) closest to `real` >= 0, M < 2^31 and s in -31..31.

    M is normalised into 2^30..2^31-1 whenever the range of s allows, which keeps 31 bits of precision.
    """
    if not math.isfinite(real) or real < 0:
        raise ValueError(f"requantize multiplier must be finite and >= 0, got {real}")
    if real == 0:
        return 0, 0
    _, exponent = math.frexp(real)  # real = fraction * 2^exponent, fraction in [0.5, 1)
    shift = min(max(-exponent, -MAX_SHIFT), MAX_SHIFT)
    multiplier = round(real * 2.0 ** (31 + shift))
    if multiplier >= 1 << 31 and shift > -MAX_SHIFT:
        shift -= 1
        multiplier = round(real * 2.0 ** (31 + shift))
    if multiplier >= 1 << 31:
        raise ValueError(f"requantize multiplier {real} is too large (at most about 2^31)")
    return multiplier, shift
