"""A register-blocked float32 GEMM on explicit LLVM vectors: C = A @ B (+ bias per row).

The micro-kernel keeps an MR x NV tile of C (MR rows, NV vectors of `lanes`
columns: NR = NV * lanes) in vector registers for the whole K loop: per k it
loads NV vectors of B, broadcasts MR scalars of A and issues MR * NV fused
multiply-adds (llvm.fma), so the FMA units, not memory, set the pace (paper
5.1; the MR x NV shape comes from the register count, target.py). B is read
from a panel of NR columns laid out [k][NR] (packed at compile time for
constant weights, at run time by a packer into scratch memory, packing.py),
so each k is one contiguous, aligned load per vector. A is read with any row
and k strides: compile-time packed [tile][k][MR] panels (one stream) or a
row-major matrix.

Everything is a compile-time constant, so the tiles at the edges are separate
specialised code: the last column tile loads and stores its partial last vector
under a constant mask (llvm.masked.load/store), the last row tile stores only
its rows. The column tiles are the unit of work threads share; the panel of a
tile is packed once and reused by every row tile while it is hot in cache;
when a GEMM has too few column tiles to share, threads share its row tiles.
The bias initialises the accumulators, and `epilogue` (the element-wise
instructions stacked onto the kernel, e.g. a ReLU) transforms each vector as it
is stored, so a Conv + bias + ReLU touches its output once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable

from llvmlite import ir

from ..codegen.kinds import F32, I1, I32, I64, PTR, i64, splat_constant, vector_constant
from ..codegen.loops import loop
from ..codegen.module import KernelContext
from ..codegen.target import VectorTarget, host_vectors

Count = int | ir.Value
"""Lanes in use of a vector: the first `count`, or a run-time <lanes x i1> mask of them."""
Stored = Callable[[ir.Value, ir.Value, ir.Value, ir.Value, int], None]
"""(pointer to C's first element, its element index in C, rows, columns, row stride in elements) ->
applies an epilogue in place to that rectangle of C, already stored."""


@dataclass(frozen=True)
class Epilogue:
    """The element-wise work applied to each C vector as it is stored: `apply(vector, element index in C
    of its first lane, lanes in use)` -> the vector to store. A costly one (a polynomial exp, tanh or
    erf) has `stored` too: one function of the kernel's own that applies it in place to a rectangle
    of C just stored (still in L1), which every tile variant but the full one calls (micro_kernel).
    Copied into every register of every tile variant, efficientnet_b0's SiLUs made compiles 2-3x
    longer; copied once per tile variant, its LLVM IR still grew from 54k to 87k lines."""
    apply: Callable[[ir.Value, ir.Value, Count], ir.Value]
    stored: Stored | None = None

    def __call__(self, vector: ir.Value, at: ir.Value, count: Count) -> ir.Value:
        return self.apply(vector, at, count)

    def over(self, builder: ir.IRBuilder, c: ir.Value, at: ir.Value, rows: int | ir.Value,
             columns: int | ir.Value, ldc: int) -> None:
        """Apply in place to C[at + r * ldc + j] for r < rows, j < columns, stored before (`stored`)."""
        rows = i64(rows) if isinstance(rows, int) else rows
        columns = i64(columns) if isinstance(columns, int) else columns
        self.stored(offset(builder, c, at), at, rows, columns, ldc)

    def shifted(self, builder: ir.IRBuilder, start: ir.Value) -> Epilogue:
        """The same work on C seen from element `start` on (an image's or a batch's C within the whole)."""
        stored = None
        if self.stored is not None:
            def stored(pointer: ir.Value, at: ir.Value, rows: ir.Value, columns: ir.Value, ldc: int) -> None:
                self.stored(pointer, builder.add(start, at), rows, columns, ldc)
        return Epilogue(lambda vector, at, count: self.apply(vector, builder.add(start, at), count), stored)


@dataclass(frozen=True)
class Panel:
    """Where a micro-kernel reads its operand: a base pointer, element strides per row (A) or per
    k step, for B whether the partial last vector must be loaded under a mask, and whether the
    panel is `streamed`: a compile-time packed constant read front to back once per run, straight
    from memory (see PREFETCH_BYTES)."""

    pointer: ir.Value
    k_stride: int
    row_stride: int = 0
    masked: bool = False
    streamed: bool = False
    edge_k_stride: int = 0
    """The k stride of the edge column tile's panel where it is packed narrower (packing.py's
    `pack_column_panels`), 0 where it is as wide as the others."""


PREFETCH_BYTES = 2048
"""How far ahead of the k loop a streamed panel is prefetched. A network's weights do not stay
in cache from one run to the next, and the hardware prefetcher restarts at every 4 KiB page, so
without it each page of a filter panel begins with misses to memory: resnet50's convolutions at
batch 1 went from 63-65 to 58.5-59.5 ms. 2 KiB is about one memory latency of k steps."""
CACHE_LINE = 64
"""Bytes per cache line: one prefetch per line a k step reads."""


class TileGrid:
    """C's tiling, from `rows`, `columns`, `tile_rows`, `tile_vectors` and `lanes` (which the
    float and the int8 GEMM define): column tiles of `tile_columns`, row tiles of `tile_rows`."""

    rows: int
    columns: int

    @property
    def lanes(self) -> int:
        return host_vectors().lanes

    @property
    def tile_columns(self) -> int:
        return self.tile_vectors * self.lanes

    @property
    def column_tiles(self) -> int:
        return -(-self.columns // self.tile_columns)

    @property
    def row_tiles(self) -> int:
        return -(-self.rows // self.tile_rows)

    def edge_columns(self) -> int:
        """Columns in the last column tile."""
        return self.columns - (self.column_tiles - 1) * self.tile_columns


@dataclass(frozen=True)
class Gemm(TileGrid):
    """The sizes of one C = A @ B and the register tile chosen for them (`choose_tile`)."""

    rows: int
    columns: int
    depth: int

    @property
    def shape(self) -> tuple[int, int]:
        """(MR, NV) of the register tile."""
        return choose_tile(self.rows, self.columns)

    @property
    def tile_rows(self) -> int:
        """MR, or fewer for a matrix with fewer rows (a GEMV keeps no idle accumulators)."""
        return min(self.shape[0], self.rows)

    @property
    def tile_vectors(self) -> int:
        return self.shape[1]

    def flops(self) -> int:
        return 2 * self.rows * self.columns * self.depth


TILE_SHAPES: dict[int, tuple[tuple[int, int], ...]] = {
    32: ((8, 3), (6, 4)),
    16: ((6, 2), (4, 3)),
}
"""Register tiles (MR, NV) per vector register count, the usual one first; each leaves room for
its NV vectors of B and one broadcast of A. 32 registers (AVX-512, NEON): 24 accumulators. 16
(AVX2): 12 accumulators, as BLIS's Haswell kernel (6 x 16); (4, 3) fills all 16 registers and
loads one vector fewer per 12 FMAs."""
FMA_PIPELINE = 8
"""Independent FMAs needed in flight to keep the FMA units busy (latency 4 x 2 units): a tile
with fewer accumulators takes as long as one with this many."""


def choose_tile(rows: int, columns: int) -> tuple[int, int]:
    """The register tile of an rows x columns C: the fewest FMA issue slots over all tiles, edge
    tiles included (a tile of r rows and v vectors costs max(r * v, FMA_PIPELINE)); on a tie, one
    column tile beats several (each A panel is then streamed once: a 7 x 7 output, 49 columns, is
    one 6 x 4 tile wide but a 48-column and a 1-column 8 x 3 tile), then the usual tile."""
    return _choose_tile(rows, columns, host_vectors())


@lru_cache(maxsize=None)
def _choose_tile(rows: int, columns: int, target: VectorTarget) -> tuple[int, int]:
    shapes = TILE_SHAPES[32 if target.registers >= 32 else 16]
    vectors = -(-columns // target.lanes)

    def cost(shape: tuple[int, int]) -> tuple[int, bool, int]:
        mr, nv = min(shape[0], rows), shape[1]
        row_sizes = {mr: rows // mr, rows % mr: 1} if rows % mr else {mr: rows // mr}
        column_sizes = {nv: vectors // nv, vectors % nv: 1} if vectors % nv else {nv: vectors // nv}
        slots = sum(max(r * v, FMA_PIPELINE) * rn * vn for r, rn in row_sizes.items() for v, vn in column_sizes.items())
        return slots, sum(column_sizes.values()) > 1, shapes.index(shape)
    return min(shapes, key=cost)


def vector_type(lanes: int) -> ir.VectorType:
    return ir.VectorType(F32, lanes)


def lane_mask(lanes: int, count: int) -> ir.Constant:
    """The constant mask enabling the first `count` lanes."""
    return vector_constant(I1, [1] * count + [0] * (lanes - count))


def splat(builder: ir.IRBuilder, value: ir.Value, lanes: int) -> ir.Value:
    """`value` in every lane."""
    start = splat_constant(value.type, 0, lanes)
    single = builder.insert_element(start, value, ir.Constant(I32, 0))
    return builder.shuffle_vector(single, start, splat_constant(I32, 0, lanes))


def offset(builder: ir.IRBuilder, pointer: ir.Value, elements: int | ir.Value) -> ir.Value:
    """`pointer` advanced by `elements` float32 elements."""
    if isinstance(elements, int):
        if elements == 0:
            return pointer
        elements = i64(elements)
    return builder.gep(pointer, [elements], inbounds=True, source_etype=F32)


def load_vector(ctx: KernelContext, pointer: ir.Value, lanes: int, count: Count, align: int = 4) -> ir.Value:
    """`count` <= lanes floats from `pointer` (the rest zero), masked when partial (`count` a mask:
    the lanes it enables)."""
    vector = vector_type(lanes)
    if isinstance(count, int) and count == lanes:
        return ctx.builder.load(pointer, typ=vector, align=align)
    masked = ctx.declare(f"llvm.masked.load.v{lanes}f32.p0",
                         ir.FunctionType(vector, [PTR, I32, ir.VectorType(I1, lanes), vector]))
    mask = lane_mask(lanes, count) if isinstance(count, int) else count
    return ctx.builder.call(masked, [pointer, ir.Constant(I32, align), mask, splat_constant(F32, 0.0, lanes)])


def masked_load(ctx: KernelContext, pointer: ir.Value, mask: list[bool], lanes: int) -> ir.Value:
    """The lanes of `pointer`'s vector that `mask` enables, zero in the others (whose memory is not
    touched, so they may lie outside any tensor)."""
    vector = vector_type(lanes)
    function = ctx.declare(f"llvm.masked.load.v{lanes}f32.p0",
                           ir.FunctionType(vector, [PTR, I32, ir.VectorType(I1, lanes), vector]))
    bits = ir.Constant(ir.VectorType(I1, lanes), [int(bit) for bit in mask])
    return ctx.builder.call(function, [pointer, ir.Constant(I32, 4), bits, ir.Constant(vector, [0.0] * lanes)])


def store_vector(ctx: KernelContext, value: ir.Value, pointer: ir.Value, lanes: int, count: Count) -> None:
    """Store the first `count` lanes of `value` at `pointer` (`count` a mask: the lanes it enables)."""
    if isinstance(count, int) and count == lanes:
        ctx.builder.store(value, pointer, align=4)
        return
    masked = ctx.declare(f"llvm.masked.store.v{lanes}f32.p0",
                         ir.FunctionType(ir.VoidType(), [value.type, PTR, I32, ir.VectorType(I1, lanes)]))
    mask = lane_mask(lanes, count) if isinstance(count, int) else count
    ctx.builder.call(masked, [value, pointer, ir.Constant(I32, 4), mask])


def panel_alignment(row_floats: int, lanes: int) -> int:
    """The alignment in bytes of every vector of a scratch panel with rows of `row_floats` floats
    (its base 64-byte aligned): the largest power of two dividing both a row's and a vector's bytes,
    64 at most (a 3-vector row of 4 lanes is 48 bytes: 16-byte aligned)."""
    common = math.gcd(row_floats * 4, lanes * 4, 64)
    return common & -common


def fma(ctx: KernelContext, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
    function = ctx.declare(f"llvm.fma.v{a.type.count}f32", ir.FunctionType(a.type, [a.type] * 3))
    return ctx.builder.call(function, [a, b, c])


def prefetch(ctx: KernelContext, pointer: ir.Value) -> None:
    """Ask for the cache line at `pointer` (a read, kept in every cache level)."""
    function = ctx.declare("llvm.prefetch.p0", ir.FunctionType(ir.VoidType(), [PTR, I32, I32, I32]))
    ctx.builder.call(function, [pointer, ir.Constant(I32, 0), ir.Constant(I32, 3), ir.Constant(I32, 1)])


@dataclass(frozen=True)
class Source:
    """B where it lives (the convolution's input), for the first row tile of a column tile, which
    stores what it loads into the panel that the other row tiles then stream: packing done on the
    first pass, its loads and stores overlapping that tile's FMAs instead of a pass of its own.
    A loop iteration covers `steps` consecutive k (a convolution's taps of one input channel),
    `load(iteration, step, vector)` gives one vector of B."""

    steps: int
    load: Callable[[ir.Value, int, int], ir.Value]
    prefetch: Callable[[ir.Value], None] | None = None
    """Called once per iteration: prefetch what a later iteration loads (the input may come from
    memory: a batch's activations outgrow the caches)."""


def micro_kernel(ctx: KernelContext, gemm: Gemm, a: Panel, a_rows: int, b: Panel, columns: int,
                 init: Callable[[int], ir.Value | list[ir.Value]], c: ir.Value, c_at: ir.Value, ldc: int, c_rows: int,
                 epilogue: Epilogue | None, source: Source | None = None, hot: bool = False) -> None:
    """One MR x NV tile: C[r, :columns] = epilogue(init(r) + sum_k A[r, k] * B[k, :columns]) for
    r < c_rows. A rows at or past `a_rows` repeat the last real row (never read out of bounds).
    With a `source`, B is read from it and stored into panel `b` on the way. A costly epilogue runs
    after the tile's stores: inline in the `hot` (full) tile, else through `epilogue.stored`."""
    builder, lanes = ctx.builder, gemm.lanes
    vectors = -(-columns // lanes)
    counts = [min(lanes, columns - v * lanes) for v in range(vectors)]
    steps = source.steps if source is not None else 1
    start = [first if isinstance(first, list) else [first] * vectors  # a row's vectors start alike, or as listed
             for first in map(init, range(gemm.tile_rows))]
    before = builder.block
    body = builder.append_basic_block("micro.k")
    after = builder.append_basic_block("micro.done")
    builder.branch(body)
    builder.position_at_end(body)
    iteration = builder.phi(I64, name="k")
    iteration.add_incoming(i64(0), before)
    acc = [[builder.phi(vector_type(lanes), name=f"c{r}_{v}") for v in range(vectors)] for r in range(gemm.tile_rows)]
    for r in range(gemm.tile_rows):
        for v in range(vectors):
            acc[r][v].add_incoming(start[r][v], before)
    sums = [row[:] for row in acc]
    if source is not None and source.prefetch is not None:
        source.prefetch(iteration)
    for step in range(steps):
        k = builder.add(builder.mul(iteration, i64(steps)), i64(step)) if steps > 1 else iteration
        b_row = offset(builder, b.pointer, builder.mul(k, i64(b.k_stride)))
        if source is None:
            b_vectors = [load_vector(ctx, offset(builder, b_row, v * lanes), lanes, counts[v] if b.masked else lanes)
                         for v in range(vectors)]
        else:
            b_vectors = [source.load(iteration, step, v) for v in range(vectors)]
            for v, value in enumerate(b_vectors):
                builder.store(value, offset(builder, b_row, v * lanes), align=panel_alignment(b.k_stride, lanes))
        a_k = offset(builder, a.pointer, builder.mul(k, i64(a.k_stride)))
        for panel, at in ((a, a_k), (b, b_row)):
            if panel.streamed:
                for line in range(0, panel.k_stride, CACHE_LINE // 4):
                    prefetch(ctx, offset(builder, at, PREFETCH_BYTES // 4 + line))
        for r in range(gemm.tile_rows):
            scalar = builder.load(offset(builder, a_k, min(r, a_rows - 1) * a.row_stride), typ=F32)
            broadcast = splat(builder, scalar, lanes)
            sums[r] = [fma(ctx, broadcast, b_vectors[v], sums[r][v]) for v in range(vectors)]
    following = builder.add(iteration, i64(1), flags=("nuw", "nsw"))
    latch = builder.block
    iteration.add_incoming(following, latch)
    for r in range(gemm.tile_rows):
        for v in range(vectors):
            acc[r][v].add_incoming(sums[r][v], latch)
    builder.cbranch(builder.icmp_unsigned("<", following, i64(gemm.depth // steps)), body, after)
    builder.position_at_end(after)
    deferred = epilogue is not None and epilogue.stored is not None
    for r in range(c_rows):
        for v in range(vectors):
            at = builder.add(c_at, i64(r * ldc + v * lanes))
            value = sums[r][v] if epilogue is None or deferred else epilogue(sums[r][v], at, counts[v])
            store_vector(ctx, value, offset(builder, c, at), lanes, counts[v])
    if not deferred:
        return
    if not hot:  # an edge or packing tile just stored, in L1, through the kernel's one copy of the epilogue
        epilogue.over(builder, c, c_at, c_rows, columns, ldc)
        return
    # The full tile, most of the work, keeps a copy of its own: calling the subroutine from it too cost
    # 3-6% more cycles on 16 -> 96, 24 -> 144 and 40 -> 240 1x1 SiLU convolutions (K = 16-40).
    with loop(builder, c_rows, name="epilogue.r") as r:  # the rows just stored, each through one copy
        row = builder.add(c_at, builder.mul(r, i64(ldc)))
        for v in range(vectors):
            at = builder.add(row, i64(v * lanes))
            pointer = offset(builder, c, at)
            store_vector(ctx, epilogue(load_vector(ctx, pointer, lanes, counts[v]), at, counts[v]), pointer, lanes,
                         counts[v])


@contextmanager
def shared_units(ctx: KernelContext, units: int, column_tiles: int,
                 name: str) -> Iterator[tuple[ir.Value, tuple[ir.Value, ir.Value]]]:
    """Loop over the units (an image's plane, a depth part: `column_tiles` column tiles each) holding this
    thread's share of all `units` x `column_tiles` tiles; yields each unit and the [low, high) of its tiles
    in the share. Sharing tiles rather than units splits evenly where one unit's tiles do not (17 tiles
    of a 28 x 28 output: 9 and 8 on 2 threads)."""
    builder = ctx.builder
    tiles = i64(column_tiles)
    start, stop = ctx.share(units * column_tiles)
    last = builder.udiv(builder.add(stop, i64(column_tiles - 1)), tiles)
    with loop(builder, last, builder.udiv(start, tiles), name=name) as unit:
        base = builder.mul(unit, tiles)
        low, high = builder.sub(start, base), builder.sub(stop, base)
        low = builder.select(builder.icmp_signed(">", low, i64(0)), low, i64(0))
        high = builder.select(builder.icmp_signed("<", high, tiles), high, tiles)
        yield unit, (low, high)


Init = Callable[[ir.Value, int], ir.Value]
"""(first row of the tile, row within the tile) -> the accumulator's starting vector."""


def bias_init(ctx: KernelContext, bias: ir.Value | None, rows: int) -> Init:
    """Accumulators start at bias[row] (clamped to the last real row), or zero without a bias."""
    lanes = host_vectors().lanes
    zero = splat_constant(F32, 0.0, lanes)

    def init(first: ir.Value, r: int) -> ir.Value:
        if bias is None:
            return zero
        builder = ctx.builder
        row = builder.add(first, i64(r))
        row = builder.select(builder.icmp_unsigned("<", row, i64(rows)), row, i64(rows - 1))
        return splat(builder, builder.load(offset(builder, bias, row), typ=F32), lanes)
    return init


ColumnInit = Callable[[ir.Value, int], list[ir.Value]]
"""(column tile index, columns in the tile) -> the starting vector of each of the tile's vectors,
alike in every row."""


RowsOf = Callable[[ir.Value], Panel]
"""Row tile index -> its A panel."""


TileCode = Callable[[Any, ir.Value, ir.Value, int, int], None]
"""(column tile state, column tile index, row tile index, columns in the tile, rows in the tile)
-> emits one tile; the sizes are compile-time constants (edge tiles are separate code)."""


def each_tile(ctx: KernelContext, grid: TileGrid, column_range: tuple[ir.Value, ir.Value],
              row_range: tuple[ir.Value, ir.Value], enter_column: Callable[..., Any], tile: TileCode,
              block: int = 1, state_of: Callable[[ir.Value], Any] | None = None,
              first_tile: TileCode | None = None) -> None:
    """Emit `tile` for every column tile in `column_range` and every row tile in `row_range`.
    `block` 1: per column tile, `enter_column(nt)` runs first (packing its B panel) and what it
    returns is passed to `tile` for each row tile. `block` > 1: column tiles go in blocks; per
    block, `enter_column(nt, slot)` runs for each of its tiles (packing into `slot`), then each
    row tile sweeps the block's column tiles with state `state_of(slot)`, so a row tile writes C
    in runs of block x NR columns. The last row and column tiles get their own specialised code.
    `first_tile`, if given, emits the first row tile of the range instead of `tile` (the tile that
    packs the panel when packing is done on the first pass, see Source)."""
    builder = ctx.builder

    def emit(state: Any, nt: ir.Value, mt: ir.Value, columns: int, rows: int, first: bool) -> None:
        (first_tile if first else tile)(state, nt, mt, columns, rows)

    if block == 1:
        with loop(builder, column_range[1], column_range[0], name="nt") as nt:
            state = enter_column(nt)
            _row_tiles(ctx, grid, row_range, first_tile is not None, lambda mt, rows, first: _column_tiles(
                ctx, grid, (nt, builder.add(nt, i64(1))), lambda n, columns: emit(state, n, mt, columns, rows, first)))
        return
    start, stop = column_range
    blocks = builder.udiv(builder.add(builder.sub(stop, start), i64(block - 1)), i64(block))
    with loop(builder, blocks, name="nb") as nb:
        begin = builder.add(start, builder.mul(nb, i64(block)))
        end = builder.add(begin, i64(block))
        end = builder.select(builder.icmp_unsigned("<", end, stop), end, stop)
        with loop(builder, end, begin, name="pack") as nt:
            enter_column(nt, builder.sub(nt, begin))
        _row_tiles(ctx, grid, row_range, first_tile is not None, lambda mt, rows, first: _column_tiles(
            ctx, grid, (begin, end),
            lambda nt, columns: emit(state_of(builder.sub(nt, begin)), nt, mt, columns, rows, first)))


def _row_tiles(ctx: KernelContext, grid: TileGrid, row_range: tuple[ir.Value, ir.Value], peel: bool,
               body: Callable[[ir.Value, int, bool], None]) -> None:
    """body(mt, rows, first) for the row tiles in `row_range`: a loop over the full ones, the edge
    tile apart; with `peel`, the first tile of the range apart too (first is True only there)."""
    builder = ctx.builder
    full_rows, edge_rows = divmod(grid.rows, grid.tile_rows)
    start, stop = row_range
    if full_rows:
        last_full = i64(full_rows)
        bound = builder.select(builder.icmp_unsigned("<", stop, last_full), stop, last_full)
        if peel:
            with builder.if_then(builder.icmp_unsigned("<", start, bound)):
                body(start, grid.tile_rows, True)
            start = builder.add(start, i64(1))
        with loop(builder, bound, start, name="mt") as mt:
            body(mt, grid.tile_rows, False)
    if edge_rows:
        with builder.if_then(builder.icmp_unsigned("==", stop, i64(grid.row_tiles))):
            if not peel:
                body(i64(full_rows), edge_rows, False)
                return
            alone = builder.icmp_unsigned("==", row_range[0], i64(full_rows))
            with builder.if_else(alone) as (then, otherwise):
                with then:
                    body(i64(full_rows), edge_rows, True)
                with otherwise:
                    body(i64(full_rows), edge_rows, False)


def _column_tiles(ctx: KernelContext, grid: TileGrid, column_range: tuple[ir.Value, ir.Value],
                  body: Callable[[ir.Value, int], None]) -> None:
    """body(nt, columns) for the column tiles in `column_range`, the last (edge) tile apart."""
    builder = ctx.builder
    start, stop = column_range
    edge, nr = grid.edge_columns(), grid.tile_columns
    if edge == nr:
        with loop(builder, stop, start, name="nc") as nt:
            body(nt, nr)
        return
    last = i64(grid.column_tiles - 1)
    if grid.column_tiles > 1:  # one column tile (a 7 x 7 map's 49 columns) has no full one to emit
        bound = builder.select(builder.icmp_unsigned("<", stop, last), stop, last)
        with loop(builder, bound, start, name="nc") as nt:
            body(nt, nr)
    with builder.if_then(builder.icmp_unsigned("==", stop, i64(grid.column_tiles))):
        body(last, edge)


def emit_gemm(ctx: KernelContext, gemm: Gemm, a_of: RowsOf, a_padded: bool, b_of: Callable[..., Panel],
              c: ir.Value, ldc: int, init: Init, epilogue: Epilogue | None = None, block: int = 1,
              panel_of: Callable[[ir.Value], Panel] | None = None,
              column_range: tuple[ir.Value, ir.Value] | None = None,
              source_of: Callable[[ir.Value], Source] | None = None,
              column_init: ColumnInit | None = None) -> None:
    """C = A @ B over every tile, this thread's share of them (see `splits_rows`), or every row
    tile of the column tiles in `column_range` (a caller sharing work itself). `column_init`,
    if given, starts every row's accumulators instead of `init` (a bias per column).
    `a_padded`: A panels hold zero rows past `rows`, so the last row tile may read them.
    `block` > 1: `b_of(nt, slot)` packs B panels into slots and `panel_of(slot)` reads them
    (each_tile). `source_of(nt)`: the thread's first row tile of column tile nt reads B from this
    Source and fills the panel `b_of` returns (which then packs nothing)."""
    builder = ctx.builder
    mr, nr = gemm.tile_rows, gemm.tile_columns
    rows_shared = column_range is None and splits_rows(gemm)
    if column_range is not None:
        row_range = (i64(0), i64(gemm.row_tiles))
    elif rows_shared:
        column_range, row_range = (i64(0), i64(gemm.column_tiles)), ctx.share(gemm.row_tiles)
    else:
        column_range, row_range = ctx.share(gemm.column_tiles), (i64(0), i64(gemm.row_tiles))

    def tile(panel: Panel, nt: ir.Value, mt: ir.Value, columns: int, c_rows: int,
             source: Source | None = None) -> None:
        if columns < nr and panel.edge_k_stride:
            panel = replace(panel, k_stride=panel.edge_k_stride)
        first = builder.mul(mt, i64(mr))
        c_at = builder.add(builder.mul(nt, i64(nr)), builder.mul(first, i64(ldc)))
        if column_init is not None:
            starts = column_init(nt, columns)

            def start(r: int) -> list[ir.Value]:
                return starts
        else:
            def start(r: int) -> ir.Value:
                return init(first, r)
        micro_kernel(ctx, gemm, a_of(mt), mr if a_padded else c_rows, panel, columns, start,
                     c, c_at, ldc, c_rows, epilogue, source, (columns, c_rows, source) == (nr, mr, None))

    def packing_tile(panel: Panel, nt: ir.Value, mt: ir.Value, columns: int, c_rows: int) -> None:
        tile(panel, nt, mt, columns, c_rows, source_of(nt))
    each_tile(ctx, gemm, column_range, row_range, b_of, tile, 1 if rows_shared else block, panel_of,
              packing_tile if source_of is not None else None)


BLOCK_BYTES = 256 * 1024
"""Packed B panels a thread keeps for its row tiles to sweep (each_tile's block): a quarter of a
1-2 MiB L2, with room for A panels and C."""


def column_block(gemm: Gemm, panel_bytes: int) -> int:
    """Column tiles per block for B panels of `panel_bytes`: as many as BLOCK_BYTES holds."""
    return max(1, min(gemm.column_tiles, BLOCK_BYTES // panel_bytes))


SPLIT_TILES = 8
"""Column tiles below which threads share row tiles instead (see `splits_rows`)."""


def splits_rows(gemm: Gemm) -> bool:
    """Whether threads share the row tiles rather than the column tiles. Column tiles are the
    cheaper unit (each B panel is packed by one thread only), but a deep layer at batch 1 has a
    handful of them (7 x 7 outputs are one full tile of 48 and one of a single column), so there
    every thread packs every panel and takes a share of the rows."""
    return gemm.column_tiles < SPLIT_TILES and gemm.row_tiles > gemm.column_tiles
