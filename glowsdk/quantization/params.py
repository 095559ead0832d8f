"""Choosing a value's quantization parameters from its profile (paper 4.2).

Two independent choices, both named on the command line:
- the calibration method picks the float range [lo, hi] to represent:
  `minmax` (the observed extremes), `percentile` (drop the outermost 0.01 % of
  each tail, from the histogram), or `kl` (TensorRT's entropy calibration: the
  clipping threshold whose quantized histogram is closest to the observed one in
  Kullback-Leibler divergence);
- the schema maps [lo, hi] to an int8 scale and offset (value = (q - offset) * scale):
  `asymmetric` (the full range, any offset), `symmetric` (offset 0, the range
  made symmetric about 0), `symmetric-uint8` (symmetric, except that a range with
  no negative values uses offset -128, the whole int8 range for [0, hi], as
  Glow's SymmetricWithUnsigned does), and `power2` (symmetric with the scale
  rounded up to a power of two, so rescaling is a shift).
The range always includes 0, so zero padding and ReLU's 0 are represented exactly.
Scales are float32 numbers, as in ONNX, so a quantized graph exports exactly.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import GlowError
from .histogram import Histogram
from .profile import ValueProfile

SCHEMAS = ("asymmetric", "symmetric", "symmetric-uint8", "power2")
CALIBRATIONS = ("minmax", "percentile", "kl")
PERCENTILE = 99.99
"""`percentile` keeps the values between the (100 - PERCENTILE)th and PERCENTILEth percentiles."""
KL_CANDIDATES = 128
"""How many clipping thresholds `kl` tries, evenly spaced over the histogram."""
WEIGHT_BINS, WEIGHT_CANDIDATES, WEIGHT_LOWEST = 2048, 141, 0.3
"""Weights' clipping bound: the best of 141 candidates from the largest magnitude down to 30 % of it."""

INT8_LOW, INT8_HIGH = -128, 127


def choose_params(lo: float, hi: float, schema: str) -> tuple[float, int]:
    """(scale, offset) of an int8 quantized type representing [lo, hi] under `schema`."""
    scale, offset = _params(min(float(lo), 0.0), max(float(hi), 0.0), schema)
    return float(np.float32(scale)), offset


def weight_params(bound: float) -> tuple[float, int]:
    """(scale, 0) for weights in [-bound, bound]: symmetric over -127..127, so products of weights stay
    symmetric (onnxruntime's and TFLite's choice)."""
    return (float(np.float32(bound / INT8_HIGH)) if bound > 0 else 1.0), 0


def weight_bounds(magnitudes: np.ndarray) -> np.ndarray:
    """Per row of |w| (one row per channel, or one for the whole tensor), the bound c minimising the
    expected squared error of w clipped to [-c, c] and rounded to the grid c/127 * (-127..127).

    The error is the rounding noise of the values inside, step^2 / 12 each, plus the exact clipping
    error of those outside, sum (|w| - c)^2 (ACIQ's model), taken from a WEIGHT_BINS histogram of
    each row. The largest magnitude is among the candidates, so the model's error is never above
    min-max's. A large matrix's largest weight sits far out in the tail (6 standard deviations for
    vgg19's 100M-weight fc6): its min-max grid is 1.5 times coarser than it need be.
    """
    rows = magnitudes.reshape(len(magnitudes), -1)
    bounds = np.zeros(len(rows))
    for i, row in enumerate(rows):
        top = float(row.max()) if row.size else 0.0
        if top <= 0.0:
            continue
        counts, edges = np.histogram(row, bins=WEIGHT_BINS, range=(0.0, top))
        centres = (edges[:-1] + edges[1:]) / 2
        # sums of n, n*v and n*v^2 over the bins from i up: the clipping error of any bound in O(1)
        above = [np.cumsum(x[::-1])[::-1] for x in (counts, counts * centres, counts * centres ** 2)]
        candidates = top * np.linspace(1.0, WEIGHT_LOWEST, WEIGHT_CANDIDATES)
        first = np.minimum(np.searchsorted(centres, candidates, side="right"), WEIGHT_BINS - 1)
        outside = np.where(centres[first] > candidates, 1.0, 0.0)  # the top candidate clips nothing
        clipped = outside * (above[2][first] - 2 * candidates * above[1][first] + candidates ** 2 * above[0][first])
        inside = row.size - outside * above[0][first]
        error = inside * (candidates / INT8_HIGH) ** 2 / 12 + clipped
        bounds[i] = candidates[int(np.argmin(error))]
    return bounds


def _params(lo: float, hi: float, schema: str) -> tuple[float, int]:
    if schema == "asymmetric":
        if hi == lo:
            return 1.0, 0
        scale = (hi - lo) / (INT8_HIGH - INT8_LOW)
        return scale, int(np.clip(round(INT8_LOW - lo / scale), INT8_LOW, INT8_HIGH))
    if schema == "symmetric-uint8" and lo == 0.0:
        return (hi / (INT8_HIGH - INT8_LOW) if hi > 0 else 1.0), INT8_LOW
    if schema not in SCHEMAS:
        raise GlowError(f"unknown quantization schema '{schema}' (known: {', '.join(SCHEMAS)})")
    bound = max(-lo, hi)
    if bound == 0.0:
        return 1.0, 0
    scale = 2.0 * bound / (INT8_HIGH - INT8_LOW)
    if schema == "power2":
        scale = 2.0 ** math.ceil(math.log2(scale))
    return scale, 0


def calibrated_range(value: ValueProfile, method: str) -> tuple[float, float]:
    """The float range [lo, hi] to represent for `value` under the calibration `method`."""
    if value.min is None:  # nothing finite was seen: represent 0 only
        return 0.0, 0.0
    if method == "minmax" or value.min == value.max:
        return value.min, value.max
    hist = value.histogram
    counts = hist.grid_counts().astype(np.float64)
    if method == "percentile":
        return _percentile_range(hist, counts)
    if method == "kl":
        return _kl_range(hist, counts)
    raise GlowError(f"unknown calibration method '{method}' (known: {', '.join(CALIBRATIONS)})")


def _percentile_range(hist: Histogram, counts: np.ndarray) -> tuple[float, float]:
    tail = counts.sum() * (100.0 - PERCENTILE) / 100.0
    cumulative = np.cumsum(counts)
    first = int(np.searchsorted(cumulative, tail, side="right"))
    last = int(np.searchsorted(cumulative, cumulative[-1] - tail, side="left"))
    lo = max(hist.low, hist.edge + first * hist.width)
    hi = min(hist.high, hist.edge + (last + 1) * hist.width)
    return min(lo, hi), max(lo, hi)


def _kl_range(hist: Histogram, counts: np.ndarray) -> tuple[float, float]:
    """Clip |x| at the threshold minimising KL(observed || quantized), over the magnitudes' histogram.

    A one-signed value has 256 levels for its magnitudes, a two-signed one 128
    (half of int8 each way). The grid's bin edges are multiples of its width, so
    folding the histogram at 0 is exact.
    """
    first = round(hist.edge / hist.width)
    index = np.arange(first, first + len(counts))
    magnitude = np.where(index >= 0, index, -index - 1)
    folded = np.bincount(magnitude, weights=counts)
    nonzero = np.nonzero(folded)[0]
    used = int(nonzero[-1]) + 1 if nonzero.size else 1
    folded = folded[:used]
    levels = 128 if hist.low < 0 < hist.high else 256
    if used <= levels:
        return hist.low, hist.high
    best, best_bins = math.inf, used
    for bins in np.unique(np.linspace(levels, used, KL_CANDIDATES).astype(int)):
        divergence = _clipped_divergence(folded, int(bins), levels)
        if divergence < best:
            best, best_bins = divergence, int(bins)
    threshold = best_bins * hist.width
    return max(hist.low, -threshold), min(hist.high, threshold)


def _clipped_divergence(folded: np.ndarray, bins: int, levels: int) -> float:
    """KL divergence between the histogram clipped to `bins` bins and its `levels`-level quantization."""
    kept = folded[:bins]
    reference = kept.copy()
    reference[-1] += folded[bins:].sum()  # the clipped tail saturates into the last bin
    level = (np.arange(bins) * levels) // bins
    present = kept > 0
    sums = np.bincount(level, weights=kept, minlength=levels)
    occupied = np.bincount(level, weights=present, minlength=levels)
    expanded = np.where(present, sums[level] / np.maximum(occupied[level], 1), 0.0)
    p = reference / reference.sum()
    q = expanded / max(expanded.sum(), 1e-300)
    mask = p > 0
    return float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-12))))
