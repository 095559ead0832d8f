"""A layer's operand streams on the systolic array, fold by fold, as SCALE-Sim v3 lays them out.

Each operand is a matrix of element addresses (im2col for the ifmap). The array processes it in
folds of R rows x C columns; per fold, each array edge sees a *demand* block: one row per cycle,
one column per PE row (ifmap) or column (filter, ofmap), -1 where nothing moves. Skewing a block
(column j delayed by j cycles) is the systolic wavefront. Per fold:

- output-stationary (Sr = output pixels, Sc = filters, T = window): ifmap T x R plus C - 1 idle
  rows, skewed; filter T x C plus R - 1, skewed; ofmap T - 1 idle rows then the R x C results
  (last row first), skewed: T + R + C - 2 cycles.
- weight-stationary (Sr = window, Sc = filters, T = output pixels): ifmap R idle rows (weight
  preload), T x R, C - 1 idle, skewed; filter the R x C weights last row first then
  R + C + T - 2 idle, unskewed; ofmap 2R - 1 idle then T x C, skewed: 2R + C + T - 2 cycles.

These cycle counts are `sim.timing.matmul_cycles`' per-fold terms, so the closed form is this
fold-level model's stall-free limit (a test holds them together). The *prefetch* order (how the
SRAM fills from DRAM) is each operand's folds stacked and read along anti-diagonals, except the
weight-stationary filter, read row by row.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .inputs import Layer

IDLE = -1


def ifmap_addresses(layer: Layer) -> np.ndarray:
    """The im2col matrix (output pixels x window) of ifmap element addresses, channel fastest."""
    pixel = np.arange(layer.pixels)
    out_row, out_col = np.divmod(pixel, layer.ofmap_w)
    top, left = out_row * layer.stride, out_col * layer.stride
    tap = np.arange(layer.window)
    f_row, rest = np.divmod(tap, layer.filter_w * layer.channels)
    f_col, channel = np.divmod(rest, layer.channels)
    rows = top[:, None] + f_row[None, :]
    cols = left[:, None] + f_col[None, :]
    inside = (rows < layer.ifmap_h) & (cols < layer.ifmap_w)
    return np.where(inside, (rows * layer.ifmap_w + cols) * layer.channels + channel[None, :], IDLE)


def filter_addresses(layer: Layer) -> np.ndarray:
    """Window x filters: each filter's weights are contiguous."""
    return np.arange(layer.window)[:, None] + np.arange(layer.filters)[None, :] * layer.window


def _pad(block: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """`block` in the top left of a rows x cols block of IDLE (`block` itself when it fills it)."""
    if block.shape == (rows, cols):
        return block
    out = np.full((rows, cols), IDLE, np.int64)
    out[:block.shape[0], :block.shape[1]] = block
    return out


def skew(block: np.ndarray, before: int = 0, after: int = 0) -> np.ndarray:
    """Delay column j by j cycles, the systolic wavefront, after `before` idle rows and with `after`
    more at the end of the block: element (i, j) goes to row before + i + j."""
    rows, cols = block.shape
    out = np.full((before + rows + after + cols - 1, cols), IDLE, np.int64)
    # one strided copy: from row `before`, row i of the block is a row of `out` on, column j one more row down
    row, item = out.strides
    as_strided(out[before:], (rows, cols), (row, row + item), writeable=True)[...] = block
    return out


def antidiagonal_order(matrix: np.ndarray) -> np.ndarray:
    """Elements by anti-diagonal (row + col), bottom row first within one: the prefetch order."""
    rows, cols = matrix.shape
    r, c = np.indices((rows, cols))
    order = np.lexsort((-r.ravel(), (r + c).ravel()))
    return matrix.ravel()[order]


@dataclass(frozen=True)
class Demand:
    """One operand's demand block in a fold (cycles x edge width) and what the timing reads of it."""

    block: np.ndarray
    per_row: np.ndarray
    """Addresses demanded per cycle."""
    words: int
    busy: tuple[int, int] | None
    """The first and last cycle with a demand; None for none."""


def demand(block: np.ndarray) -> Demand:
    per_row = np.count_nonzero(block != IDLE, axis=1)
    busy = np.flatnonzero(per_row)
    return Demand(block, per_row, int(per_row.sum()), (int(busy[0]), int(busy[-1])) if len(busy) else None)


@dataclass(frozen=True)
class Fold:
    """One fold's demands and the PEs it uses."""

    ifmap: Demand
    filter: Demand
    ofmap: Demand
    rows_used: int
    cols_used: int


class Streams:
    """A layer's folds and prefetch sequences for an R x C array and a dataflow."""

    def __init__(self, layer: Layer, rows: int, cols: int, dataflow: str) -> None:
        self.layer, self.rows, self.cols, self.dataflow = layer, rows, cols, dataflow
        self.ifmap = ifmap_addresses(layer)
        self.filter = filter_addresses(layer)
        if dataflow == "os":
            self.sr, self.sc, self.t = layer.pixels, layer.filters, layer.window
        else:
            self.sr, self.sc, self.t = layer.window, layer.filters, layer.pixels
        self.row_folds = -(-self.sr // rows)
        self.col_folds = -(-self.sc // cols)

    @property
    def cycles_per_fold(self) -> int:
        r, c = self.rows, self.cols
        return self.t + r + c - 2 if self.dataflow == "os" else 2 * r + c + self.t - 2

    def _slab(self, fr: int) -> np.ndarray:
        """The ifmap columns of row fold `fr` as a T x R block (padded)."""
        r = self.rows
        if self.dataflow == "os":
            return _pad(self.ifmap[fr * r:(fr + 1) * r, :].T, self.t, r)
        return _pad(self.ifmap[:, fr * r:(fr + 1) * r], self.t, r)

    def prefetch_words(self) -> tuple[int, int]:
        """How many (ifmap, filter) words the SRAMs fill from DRAM: `prefetch`'s addresses, counted
        without ordering them (all CALC bandwidth mode needs)."""
        return int(np.count_nonzero(self.ifmap != IDLE)), self.filter.size

    def prefetch(self) -> tuple[np.ndarray, np.ndarray]:
        """(ifmap, filter) addresses in the order the SRAMs fill from DRAM (-1 entries included)."""
        c = self.cols
        ifmap = antidiagonal_order(np.concatenate([self._slab(fr) for fr in range(self.row_folds)]))
        weights = np.concatenate([_pad(self.filter[:, fc * c:(fc + 1) * c], self.filter.shape[0], c)
                                  for fc in range(self.col_folds)])
        return ifmap, antidiagonal_order(weights) if self.dataflow == "os" else weights.ravel()

    def folds(self) -> Iterator[Fold]:
        """Folds in SCALE-Sim's order: filter folds outermost. A demand that does not change with the inner
        fold (the ifmap's of a row fold, the filter's or the ofmap's of a column fold) is built once."""
        r, c, t = self.rows, self.cols, self.t
        ifmaps: list[Demand] = []
        for fc in range(self.col_folds):
            cols_used = min(c, self.sc - fc * c)
            weights = self.filter[:, fc * c:(fc + 1) * c]
            if self.dataflow == "os":
                filt = demand(skew(_pad(weights, t, c), after=r - 1))
            else:
                ofmap = demand(skew(_pad(self._ofmap_ids(0, t, fc * c, cols_used), t, c), before=2 * r - 1))
            for fr in range(self.row_folds):
                rows_used = min(r, self.sr - fr * r)
                if fc == 0:
                    ifmaps.append(demand(skew(self._slab(fr), after=c - 1) if self.dataflow == "os" else
                                         skew(self._slab(fr), before=r, after=c - 1)))
                if self.dataflow == "os":
                    results = self._ofmap_ids(fr * r, rows_used, fc * c, cols_used)
                    ofmap = demand(skew(_pad(results, r, c)[::-1], before=t - 1))
                else:
                    block = _pad(weights[fr * r:(fr + 1) * r], r, c)[::-1]
                    filt = demand(np.concatenate([block, np.full((r + c + t - 2, c), IDLE)]))
                yield Fold(ifmaps[fr], filt, ofmap, rows_used, cols_used)

    def _ofmap_ids(self, row0: int, rows: int, col0: int, cols: int) -> np.ndarray:
        pixels = np.arange(row0, row0 + rows)[:, None]
        return pixels * self.layer.filters + np.arange(col0, col0 + cols)[None, :]
