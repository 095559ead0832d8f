"""A GEMM shared between threads by its depth (input channels), the partial products summed after.

Threads share a GEMM of one image by its column tiles, or, with too few of those,
by its row tiles (gemm.splits_rows). Sharing row tiles, every thread packs every
column panel: it reads the whole input, half of it from the other core's cache,
where the layer before (a depthwise convolution sharing channels) left it. Where
a thread has few row tiles to sweep each panel (a projection of a 14 x 14 map to
80-96 channels: 5-6 per thread), that reading is a large part of its work, and 2
threads ran such layers of mnasnet1_0 only 1.3-1.5 times as fast as one.

Sharing the depth instead, each thread multiplies its half of the input channels
(the half it wrote itself) by its half of every filter: the kernel runs in two
phases (KernelContext.phases). In the first, the threads share (part, column
tile) units, part 0 adding its product to the bias in C itself, part 1 storing
its product in scratch memory; in the second, they share C's rows, each adding
part 1's product to part 0's and applying the stacked element-wise instructions
as it stores. With one thread the first phase is the plain GEMM and the second
does nothing. Behind a 5x5 depthwise layer on 2 threads (per-kernel cycles, the
best of 3 x 1500 runs interleaved with the row split, 2 vCPUs with AVX-512, a
loaded machine): 480 -> 80 at 14 x 14 from 161 to 120 thousand cycles (1.45x to
1.84x of one thread), 576 -> 96 from 210 to 172 (1.56x to 1.80x), mobilenet_v2's
384 -> 64 from 108 to 80 (1.38x to 1.80x). Placing each part's rows so that a
thread sums where it stored its own product measured no faster. Sharing the
depth of 28 x 28 projections (column tiles shared, 3 and 1.8 input channels per
filter) measured 6-7% faster, within the noise; at 56 x 56 and 112 x 112 slower.
"""
from __future__ import annotations

from typing import Callable

from llvmlite import ir

from ..codegen.kinds import F32, I32, i64, splat_constant
from ..codegen.loops import loop
from ..codegen.module import KernelContext
from .gemm import Epilogue, Gemm, Init, load_vector, offset, shared_units, splits_rows, store_vector

PARTS = 2
"""How many parts the depth is cut into (the first phase's units are parts x column tiles)."""
MAX_ROW_TILES = 16
"""Row tiles (over all threads) below which a GEMM sharing its row tiles shares its depth instead:
fewer than 8 per thread on 2 threads, each thread's packing pass over the whole input is then a
large part of its work. At 7 x 7 (27 to 54 row tiles in the mobile networks) it is not, and sharing
the depth measured no faster."""
DEPTH_PER_ROW = 2
"""Depth per row from which the depth is shared: the second phase moves the partial products
(rows x columns) between the cores and costs one more wait for all threads, so they must be
smaller than the input (depth x columns) each thread no longer reads. Behind a depthwise layer
on 2 threads, 240 -> 80, 184 -> 80 and 192 -> 64 at 14 x 14 (2.3 to 3 per row) took 11-14%
fewer cycles shared by depth (best of 3 x 1200 runs: 75 -> 67, 60 -> 53, 52 -> 45 thousand)."""
MIN_INPUT_BYTES = 64 * 1024
"""Input bytes from which the depth is shared: a squeeze-and-excitation's 1 x 1 map (a vector of
channels) is read in no time whichever thread reads it."""

PartGemm = Callable[[ir.Value, Gemm, ir.Value, Init, tuple[ir.Value, ir.Value]], None]
"""(part, its GEMM, C to write, accumulator start, column tile range) -> emits the product of the
part's input channels by the part's filter columns over those column tiles into C."""


def splits_depth(gemm: Gemm, planes: int) -> bool:
    """Whether the GEMM of a convolution over `planes` (image, group) planes is shared by its depth:
    one plane whose row tiles threads would share (gemm.splits_rows), too few of them for each
    thread's rows to pay for reading the whole input (MAX_ROW_TILES), an input worth not reading
    (MIN_INPUT_BYTES), and a depth of at least DEPTH_PER_ROW per row that cuts into equal parts."""
    return (planes == 1 and splits_rows(gemm) and gemm.row_tiles < MAX_ROW_TILES
            and 4 * gemm.depth * gemm.columns >= MIN_INPUT_BYTES and gemm.depth % PARTS == 0
            and gemm.depth >= DEPTH_PER_ROW * gemm.rows)


def emit_split_depth(ctx: KernelContext, gemm: Gemm, whole: Callable[[], None], part_gemm: PartGemm,
                     c: ir.Value, init: Init, epilogue: Epilogue | None) -> None:
    """The two phases of `gemm` shared by depth (module doc); `whole()` emits the plain GEMM, which
    one thread runs alone. `init` starts part 0's accumulators (the bias), `epilogue` is applied
    to C = part 0 + part 1 in the second phase."""
    builder = ctx.builder
    phase = ctx.phases(2)
    first = builder.icmp_unsigned("==", phase, ir.Constant(I32, 0))
    alone = builder.icmp_unsigned("==", ctx.threads, ir.Constant(I32, 1))
    part_gemm_ = Gemm(gemm.rows, gemm.columns, gemm.depth // PARTS)
    partial = ctx.scratch(gemm.rows * gemm.columns * 4)
    with builder.if_else(alone) as (single, shared):
        with single:
            with builder.if_then(first):
                whole()
        with shared:
            with builder.if_else(first) as (products, total):
                with products:
                    _products(ctx, part_gemm_, part_gemm, c, partial, init)
                with total:
                    _sum(ctx, gemm, c, partial, epilogue)


def _products(ctx: KernelContext, gemm: Gemm, part_gemm: PartGemm, c: ir.Value, partial: ir.Value,
              init: Init) -> None:
    """The first phase: this thread's (part, column tile) units, part-major, each part's column
    tiles one GEMM call: part 0 into C from `init`, part 1 into `partial` from zero."""
    builder = ctx.builder
    zero = splat_constant(F32, 0.0, gemm.lanes)
    with shared_units(ctx, PARTS, gemm.column_tiles, "part") as (part, tiles):
        is_first = builder.icmp_unsigned("==", part, i64(0))
        destination = builder.select(is_first, c, partial)

        def start_at(row: ir.Value, r: int) -> ir.Value:
            return builder.select(is_first, init(row, r), zero)
        part_gemm(part, gemm, destination, start_at, tiles)


def _sum(ctx: KernelContext, gemm: Gemm, c: ir.Value, partial: ir.Value, epilogue: Epilogue | None) -> None:
    """The second phase: this thread's rows of C = epilogue(C + partial)."""
    builder, lanes = ctx.builder, gemm.lanes
    start, stop = ctx.share(gemm.rows)
    full, edge = divmod(gemm.columns, lanes)
    counts = [lanes] * full + ([edge] if edge else [])
    with loop(builder, stop, start, name="row") as row:
        row_at = builder.mul(row, i64(gemm.columns))
        for v, count in enumerate(counts):
            at = builder.add(row_at, i64(v * lanes))
            value = builder.fadd(load_vector(ctx, offset(builder, c, at), lanes, count),
                                 load_vector(ctx, offset(builder, partial, at), lanes, count))
            if epilogue is not None and epilogue.stored is None:
                value = epilogue(value, at, count)
            store_vector(ctx, value, offset(builder, c, at), lanes, count)
        if epilogue is not None and epilogue.stored is not None:  # a costly one: once, over the row
            epilogue.over(builder, c, row_at, 1, gemm.columns, gemm.columns)
