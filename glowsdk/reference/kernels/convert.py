"""Element-kind conversion, as the Cast node kind defines it (ONNX Cast, opsets 1..25).

Narrow sources are first widened exactly (narrow floats to float32, narrow
integers to int8/uint8), so only conversions *into* a narrow kind need rules
of their own:
- float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz) and float4e2m1: round half to even,
  once. A value is taken to float64 (exact for every source kind but int64
  beyond 2**53, far outside these ranges), then rounded to float32 *to odd*:
  truncated, with the last bit set if anything was cut off. With 20 spare bits
  that keeps the information ml_dtypes' round-half-to-even from float32 needs
  to give the correctly rounded result, with no double rounding.
- float8e8m0 (powers of two 2**-127..2**127): the exponent is rounded up, down
  or to nearest (ties up, in linear scale) with an unbounded range, then
  range-checked.
- int4/uint4/int2/uint2: floats truncate toward zero; then, as for every
  fixed-point narrowing in ONNX, the higher bits are discarded.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ...graph.nodes.elementwise import SATURATING
from ...graph.types import ElemKind

_E8M0_BIAS = 127
_E8M0_NAN = 0xFF


def widen(x: np.ndarray) -> np.ndarray:
    """`x` in a plain numpy dtype holding exactly its values (narrow kinds only change)."""
    kind = ElemKind.from_dtype(x.dtype)
    if kind.is_narrow_float:
        return x.astype(np.float32)
    if kind.is_narrow:
        return x.astype(np.int8 if ml_dtypes.iinfo(x.dtype).min < 0 else np.uint8)
    return x


def cast(x: np.ndarray, to: ElemKind, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """`x` converted to the plain kind `to`; see the Cast node kind for the rules."""
    x = widen(x)
    if to is ElemKind.BOOL:
        return x != 0
    if to is ElemKind.FLOAT8E8M0:
        return to_e8m0(x, saturate, round_mode)
    if to.is_narrow_float:
        return to_narrow_float(x, to, saturate or to not in SATURATING)
    if to.is_narrow:
        return to_narrow_integer(x, to)
    return x.astype(to.dtype)


def round_to_odd_float32(x: np.ndarray) -> np.ndarray:
    """float64 to float32, truncating and setting the last bit if the result is inexact."""
    near = x.astype(np.float32)
    wide = near.astype(np.float64)
    inexact = (wide != x) & ~np.isnan(x)
    truncated = np.where(np.abs(wide) > np.abs(x), np.nextafter(near, np.float32(0)), near)
    return (truncated.view(np.uint32) | inexact.astype(np.uint32)).view(np.float32)


def to_narrow_float(x: np.ndarray, to: ElemKind, saturate: bool) -> np.ndarray:
    """Round half to even into a float8 kind or float4e2m1.

    saturate: values beyond the largest finite value, and infinities, clamp to
    it (NaN stays NaN). Otherwise they become inf (e5m2) or NaN (the others).
    float4e2m1 has neither: it always saturates, and NaN becomes -0, as the
    ONNX reference and backend tests have it.
    """
    wide = x.astype(np.float64)
    nan = np.isnan(wide)
    if saturate:
        limit = float(ml_dtypes.finfo(to.dtype).max)
        wide = np.clip(wide, -limit, limit)
    if to is ElemKind.FLOAT4E2M1:
        wide = np.where(nan, -0.0, wide)
    return round_to_odd_float32(wide).astype(to.dtype)


def to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """Round |x| to a power of two 2**k (e8m0 has no sign, zero or infinity).

    round_mode up / down: the next power of two away from / toward zero; nearest: the
    nearer of the two, ties (1.5 * 2**k) up. Results beyond 2**127, and inf,
    become 2**127 if `saturate`, else NaN; results below 2**-127, and zero,
    become 2**-127 if `saturate`, else NaN. NaN stays NaN.
    """
    magnitude = np.abs(x.astype(np.float64))
    fraction, exponent = np.frexp(magnitude)  # magnitude = fraction * 2**exponent, fraction in [0.5, 1)
    power = exponent.astype(np.int64) - 1
    if round_mode == "up":
        power += fraction > 0.5
    elif round_mode == "nearest":
        power += fraction >= 0.75
    power = np.where(np.isinf(magnitude), _E8M0_BIAS + 1, np.where(magnitude == 0, -_E8M0_BIAS - 1, power))
    invalid = np.isnan(magnitude)
    if not saturate:
        invalid |= np.abs(power) > _E8M0_BIAS
    code = np.clip(power, -_E8M0_BIAS, _E8M0_BIAS) + _E8M0_BIAS
    return np.where(invalid, _E8M0_NAN, code).astype(np.uint8).view(ml_dtypes.float8_e8m0fnu)


def to_narrow_integer(x: np.ndarray, to: ElemKind) -> np.ndarray:
    """Wrap into a 4- or 2-bit integer kind, keeping the low bits (two's complement).

    Floats truncate toward zero first; NaN and infinities, undefined in ONNX, give 0.
    """
    info = ml_dtypes.iinfo(to.dtype)
    modulus = int(info.max) - int(info.min) + 1
    if ElemKind.from_dtype(x.dtype).is_float:
        whole = np.trunc(x.astype(np.float64))
        whole = np.where(np.isfinite(whole), np.fmod(whole, modulus), 0).astype(np.int64)
    else:
        whole = x.astype(np.int64)  # uint64 wraps modulo 2**64, which keeps the low bits
    return ((whole - int(info.min)) % modulus + int(info.min)).astype(to.dtype)
