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

from bisect import bisect_left
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .buffers import ReadBuffer, WriteBuffer
from .inputs import Layer, ScaleConfig
from .streams import Streams


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


def _first(flags: np.ndarray, start: int, none: int) -> int:
    """The first index >= start where `flags` is set, or `none`."""
    hit = np.flatnonzero(flags[start:])
    return start + int(hit[0]) if len(hit) else none


def simulate_layer(layer: Layer, config: ScaleConfig, progress: Callable[[int, int], None] | None = None) -> LayerResult:
    """Run one layer; `progress(done, total)` is called per fold."""
    r, c = config.rows, config.cols
    streams = Streams(layer, r, c, config.dataflow)
    user = config.bandwidth is not None
    readers: tuple[ReadBuffer, ...] = ()  # USER bandwidth only: CALC never stalls the reads
    if user:
        ifmap_pf, filter_pf = streams.prefetch()
        readers = (ReadBuffer(config.ifmap_kb * 1024, config.bandwidth[0], ifmap_pf),
                   ReadBuffer(config.filter_kb * 1024, config.bandwidth[1], filter_pf))
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
        blocks = (fold.ifmap.block, fold.filter.block)
        counts = fold.ofmap.per_row
        reads[0] += fold.ifmap.words
        reads[1] += fold.filter.words
        writes_total = fold.ofmap.words
        writes += writes_total + (r + c if config.dataflow == "os" else 0)
        base = line
        rows = len(counts)
        never = rows
        missing = [reader.misses(b) for reader, b in zip(readers, blocks)]
        fold_start_stalls = stalls
        busy_rows, stalls_after = [], []
        if not any(m.any() for m in missing) and writer.absorbs(writes_total):
            writer.absorb(writes_total)  # no miss, no drain: the fold runs without a stall
        else:
            # Visit the lines that write the ofmap or miss in a read SRAM, in order; a read SRAM's misses are
            # found again after each of its window moves (a line that hit before may miss after).
            written = np.flatnonzero(counts)
            next_miss = [_first(m, 0, never) for m in missing]
            at = 0
            while True:
                i = min([int(written[at]) if at < len(written) else never, *next_miss])
                if i == never:
                    break
                at += at < len(written) and written[at] == i
                cycle = base + i + stalls
                worst = writer.serve(int(counts[i]), cycle)
                out_max = max(out_max, cycle + worst)
                for k, reader in enumerate(readers):
                    if next_miss[k] == i:
                        worst = max(worst, reader.serve(blocks[k][i], cycle))
                        missing[k][i + 1:] = reader.misses(blocks[k][i + 1:])
                        next_miss[k] = _first(missing[k], i + 1, never)
                stalls += worst
                busy_rows.append(i)
                stalls_after.append(stalls)

        def issued(row: int) -> int:
            """The cycle line `row` of this fold was issued: its index plus the stalls of the lines before it."""
            before = bisect_left(busy_rows, row)
            return base + row + (stalls_after[before - 1] if before else fold_start_stalls)

        last_busy = bool(busy_rows) and busy_rows[-1] == rows - 1
        for k, operand in enumerate((fold.ifmap, fold.filter, fold.ofmap)):
            if operand.busy is not None:
                # v3 reports when the first and last request were served: a read one cycle after issue
                served = 1 if k < 2 else 0
                first, last = operand.busy
                first_use[k] = issued(first) + served if first_use[k] is None else first_use[k]
                last_use[k] = issued(last) + served
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
    # CALC bandwidth: every word of the operands is fetched once, none in a timed transfer
    dram_reads = [(rd.dram_start, rd.last_fetch, rd.words_fetched) for rd in readers] if user else \
        [(0, 0, words) for words in streams.prefetch_words()]
    start = min(dram_reads[0][0], dram_reads[1][0])
    stop = max(writer.dram_stop, total)
    return LayerResult(layer.name, total, stop - start, stalls, 100 * layer.macs / (total * r * c),
                       100 * float(np.mean(mapping)), 100 * float(np.mean(utilisation)), (reads[0], reads[1]), writes,
                       tuple((f or 0, l) for f, l in zip(first_use, last_use)),
                       (*dram_reads, (writer.dram_start or 0, writer.dram_stop, writer.words_written)))
