"""Test values for the primitive suite: random tensors and edge values of every element kind.

A vendor's kernel is most often wrong at the corners, so besides seeded random
values each kind has its edge values: NaN, infinities, signed zeros, the largest
and tiniest finite values and the rounding ties (0.5, 1.5, 2.5, -2.5) for floats;
the extremes and their neighbours for integers; and, for quantized kinds, raw
integers at both saturation bounds and at the offset. `Domain` narrows integers
where a primitive's result would leave its defined range (a product, a divisor).
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from ..graph.types import ElemKind, Type

FLOAT_EDGES = (np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -2.5, 1.0, -1.0)
"""Before the kind's own extremes (`edges` adds the largest and the tiniest finite values)."""

QUANT_SCALES = {ElemKind.QINT8: (0.25, 3), ElemKind.QUINT8: (0.125, 131), ElemKind.QINT32: (0.0625, -7)}
"""A scale (a power of two, so ties are exact) and an offset per quantized kind."""


@dataclass(frozen=True)
class Domain:
    """Bounds on integer values (None: the kind's own range); `nonzero` keeps zero out (divisors)."""

    low: int | None = None
    high: int | None = None
    nonzero: bool = False


FULL = Domain()
SMALL = Domain(-4, 4)
DIVISOR = Domain(-7, 7, nonzero=True)


def quantized_type(kind: ElemKind, shape: tuple[int, ...]) -> Type:
    """The suite's quantized type of `kind` (or the plain type of a plain kind)."""
    if not kind.is_quantized:
        return Type(kind, shape)
    scale, offset = QUANT_SCALES[kind]
    return Type(kind, shape, scale, offset)


def integer_bounds(kind: ElemKind) -> tuple[int, int]:
    """The range of the raw integers of an integer, narrow-integer or quantized kind."""
    info = ml_dtypes.iinfo(kind.dtype)
    return int(info.min), int(info.max)


def _clip_domain(kind: ElemKind, domain: Domain) -> tuple[int, int]:
    low, high = integer_bounds(kind)
    if domain.low is not None:
        low = max(low, domain.low)
    if domain.high is not None:
        high = min(high, domain.high)
    return low, high


def random_values(kind: ElemKind, shape: tuple[int, ...], rng: np.random.Generator,
                  domain: Domain = FULL) -> np.ndarray:
    """Seeded random values of `kind` (raw integers for quantized kinds)."""
    if kind is ElemKind.BOOL:
        return rng.random(shape) < 0.5
    if kind.is_float or kind.is_narrow_float:
        values = rng.standard_normal(shape) * 3.0
        if kind is ElemKind.FLOAT8E8M0:  # powers of two only, no sign
            values = np.exp2(np.round(values))
        return values.astype(kind.dtype)
    low, high = _clip_domain(kind, domain)
    wide = np.uint64 if high > np.iinfo(np.int64).max else np.int64
    values = rng.integers(low, high, size=shape, endpoint=True, dtype=wide)
    if domain.nonzero:
        values[values == 0] = 1
    return values.astype(kind.dtype)


def edges(kind: ElemKind, domain: Domain = FULL) -> np.ndarray:
    """The edge values of `kind` (1-D), within `domain` for integers."""
    if kind is ElemKind.BOOL:
        return np.array([False, True])
    if kind.is_float:
        info = ml_dtypes.finfo(kind.dtype)
        extra = (float(info.max), float(-info.max), float(info.tiny), float(-info.tiny))
        return np.array(FLOAT_EDGES + extra, np.float64).astype(kind.dtype)
    if kind.is_narrow_float:
        # whatever the kind represents of the float edges, plus its largest value
        info = ml_dtypes.finfo(kind.dtype)
        wanted = np.array(FLOAT_EDGES + (float(info.max), float(info.tiny)), np.float64)
        finite = wanted[np.isfinite(wanted)]
        return np.unique(finite.astype(kind.dtype).astype(np.float64)).astype(kind.dtype)
    low, high = _clip_domain(kind, domain)
    wanted = {low, low + 1, -1, 0, 1, 2, high - 1, high}
    if kind.is_quantized:
        wanted.add(QUANT_SCALES[kind][1])
    values = sorted(v for v in wanted if low <= v <= high and not (domain.nonzero and v == 0))
    return np.array(values, kind.dtype)


def with_edges(kind: ElemKind, shape: tuple[int, ...], rng: np.random.Generator,
               domain: Domain = FULL) -> np.ndarray:
    """Random values of `shape` whose first elements are the kind's edge values, shuffled in place."""
    values = random_values(kind, shape, rng, domain).reshape(-1)
    corner = edges(kind, domain)[: values.size]
    values[: corner.size] = corner
    rng.shuffle(values)
    return values.reshape(shape)
