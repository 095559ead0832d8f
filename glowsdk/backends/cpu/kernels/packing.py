"""Operand packing for the GEMM micro-kernel: constants at compile time, activations at run time.

Constant weights are re-laid out once, in numpy, into the panels the
micro-kernel streams through (and appended to the constants region): A as
[row tile][k][MR] (a convolution's filter, paper Figure 6's idea of putting the
SIMD-consumed index innermost) and B as [column tile][k][NR] (a MatMul's
weights), zero-padded to whole tiles so no edge tile loads under a mask.

Activations are packed per column tile at run time into a [k][NR] panel in
scratch memory: the im2col of a convolution fused with packing, so no K x N
im2col matrix is ever materialised. Column n of the GEMM is output position
(oy, ox); k is (input channel, tap). Per tap, vector compares against constant
per-column tables (oy * stride - pad, ox * stride - pad) give which lanes read
inside the input; padding lanes are zero. When the output row is as wide as
the input and strides are 1, the lanes of one vector read consecutive input
elements (a masked vector load); otherwise a masked gather. Contiguous windows of
few taps, and stride-2 windows whose output rows are whole vectors, are instead
packed by the first row tile as it computes (column_source, strided_source).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from ....compiler.ir.function import Weight, base_of
from ..codegen.kinds import F32, I1, I32, I64, PTR, i64, splat_constant, vector_constant
from ..codegen.loops import loop
from ..codegen.module import KernelContext
from .gemm import CACHE_LINE, Gemm, Panel, Source, offset, panel_alignment, prefetch, splat, vector_type

OUTSIDE = -(1 << 24)
"""Table entry of a padding column: outside every input, so its lanes are always zero."""


def constant_filter(instr: Any) -> Weight | None:
    """A convolution's constant filter weight (to pack at compile time), None when it is computed
    at run time."""
    base = base_of(instr.filter)
    if isinstance(base, Weight) and base.role == "constant" and base.value is not None and base is instr.filter:
        return base
    return None


def pack_row_panels(matrix: np.ndarray, tile_rows: int) -> np.ndarray:
    """[M, K] -> [ceil(M / MR), K, MR], zero rows past M."""
    rows, depth = matrix.shape
    tiles, edge = -(-rows // tile_rows), rows % tile_rows
    full = rows - edge
    packed = np.empty((tiles, depth, tile_rows), np.float32)  # each element written once, in one pass
    packed[:full // tile_rows] = matrix[:full].reshape(-1, tile_rows, depth).transpose(0, 2, 1)
    if edge:
        packed[-1, :, :edge] = matrix[full:].T
        packed[-1, :, edge:] = 0
    return packed


def pack_column_panels(matrix: np.ndarray, tile_columns: int, lanes: int) -> np.ndarray:
    """[K, N] -> the flat panels of its column tiles, each [K, NR], except the last, which is only
    as wide as its vectors (`edge_panel_columns`), zero columns past N: a 10-class head read as
    one 48-wide panel would stream 4.8 times its weights."""
    depth, columns = matrix.shape
    full = columns // tile_columns
    panels = [matrix[:, :full * tile_columns].reshape(depth, full, tile_columns).transpose(1, 0, 2).reshape(-1)]
    edge = columns - full * tile_columns
    if edge:
        padded = np.zeros((depth, edge_panel_columns(edge, lanes)), np.float32)
        padded[:, :edge] = matrix[:, full * tile_columns:]
        panels.append(padded.reshape(-1))
    return np.concatenate(panels)


def edge_panel_columns(columns: int, lanes: int) -> int:
    """The width of a compile-time packed panel of `columns` columns: whole vectors."""
    return -(-columns // lanes) * lanes


def column_panels_size(depth: int, columns: int, tile_columns: int, lanes: int) -> int:
    """Elements `pack_column_panels` makes of a [depth, columns] matrix."""
    full, edge = divmod(columns, tile_columns)
    return depth * (full * tile_columns + (edge_panel_columns(edge, lanes) if edge else 0))


@dataclass(frozen=True)
class Window:
    """The im2col geometry of a 2-d convolution over one image (a matrix is a 1 x N image with
    a 1 x 1 window): input planes of height x width, output width, taps, strides, dilations,
    top/left pads."""

    channels: int
    height: int
    width: int
    out_height: int
    out_width: int
    kernel: tuple[int, int] = (1, 1)
    strides: tuple[int, int] = (1, 1)
    dilations: tuple[int, int] = (1, 1)
    pads: tuple[int, int] = (0, 0)

    @property
    def taps(self) -> int:
        return self.kernel[0] * self.kernel[1]

    @property
    def contiguous(self) -> bool:
        """Whether consecutive output columns read consecutive input elements at every tap."""
        return self.strides == (1, 1) and self.out_width == self.width

    @property
    def pointwise(self) -> bool:
        """Whether B is the input matrix itself ([channels, height * width]: 1x1, stride 1, no padding)."""
        return self.contiguous and self.kernel == (1, 1) and self.pads == (0, 0) and \
            self.out_height == self.height


def column_tables(window: Window, gemm: Gemm) -> tuple[list[int], list[int]]:
    """Per GEMM column (padded to whole tiles): oy * stride - pad and ox * stride - pad."""
    total = gemm.column_tiles * gemm.tile_columns
    rows, cols = [OUTSIDE] * total, [OUTSIDE] * total
    for n in range(window.out_height * window.out_width):
        oy, ox = divmod(n, window.out_width)
        rows[n] = oy * window.strides[0] - window.pads[0]
        cols[n] = ox * window.strides[1] - window.pads[1]
    return rows, cols


def emit_pack(ctx: KernelContext, window: Window, gemm: Gemm, source: ir.Value, tile: ir.Value,
              panel: ir.Value, tables: tuple[ir.Value, ir.Value]) -> Panel:
    """Pack column tile `tile` of im2col(`source`) into `panel` ([K][NR], K = channels x taps)."""
    builder, lanes, nr = ctx.builder, gemm.lanes, gemm.tile_columns
    vectors = gemm.tile_vectors
    first = builder.mul(tile, i64(nr))
    bases = table_vectors(ctx, tables, first, gemm)
    plane = window.height * window.width
    kh, kw = window.kernel
    with loop(builder, kh, name="ky") as ky, loop(builder, kw, name="kx") as kx:
        dy64, dx64 = builder.mul(ky, i64(window.dilations[0])), builder.mul(kx, i64(window.dilations[1]))
        dy, dx = builder.trunc(dy64, I32), builder.trunc(dx64, I32)
        masks, offsets = [], []
        for v in range(vectors):
            iy = builder.add(bases[0][v], splat(builder, dy, lanes))
            ix = builder.add(bases[1][v], splat(builder, dx, lanes))
            inside = builder.and_(builder.icmp_unsigned("<", iy, splat_constant(I32, window.height, lanes)),
                                  builder.icmp_unsigned("<", ix, splat_constant(I32, window.width, lanes)))
            masks.append(inside)
            offsets.append(builder.add(builder.mul(iy, splat_constant(I32, window.width, lanes)), ix))
        tap = builder.add(builder.mul(ky, i64(kw)), kx)
        shift = builder.add(builder.mul(builder.sub(dy64, i64(window.pads[0])), i64(window.width)),
                            builder.sub(dx64, i64(window.pads[1])))
        with loop(builder, window.channels, name="ci") as ci:
            channel = offset(builder, source, builder.mul(ci, i64(plane)))
            k = builder.add(builder.mul(ci, i64(window.taps)), tap)
            row = offset(builder, panel, builder.mul(k, i64(nr)))
            for v in range(vectors):
                if window.contiguous:
                    at = builder.add(builder.add(first, i64(v * lanes)), shift)
                    value = _masked_load(ctx, offset(builder, channel, at), masks[v], lanes)
                else:
                    value = masked_gather(ctx, channel, offsets[v], masks[v], lanes)
                builder.store(value, offset(builder, row, v * lanes), align=panel_alignment(nr, lanes))
    return Panel(panel, nr)


FIRST_PASS_TAPS = 9
"""Largest window packed on the first pass (gemm.Source): its taps are unrolled in the k loop,
each with its masks held from the tile's start."""


def first_pass_packs(window: Window, lanes: int) -> bool:
    """Whether a column tile's panel is packed by its first row tile (gemm.Source): windows whose
    columns read consecutive input elements (a masked vector load per tap) and have few taps, or
    read every other element within one output row per vector (`row_strided`)."""
    return unrolled_taps(window) or row_strided(window, lanes)


def unrolled_taps(window: Window) -> bool:
    """Whether the first pass loads with every tap unrolled (`column_source`)."""
    return window.contiguous and window.taps <= FIRST_PASS_TAPS


def row_strided(window: Window, lanes: int) -> bool:
    """Whether each vector of columns lies in one output row (the row is whole vectors) and reads
    every other input element: a stride-2 stem like resnet50's 7x7 over 224 x 224."""
    return window.strides[1] == 2 and window.out_width % lanes == 0


def first_pass_source(ctx: KernelContext, window: Window, gemm: Gemm, source: ir.Value, tile: ir.Value,
                      tables: tuple[ir.Value, ir.Value]) -> Source:
    """The gemm.Source of column tile `tile` of im2col(`source`) for a window first_pass_packs accepts."""
    if unrolled_taps(window):
        return column_source(ctx, window, gemm, source, tile, tables)
    return strided_source(ctx, window, gemm, source, tile, tables)


def strided_source(ctx: KernelContext, window: Window, gemm: Gemm, source: ir.Value, tile: ir.Value,
                   tables: tuple[ir.Value, ir.Value]) -> Source:
    """Column tile `tile` of a `row_strided` window as a gemm.Source: a loop iteration per (input
    channel, filter row), a step per filter column. A vector of B is two masked loads of 16
    consecutive input elements and one shuffle keeping the even ones, instead of a gather."""
    builder, lanes = ctx.builder, gemm.lanes
    first = builder.mul(tile, i64(gemm.tile_columns))
    kh, kw = window.kernel
    vectors = range(gemm.tile_vectors)
    rows, cols = table_vectors(ctx, tables, first, gemm)
    top = [builder.sext(builder.extract_element(row, ir.Constant(I32, 0)), I64) for row in rows]
    left = [builder.sext(builder.extract_element(col, ir.Constant(I32, 0)), I64) for col in cols]
    inside = [[builder.icmp_unsigned("<", builder.add(cols[v], splat_constant(I32, kx * window.dilations[1], lanes)),
                                     splat_constant(I32, window.width, lanes)) for v in vectors] for kx in range(kw)]
    plane = window.height * window.width
    no, everywhere = (splat_constant(I1, bit, lanes) for bit in (0, 1))
    halves = [vector_constant(I32, [j // 2 + half * lanes // 2 if j % 2 == 0 else lanes for j in range(lanes)])
              for half in (0, 1)]
    evens = vector_constant(I32, range(0, 2 * lanes, 2))

    def start(iteration: ir.Value, v: int) -> tuple[ir.Value, ir.Value]:
        """Where vector v of filter column 0 reads in `iteration`, and whether its row is inside."""
        channel, ky = builder.udiv(iteration, i64(kh)), builder.urem(iteration, i64(kh))
        iy = builder.add(top[v], builder.mul(ky, i64(window.dilations[0])))
        at = builder.add(builder.add(builder.mul(channel, i64(plane)), builder.mul(iy, i64(window.width))), left[v])
        return at, builder.icmp_unsigned("<", iy, i64(window.height))

    def load(iteration: ir.Value, kx: int, v: int) -> ir.Value:
        at, row_inside = start(iteration, v)
        mask = builder.and_(inside[kx][v], builder.select(row_inside, everywhere, no))
        pointer = offset(builder, source, builder.add(at, i64(kx * window.dilations[1])))
        low, high = (_masked_load(ctx, offset(builder, pointer, half * lanes),
                                  builder.shuffle_vector(mask, no, halves[half]), lanes) for half in (0, 1))
        return builder.shuffle_vector(low, high, evens)

    def prefetch_row(iteration: ir.Value) -> None:
        later = builder.add(iteration, i64(-(-PREFETCH_STEPS // kw)))
        for v in vectors:
            pointer = offset(builder, source, start(later, v)[0])
            for line in range(0, 2 * lanes + (kw - 1) * window.dilations[1] + CACHE_LINE // 4, CACHE_LINE // 4):
                prefetch(ctx, offset(builder, pointer, line))
    return Source(kw, load, prefetch_row)


def column_source(ctx: KernelContext, window: Window, gemm: Gemm, source: ir.Value, tile: ir.Value,
                  tables: tuple[ir.Value, ir.Value]) -> Source:
    """Column tile `tile` of im2col(`source`) as a gemm.Source (a loop iteration per input channel,
    a step per tap): each tap's lane masks are computed here, once per tile."""
    builder, lanes = ctx.builder, gemm.lanes
    first = builder.mul(tile, i64(gemm.tile_columns))
    kh, kw = window.kernel
    masks, shifts = [], []
    for rows, cols in zip(*table_vectors(ctx, tables, first, gemm)):
        for ky in range(kh):
            for kx in range(kw):
                dy, dx = ky * window.dilations[0], kx * window.dilations[1]
                iy = builder.add(rows, splat_constant(I32, dy, lanes))
                ix = builder.add(cols, splat_constant(I32, dx, lanes))
                masks.append(builder.and_(builder.icmp_unsigned("<", iy, splat_constant(I32, window.height, lanes)),
                                          builder.icmp_unsigned("<", ix, splat_constant(I32, window.width, lanes))))
    for ky in range(kh):
        for kx in range(kw):
            shifts.append((ky * window.dilations[0] - window.pads[0]) * window.width +
                          kx * window.dilations[1] - window.pads[1])
    plane = window.height * window.width

    def load(channel: ir.Value, tap: int, v: int) -> ir.Value:
        at = builder.add(builder.add(builder.mul(channel, i64(plane)), first), i64(v * lanes + shifts[tap]))
        return _masked_load(ctx, offset(builder, source, at), masks[v * window.taps + tap], lanes)

    ahead = -(-PREFETCH_STEPS // window.taps)
    low, high = min(shifts), max(shifts) + gemm.tile_columns

    def prefetch_channel(channel: ir.Value) -> None:
        # `ahead` channels on, past the last one: the next column tiles' first channels (a 1x1
        # convolution over 16 or 32 channels would otherwise prefetch nothing it reads)
        target = builder.add(channel, i64(ahead))
        tiles, within = builder.udiv(target, i64(window.channels)), builder.urem(target, i64(window.channels))
        column = builder.add(first, builder.mul(tiles, i64(gemm.tile_columns)))
        later = offset(builder, source, builder.add(builder.mul(within, i64(plane)), column))
        for line in range(low, high + CACHE_LINE // 4, CACHE_LINE // 4):
            prefetch(ctx, offset(builder, later, line))
    return Source(window.taps, load, prefetch_channel)


PREFETCH_STEPS = 32
"""How many k steps ahead the first pass prefetches its input (a channel's rows for the tile):
about one memory latency of FMA work (12 cycles a step)."""


def table_vectors(ctx: KernelContext, tables: tuple[ir.Value, ir.Value], first: ir.Value,
                  gemm: Gemm) -> tuple[list[ir.Value], list[ir.Value]]:
    """The row and the column table entries of the tile starting at column `first`, a vector of
    `lanes` columns each."""
    builder, lanes = ctx.builder, gemm.lanes
    ivec = ir.VectorType(I32, lanes)
    rows, cols = ([builder.load(builder.gep(table, [i64(0), builder.add(first, i64(v * lanes))], inbounds=True,
                                            source_etype=table.value_type), typ=ivec, align=4)
                   for v in range(gemm.tile_vectors)] for table in tables)
    return rows, cols


def _masked_load(ctx: KernelContext, pointer: ir.Value, mask: ir.Value, lanes: int) -> ir.Value:
    vector = vector_type(lanes)
    function = ctx.declare(f"llvm.masked.load.v{lanes}f32.p0",
                           ir.FunctionType(vector, [PTR, I32, ir.VectorType(I1, lanes), vector]))
    return ctx.builder.call(function, [pointer, ir.Constant(I32, 4), mask, splat_constant(F32, 0.0, lanes)])


def masked_gather(ctx: KernelContext, base: ir.Value, offsets: ir.Value, mask: ir.Value, lanes: int) -> ir.Value:
    """base[offsets[j]] where mask[j], else 0."""
    builder = ctx.builder
    vector = vector_type(lanes)
    pointers_type = ir.VectorType(PTR, lanes)
    function = ctx.declare(f"llvm.masked.gather.v{lanes}f32.v{lanes}p0",
                           ir.FunctionType(vector, [pointers_type, I32, ir.VectorType(I1, lanes), vector]))
    wide = builder.sext(offsets, ir.VectorType(I64, lanes))
    start = splat(builder, builder.ptrtoint(base, I64), lanes)
    addresses = builder.add(start, builder.mul(wide, splat_constant(I64, 4, lanes)))
    pointers = builder.inttoptr(addresses, pointers_type)
    return builder.call(function, [pointers, ir.Constant(I32, 4), mask, splat_constant(F32, 0.0, lanes)])


def table_pair(ctx: KernelContext, window: Window, gemm: Gemm) -> tuple[ir.Value, ir.Value]:
    """The per-column tables of `window` as module constants."""
    rows, cols = column_tables(window, gemm)
    return ctx.table("rows", I32, rows), ctx.table("cols", I32, cols)

