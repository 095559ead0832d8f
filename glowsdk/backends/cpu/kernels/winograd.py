"""Winograd F(m x m, 3 x 3): a 3x3 stride-1 convolution in fewer multiply-adds (Lavin & Gray 2016).

The output is cut into m x m tiles. A tile's (m + 2) x (m + 2) input patch d
becomes V = B^T d B, each 3x3 filter g becomes U = G g G^T (at compile time,
in float64, stored as float32), and the tile is Y = A^T M A where, at each of
the (m + 2)^2 positions xi, M[xi] = sum over input channels of U[xi] * V[xi]:
per position a GEMM [C_out, C_in] @ [C_in, tiles] on the register-blocked
micro-kernel (gemm.py). Per output, (m + 2)^2 / m^2 multiply-adds per input
channel instead of 9: F(4 x 4) does 2.25 (4 times fewer), F(2 x 2) 4 (2.25 times
fewer); the transforms add a few additions per input and output element.
onnxruntime's MLAS has no Winograd path. At batch 1, one thread (best of 15), resnet18's
3x3 layers went from 1.49 to 0.95 ms (64 channels, 56 x 56, F(4 x 4)), 1.43 to 0.90 ms
(128, 28 x 28, F(4 x 4)) and 1.58 to 1.15 ms (256, 14 x 14, F(2 x 2)).

A GEMM only reaches the FMA units' pace when each U row meets enough tiles (U is
(m + 2)^2 / 9 times the filter, streamed from memory once per block), so `plan`
takes F(4 x 4) for outputs of at least MIN_TILES 4 x 4 tiles, F(2 x 2) where
only 2 x 2 tiles are that many, and leaves smaller outputs to im2col.

Threads share blocks of tile rows (per image); each block runs three phases in
this thread's scratch: the input transform of its tiles for every input channel
(V, [position][C_in][tiles]), the (m + 2)^2 GEMMs (M, [position][C_out][tiles]),
and the output transform, which adds the bias, interleaves the tiles' columns
back into output rows and applies the stacked element-wise instructions as it
stores (epilogue.py). A block holds at most BLOCK_BYTES of V and M, so both stay
in L2 between phases.

Input patches are loaded with masked gathers, a vector of consecutive tiles of the
block at a time (across tile rows, so every lane works; lanes outside the input
read zero, so padding costs no branches): resnet18's 256-channel 14 x 14 layer
(7 tiles a row) went from 1.15 to 0.93 ms.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from ....graph.types import ElemKind
from ..codegen.kinds import F32, I32, i64
from ..codegen.loops import loop
from ..codegen.module import KernelContext, Step
from ..codegen.target import host_vectors
from .epilogue import stacked_epilogue
from .gemm import (
    Gemm,
    Panel,
    bias_init,
    emit_gemm,
    fma,
    load_vector,
    offset,
    splat,
    store_vector,
)
from .packing import OUTSIDE, constant_filter, masked_gather, pack_row_panels
from .window import window_dims

TRANSFORMS: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {
    2: (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64),
        np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)),
    4: (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                  [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64),
        np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                  [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]], np.float64)),
}
"""Per tile size m: (B^T, G, A^T) of F(m, 3) at the points 0, +-1 (, +-2) and infinity."""

MIN_TILES = 48
"""Tiles per image below which a tile size is not taken: each U row is reused once per tile, and
fewer than about a column tile of them leaves the GEMM waiting on U from memory."""
MIN_CHANNELS = 16
"""Input and output channels below which the transforms cost more than the multiply-adds saved."""
BLOCK_BYTES = 1024 * 1024
"""V and M of one block, at most (about half of a 2 MiB L2)."""


@dataclass(frozen=True)
class Plan:
    """One convolution's Winograd geometry: tile size m, input and output planes, top and left
    pads, channels, tile rows and columns, and tile rows per block."""

    m: int
    height: int
    width: int
    out_height: int
    out_width: int
    top: int
    left: int
    channels: int
    filters: int
    tile_rows: int
    tile_columns: int
    block_rows: int

    @property
    def alpha(self) -> int:
        """m + 2: the side of an input patch and of the transformed grid."""
        return self.m + 2

    @property
    def positions(self) -> int:
        return self.alpha * self.alpha

    @property
    def blocks(self) -> int:
        return -(-self.tile_rows // self.block_rows)

    @property
    def columns(self) -> int:
        """Tiles of a block: the GEMM's columns."""
        return self.block_rows * self.tile_columns

    @property
    def stride(self) -> int:
        """Floats between rows of V and of M: the block's tiles rounded up to whole vectors."""
        lanes = host_vectors().lanes
        return -(-self.columns // lanes) * lanes

    @property
    def block_floats(self) -> int:
        """Floats of a block's V and M."""
        return self.positions * (self.channels + self.filters) * self.stride


def plan(instr: Any) -> Plan | None:
    """The Winograd plan of a float32 3x3 stride-1 undilated ungrouped 2-d convolution with a
    constant filter, enough channels and enough tiles, else None."""
    if instr.types[0].elem is not ElemKind.FLOAT32 or instr.group != 1 or len(instr.input.type.shape) != 4:
        return None
    if constant_filter(instr) is None:
        return None
    _, rows, cols = window_dims(instr)
    if any((d.kernel, d.stride, d.dilation) != (3, 1, 1) for d in (rows, cols)):
        return None
    channels, filters = instr.input.type.shape[1], instr.filter.type.shape[0]
    if min(channels, filters) < MIN_CHANNELS:
        return None
    for m in sorted(TRANSFORMS, reverse=True):
        tile_rows, tile_columns = -(-rows.out // m), -(-cols.out // m)
        if tile_rows * tile_columns < MIN_TILES:
            continue
        per_row = (m + 2) ** 2 * (channels + filters) * tile_columns * 4
        block_rows = max(1, min(tile_rows, BLOCK_BYTES // per_row))
        block_rows = -(-tile_rows // -(-tile_rows // block_rows))
        return Plan(m, rows.size, cols.size, rows.out, cols.out, rows.begin, cols.begin, channels, filters,
                    tile_rows, tile_columns, block_rows)
    return None


def applies(instr: Any) -> bool:
    return plan(instr) is not None


def transformed_filter(value: np.ndarray, m: int, tile_rows: int) -> np.ndarray:
    """[C_out, C_in, 3, 3] -> U = G g G^T per position, each [C_out, C_in] packed into row panels
    ([C_out / MR, C_in, MR], pack_row_panels), positions one after another."""
    _, g, _ = TRANSFORMS[m]
    u = np.einsum("ak,oikl,bl->aboi", g, value.astype(np.float64), g).astype(np.float32)
    alpha = m + 2
    return np.concatenate([pack_row_panels(u[a, b], tile_rows).reshape(-1)
                           for a in range(alpha) for b in range(alpha)])


def _mix(ctx: KernelContext, coefficients: Sequence[float], vectors: Sequence[ir.Value]) -> ir.Value:
    """sum of coefficient * vector over the nonzero coefficients (one add or subtract for +-1, an
    FMA otherwise)."""
    builder = ctx.builder
    total = None
    for c, v in zip(coefficients, vectors):
        if c == 0:
            continue
        if total is None:
            total = v if c == 1 else builder.fmul(v, splat(builder, ir.Constant(F32, float(c)), v.type.count))
        elif c == 1:
            total = builder.fadd(total, v)
        elif c == -1:
            total = builder.fsub(total, v)
        else:
            total = fma(ctx, splat(builder, ir.Constant(F32, float(c)), v.type.count), v, total)
    return total


def _sandwich(ctx: KernelContext, left: np.ndarray, grid: list[list[ir.Value]]) -> list[list[ir.Value]]:
    """left @ grid @ left^T on a grid of vectors (every lane its own tile)."""
    columns = [[_mix(ctx, row, [grid[i][j] for i in range(len(grid))]) for j in range(len(grid[0]))] for row in left]
    return [[_mix(ctx, row, columns[a]) for row in left] for a in range(len(left))]


def _interleave(ctx: KernelContext, vectors: list[ir.Value]) -> list[ir.Value]:
    """Vectors v_0..v_{k-1} (k a power of two, lane l of v_j the j-th column of tile l) -> k vectors
    holding v_0[0], v_1[0], ..., v_{k-1}[0], v_0[1], ... in order: the tiles' columns as one row."""
    if len(vectors) == 1:
        return vectors
    builder, lanes = ctx.builder, vectors[0].type.count
    evens, odds = _interleave(ctx, vectors[0::2]), _interleave(ctx, vectors[1::2])
    result = []
    for even, odd in zip(evens, odds):
        for part in (0, 1):
            mask = [part * lanes // 2 + i // 2 + (lanes if i % 2 else 0) for i in range(lanes)]
            result.append(builder.shuffle_vector(even, odd, ir.Constant(ir.VectorType(I32, lanes), mask)))
    return result


def emit_winograd(ctx: KernelContext, step: Step) -> None:
    """The kernel of the module doc for `step`'s Conv instruction and its stacked epilogue."""
    instr = step.instrs[0]
    p = plan(instr)
    builder = ctx.builder
    images = instr.input.type.shape[0]
    gemm = Gemm(p.filters, p.columns, p.channels)
    mr = gemm.tile_rows
    weight = constant_filter(instr)
    panels = ctx.constant(weight, "winograd", (p.m, mr), lambda value: transformed_filter(value, p.m, mr))
    x, out = ctx.address(instr.input), ctx.address(instr.operands[0])
    bias = ctx.address(instr.bias) if instr.bias is not None else None
    epilogue = stacked_epilogue(ctx, step)
    scratch = ctx.thread_scratch(p.block_floats * 4)
    v_all = scratch
    m_all = offset(builder, scratch, p.positions * p.channels * p.stride)
    panel_floats = gemm.row_tiles * mr * p.channels
    start, stop = ctx.share(images * p.blocks)
    with loop(builder, stop, start, name="unit") as unit:
        n, block = builder.udiv(unit, i64(p.blocks)), builder.urem(unit, i64(p.blocks))
        first_row = builder.mul(block, i64(p.block_rows))
        image = offset(builder, x, builder.mul(n, i64(p.channels * p.height * p.width)))
        _input_transform(ctx, p, image, first_row, v_all)
        with loop(builder, p.positions, name="xi") as xi:
            u = offset(builder, panels, builder.mul(xi, i64(panel_floats)))
            v = offset(builder, v_all, builder.mul(xi, i64(p.channels * p.stride)))
            c = offset(builder, m_all, builder.mul(xi, i64(p.filters * p.stride)))

            def a_of(mt: ir.Value, u: ir.Value = u) -> Panel:
                return Panel(offset(builder, u, builder.mul(mt, i64(mr * p.channels))), mr, 1, streamed=True)

            def b_of(nt: ir.Value, v: ir.Value = v) -> Panel:
                return Panel(offset(builder, v, builder.mul(nt, i64(gemm.tile_columns))), p.stride)

            emit_gemm(ctx, gemm, a_of, True, b_of, c, p.stride, bias_init(ctx, None, p.filters),
                      column_range=(i64(0), i64(gemm.column_tiles)))
        image_out = builder.mul(n, i64(p.filters * p.out_height * p.out_width))
        _output_transform(ctx, p, m_all, first_row, bias, out, image_out, epilogue)


def _chunks(p: Plan) -> list[tuple[int, int]]:
    """(first tile column, tiles) of each vector of a tile row."""
    lanes = host_vectors().lanes
    return [(t, min(lanes, p.tile_columns - t)) for t in range(0, p.tile_columns, lanes)]


def _input_transform(ctx: KernelContext, p: Plan, image: ir.Value, first_row: ir.Value, v_all: ir.Value) -> None:
    """V[xi][c][tile] = (B^T d B)[xi] for every input channel c and tile of the block starting at
    tile row `first_row`, a vector of consecutive tiles at a time (across tile rows, so every lane
    works): per lane, its tile's top row and left column come from constant tables (left column
    OUTSIDE for the lanes past the block, which read zeros), rows past the output zeros too."""
    builder, lanes = ctx.builder, host_vectors().lanes
    b_t = TRANSFORMS[p.m][0]
    ivec = ir.VectorType(I32, lanes)
    tiles = range(p.stride)
    tops = ctx.table("tops", I32, [(t // p.tile_columns) * p.m if t < p.columns else 0 for t in tiles])
    lefts = ctx.table("lefts", I32, [(t % p.tile_columns) * p.m - p.left if t < p.columns else OUTSIDE
                                     for t in tiles])

    def lane_table(table: ir.Value, first: ir.Value) -> ir.Value:
        pointer = builder.gep(table, [i64(0), first], inbounds=True, source_etype=table.value_type)
        return builder.load(pointer, typ=ivec, align=4)

    def constant(value: int) -> ir.Constant:
        return ir.Constant(ivec, [value] * lanes)

    block_top = builder.trunc(builder.sub(builder.mul(first_row, i64(p.m)), i64(p.top)), I32)
    with loop(builder, p.stride // lanes, name="t") as t:
        first = builder.mul(t, i64(lanes))
        top = builder.add(lane_table(tops, first), splat(builder, block_top, lanes))
        left = lane_table(lefts, first)
        inside_x = [builder.icmp_unsigned("<", builder.add(left, constant(j)), constant(p.width))
                    for j in range(p.alpha)]
        rows = []
        for i in range(p.alpha):
            y = builder.add(top, constant(i))
            rows.append((builder.icmp_unsigned("<", y, constant(p.height)),
                         builder.add(builder.mul(y, constant(p.width)), left)))
        with loop(builder, p.channels, name="c") as c:
            plane = offset(builder, image, builder.mul(c, i64(p.height * p.width)))
            patch = [[masked_gather(ctx, plane, builder.add(at, constant(j)), builder.and_(inside, inside_x[j]),
                                    lanes) for j in range(p.alpha)] for inside, at in rows]
            transformed = _sandwich(ctx, b_t, patch)
            column = builder.add(builder.mul(c, i64(p.stride)), first)
            for a in range(p.alpha):
                for b in range(p.alpha):
                    at = builder.add(column, i64((a * p.alpha + b) * p.channels * p.stride))
                    store_vector(ctx, transformed[a][b], offset(builder, v_all, at), lanes, lanes)


def _output_transform(ctx: KernelContext, p: Plan, m_all: ir.Value, first_row: ir.Value, bias: ir.Value | None,
                      out: ir.Value, image_out: ir.Value, epilogue: Any) -> None:
    """Every output tile of the block: A^T M A + bias, its tiles' rows interleaved into output rows,
    stored through the epilogue (rows and columns past the output dropped)."""
    builder, lanes = ctx.builder, host_vectors().lanes
    a_t = TRANSFORMS[p.m][2]
    plane_out = p.out_height * p.out_width
    with loop(builder, p.filters, name="o") as o, loop(builder, p.block_rows, name="r") as r:
        start = splat(builder, builder.load(offset(builder, bias, o), typ=F32), lanes) if bias is not None else None
        tile_row = builder.add(first_row, r)
        for first, count in _chunks(p):
            column = builder.add(builder.mul(o, i64(p.stride)), builder.add(builder.mul(r, i64(p.tile_columns)),
                                                                          i64(first)))
            grid = [[load_vector(ctx, offset(builder, m_all, builder.add(
                column, i64((a * p.alpha + b) * p.filters * p.stride))), lanes, count)
                for b in range(p.alpha)] for a in range(p.alpha)]
            result = _sandwich(ctx, a_t, grid)
            for i in range(p.m):
                y = builder.add(builder.mul(tile_row, i64(p.m)), i64(i))
                with builder.if_then(builder.icmp_unsigned("<", y, i64(p.out_height))):
                    row = [builder.fadd(v, start) if start is not None else v for v in result[i]]
                    row_at = builder.add(image_out, builder.add(builder.mul(o, i64(plane_out)),
                                                                builder.mul(y, i64(p.out_width))))
                    for q, vector in enumerate(_interleave(ctx, row)):
                        x0 = first * p.m + q * lanes
                        stored = min(lanes, p.out_width - x0)
                        if stored <= 0:
                            continue
                        at = builder.add(row_at, i64(x0))
                        if epilogue is not None and epilogue.stored is None:
                            vector = epilogue(vector, at, stored)
                        store_vector(ctx, vector, offset(builder, out, at), lanes, stored)
        if epilogue is not None and epilogue.stored is not None:  # a costly one: once, over the rows stored
            first_y = builder.mul(tile_row, i64(p.m))
            left = builder.sub(i64(p.out_height), first_y)  # rows of the tile inside the output: 0 to m
            rows = builder.select(builder.icmp_signed("<", left, i64(p.m)), left, i64(p.m))
            rows = builder.select(builder.icmp_signed(">", rows, i64(0)), rows, i64(0))
            at = builder.add(image_out, builder.add(builder.mul(o, i64(plane_out)),
                                                    builder.mul(first_y, i64(p.out_width))))
            epilogue.over(builder, out, at, rows, p.out_width, p.out_width)

