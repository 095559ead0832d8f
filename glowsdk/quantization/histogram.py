"""A fixed-size histogram whose counts stay exact as its range grows (paper 4.2).

Glow re-bins a profile's histogram when a new batch widens the range by spreading
each old bin's count over the new bins it overlaps, which is approximate. Here
bins lie on a power-of-two grid instead: bin width w = 2**k and bin i covers
[i*w, (i+1)*w). Growing the range doubles w as often as needed, which merges
neighbouring bins pairwise (old bin i goes to bin i // 2), so no count is ever
split and the histogram equals the one taken over all the data at the final
width, in one pass over the calibration inputs.

The window of `bins` bins starts at the bin holding the smallest value seen, and
k is the smallest exponent at which [min, max] fits in the window (never less
than before: bins cannot be split). So the data always spans more than half the
bins. Only finite values go in; callers count NaNs and infinities apart.

Until two different values have been seen there is no width to choose: the
histogram holds a point mass (value, count) and takes a grid when the range opens.
A histogram that never opened reports one bin holding everything, with a width
of 2**-11 relative to the value (2**-24 for zero).
"""
from __future__ import annotations

import math

import numpy as np

DEFAULT_BINS = 2048


class Histogram:
    """Counts of finite values in `bins` bins of width 2**exponent starting at bin index `start`."""

    def __init__(self, bins: int = DEFAULT_BINS) -> None:
        if bins < 2:
            raise ValueError(f"a histogram needs at least 2 bins, got {bins}")
        self.bins = bins
        self.exponent: int | None = None  # None while the histogram is a point mass (or empty)
        self.start = 0
        self.counts = np.zeros(bins, dtype=np.int64)
        self.low: float | None = None  # the smallest and largest values added
        self.high: float | None = None

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    @property
    def width(self) -> float:
        """The bin width, a power of two."""
        return math.ldexp(1.0, self._grid()[0])

    @property
    def edge(self) -> float:
        """The low edge of the first bin."""
        exponent, start = self._grid()
        return math.ldexp(float(start), exponent)

    def add(self, values: np.ndarray) -> None:
        """Count `values` (finite numbers, any shape)."""
        values = np.asarray(values).ravel()
        if values.size == 0:
            return
        lo, hi = float(values.min()), float(values.max())
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError("a histogram counts finite values only")
        self._cover(lo, hi)
        if self.exponent is None:  # still one value: count it in bin 0
            self.counts[0] += values.size
            return
        scaled = np.ldexp(values.astype(np.float64), -self.exponent)  # exact: a power-of-two scale
        index = np.floor(scaled).astype(np.int64) - self.start
        self.counts += np.bincount(index, minlength=self.bins)

    def _cover(self, lo: float, hi: float) -> None:
        """Widen the range to [lo, hi], merging bins as needed."""
        point = self.low  # the point mass's value while the histogram has no grid
        if self.low is not None:
            lo, hi = min(lo, self.low), max(hi, self.high)
        self.low, self.high = lo, hi
        if lo == hi:
            return
        if self.exponent is None:  # the range opens: choose the grid, place the point mass
            mass = int(self.counts[0])
            self.exponent = self._smallest_exponent(lo, hi, None)
            self.start = math.floor(math.ldexp(lo, -self.exponent))
            self.counts[:] = 0
            if mass:
                self.counts[math.floor(math.ldexp(point, -self.exponent)) - self.start] = mass
            return
        exponent = self._smallest_exponent(lo, hi, self.exponent)
        start = math.floor(math.ldexp(lo, -exponent))
        if (exponent, start) == (self.exponent, self.start):
            return
        old = np.nonzero(self.counts)[0]
        # bin i at width w is bin floor(i / 2**d) at width w * 2**d: an arithmetic shift, exact
        moved = np.right_shift(old + self.start, min(exponent - self.exponent, 63)) - start
        merged = np.zeros(self.bins, dtype=np.int64)
        np.add.at(merged, moved, self.counts[old])
        self.counts, self.exponent, self.start = merged, exponent, start

    def _smallest_exponent(self, lo: float, hi: float, at_least: int | None) -> int:
        """The smallest k (not below `at_least`) at which [lo, hi] fits in the window."""
        exponent = math.floor(math.log2((hi - lo) / self.bins)) - 1  # too small: spans >= 2*bins bins
        if at_least is not None:
            exponent = max(exponent, at_least)
        while math.floor(math.ldexp(hi, -exponent)) - math.floor(math.ldexp(lo, -exponent)) >= self.bins:
            exponent += 1
        return exponent

    def _grid(self) -> tuple[int, int]:
        """(exponent, start), choosing one for a point mass."""
        if self.exponent is not None:
            return self.exponent, self.start
        value = self.low or 0.0
        exponent = math.frexp(value)[1] - 12 if value else -24
        return exponent, math.floor(math.ldexp(value, -exponent))

    @classmethod
    def from_grid(cls, edge: float, width: float, counts: np.ndarray, low: float | None,
                  high: float | None) -> Histogram:
        """Rebuild a histogram from its saved grid; ValueError if the grid is not a power-of-two one."""
        mantissa, exponent = math.frexp(width)
        if mantissa != 0.5:
            raise ValueError(f"bin width {width!r} is not a positive power of two")
        exponent -= 1
        try:
            start = math.ldexp(edge, -exponent)
        except OverflowError:  # an edge of 1e300 in bins of 2**-1000
            start = math.inf
        if abs(start) >= 2.0 ** 62:  # the grid's bins are numbered in int64
            raise ValueError(f"first bin edge {edge!r} is more than 2**62 bin widths of {width!r} from 0")
        if start != math.floor(start):
            raise ValueError(f"first bin edge {edge!r} is not a multiple of the bin width {width!r}")
        hist = cls(len(counts))
        hist.counts = np.asarray(counts, dtype=np.int64).copy()
        hist.low, hist.high = low, high
        if low is not None and low != high:
            hist.exponent, hist.start = exponent, int(start)
        else:  # a point mass: keep it in bin 0, as `add` does
            hist.counts = np.zeros(hist.bins, dtype=np.int64)
            hist.counts[0] = int(np.sum(counts))
        return hist

    def grid_counts(self) -> np.ndarray:
        """The counts per bin of the grid `edge` and `width` describe."""
        if self.exponent is not None:
            return self.counts.copy()
        counts = np.zeros(self.bins, dtype=np.int64)
        counts[0] = self.counts[0]  # the point mass sits in the first bin of its grid
        return counts
