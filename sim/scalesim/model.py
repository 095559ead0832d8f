"""One layer through the array and its three SRAMs: cycles, stalls and access counts, as SCALE-Sim v3 counts them.

Request line i (one per array cycle) is issued at cycle i plus the stalls so far; the line's
stall is the largest of the three SRAMs' (v3's rule, under which a read SRAM's chained
prefetch running ahead can make its own count negative). A line needs work only where a read
SRAM misses or the ofmap SRAM is written, so the loop visits just those lines; the others are
found a fold at a time with one vectorised window lookup. In CALC bandwidth mode SCALE-Sim sizes
the DRAM interface to never stall the reads, so only the ofmap SRAM (drained at C words per
cycle, as v3 does) is timed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .buffers import ReadBuffer, WriteBuffer
from .inputs import Layer, ScaleConfig
from .streams import IDLE, Streams


@dataclass(frozen=True)
class LayerResult:
    """A layer's SCALE-Sim report items."""

    name: str
    total_cycles: int
    total_with_prefetch: int
    stall_cycles: int
    overall_util: float
    mapping_efficiency: float
    compute_util: float
    sram_reads: tuple[int, int]
    """(ifmap, filter) words read by the array."""
    sram_writes: int
    """ofmap words written by the array (v3 adds R + C per output-stationary fold)."""
    sram_cycles: tuple[tuple[int, int], tuple[int, int], tuple[int, int]]
    """(first, last) request cycle of the ifmap, filter and ofmap SRAMs."""
    dram: tuple[tuple[int, int, int], tuple[int, int, int], tuple[int, int, int]]
    """(start cycle, stop cycle, words) of the ifmap reads, filter reads and ofmap writes."""


def simulate_layer(layer: Layer, config: ScaleConfig, progress: Callable[[int, int], None] | None = None) -> LayerResult:
    """Run one layer; `progress(done, total)` is called per fold."""
    r, c = config.rows, config.cols
    streams = Streams(layer, r, c, config.dataflow)
    ifmap_pf, filter_pf = streams.prefetch()
    user = config.bandwidth is not None
    readers = (ReadBuffer(config.ifmap_kb * 1024, config.bandwidth[0], ifmap_pf),
               ReadBuffer(config.filter_kb * 1024, config.bandwidth[1], filter_pf)) if user else None
    writer = WriteBuffer(config.ofmap_kb * 1024, config.bandwidth[2] if user else c)
    stalls = 0
    line = 0
    out_max = 0
    last_busy = False
    reads = [0, 0]
    writes = 0
    first_use: list[int | None] = [None, None, None]
    last_use = [0, 0, 0]
    mapping, utilisation = [], []
    folds = streams.row_folds * streams.col_folds
    for done, fold in enumerate(streams.folds(), 1):
        blocks = (fold.ifmap, fold.filter)
        counts = (fold.ofmap != IDLE).sum(axis=1)
        used = [(b != IDLE).any(axis=1) for b in (*blocks, fold.ofmap)]
        reads[0] += int((fold.ifmap != IDLE).sum())
        reads[1] += int((fold.filter != IDLE).sum())
        writes += int(counts.sum()) + (r + c if config.dataflow == "os" else 0)
        base = line
        missing = [reader.misses(b) for reader, b in zip(readers, blocks)] if user else None
        busy = counts > 0
        if user:
            busy = busy | missing[0] | missing[1]
        if not (user and (missing[0].any() or missing[1].any())) and writer.absorbs(int(counts.sum())):
            writer.absorb(int(counts.sum()))  # no miss, no drain: the fold runs without a stall
            busy = np.zeros_like(busy)
        for i in np.flatnonzero(busy):
            cycle = base + int(i) + stalls
            worst = writer.serve(int(counts[i]), cycle)
            out_max = max(out_max, cycle + worst)
            if user:
                for k, reader in enumerate(readers):
                    if missing[k][i]:
                        worst = max(worst, reader.serve(blocks[k][i], cycle))
                        missing[k][i:] = reader.misses(blocks[k][i:])
                        missing[k][i] = True  # served; later rows were re-checked against the new window
            stalls += worst
        rows = len(fold.ofmap)
        last_busy = bool(busy[-1])
        for k in range(3):
            hit = np.flatnonzero(used[k])
            if len(hit):
                # the request cycle of a line is its index plus the stalls before it; v3 reports these bounds
                first_use[k] = base + int(hit[0]) if first_use[k] is None else first_use[k]
                last_use[k] = base + int(hit[-1]) + stalls
        line += rows
        macs = fold.rows_used * fold.cols_used
        mapping.append(macs / (r * c))
        # v3 times a fold by its ofmap block (output-stationary) or its unskewed filter block plus C - 1
        utilisation.append(macs * streams.t / (r * c * (rows if config.dataflow == "os" else rows + c - 1)))
        if progress:
            progress(done, folds)
    # v3's Total Cycles is the last ofmap request's completion: a stall of the last line itself is not counted
    total = out_max if last_busy else line - 1 + stalls
    writer.flush(total)
    dram_reads = [(rd.dram_start, rd.last_fetch, rd.words_fetched) for rd in readers] if user else \
        [(0, 0, len(ifmap_pf[ifmap_pf != IDLE])), (0, 0, len(filter_pf[filter_pf != IDLE]))]
    start = min(dram_reads[0][0], dram_reads[1][0])
    stop = max(writer.dram_stop, total)
    return LayerResult(layer.name, total, stop - start, stalls, 100 * layer.macs / (total * r * c),
                       100 * float(np.mean(mapping)), 100 * float(np.mean(utilisation)), (reads[0], reads[1]), writes,
                       tuple((f or 0, l) for f, l in zip(first_use, last_use)),
                       (*dram_reads, (writer.dram_start or 0, writer.dram_stop, writer.words_written)))
