"""A register-blocked 8-bit GEMM with int32 accumulation: C = (A - zA) @ (B - zB) (+ bias per row).

The product runs on the x86 dot-product instruction `vpdpbusd` where the host
has AVX-512 VNNI: per 32-bit lane it multiplies four unsigned bytes by four
signed bytes and adds the four products to an int32 accumulator. The
micro-kernel keeps an MR x NV tile of C in registers (as the float one in
gemm.py does): per group of four k it loads NV vectors of B (lane n holding
B[k..k+3, n]), broadcasts A[r, k..k+3] of each of the MR rows, and issues MR * NV
dot products. Without VNNI the same four-byte dot product is written as plain
widening multiplies and adds on int32 vectors, which LLVM vectorises.

`vpdpbusd` wants one operand unsigned and the other signed. An operand whose
bytes have the wrong signedness is shifted by 128 (its top bit flipped) when it
is packed, and that shift joins its zero point in a correction applied once per
C element after the k loop. With A' = A + cA, B' = B + cB, alpha = cA + zA (per
row) and beta = cB + zB (per column):

    sum_k (A - zA)(B - zB) = sum_k A'B' + beta * (K * alpha - rowsum(A')) - alpha * colsum(B')

Padding k past K (to whole groups of four) is zero in both panels, so it adds
nothing to the dot product or the sums. Every term wraps modulo 2^32, so the
result is the exact sum modulo 2^32, bit for bit the reference's.

Panels (int8_pack.py): A is [row tile][K/4][MR] groups of four bytes and B is
[column tile][K/4][NR] groups of four bytes; each comes with its sums (rowsum
per row of A', colsum per column of B'). Threads share the column tiles.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from llvmlite import ir

from ..codegen.kinds import I1, I8, I32, I64, PTR, i64, splat_constant, vector_constant
from ..codegen.module import KernelContext
from ..codegen.target import host_vectors
from ..jit import host_cpu
from .gemm import TileGrid, each_tile

GROUP = 4
"""k values per 32-bit lane of one dot product."""


@lru_cache(maxsize=1)
def host_has_vnni() -> bool:
    """Whether the host runs `vpdpbusd` on 512-bit vectors (AVX-512 VNNI)."""
    features = set(host_cpu()[1].split(","))
    return "+avx512vnni" in features and "+avx512bw" in features


@dataclass(frozen=True)
class IntGemm(TileGrid):
    """The sizes of one C[M, N] = A[M, K] @ B[K, N] on bytes, and its register tile."""

    rows: int
    columns: int
    depth: int
    a_unsigned: bool
    """Whether A takes vpdpbusd's unsigned slot (B then takes the signed one)."""
    vnni: bool

    @property
    def groups(self) -> int:
        """K / 4, rounded up."""
        return -(-self.depth // GROUP)

    @property
    def tile_rows(self) -> int:
        return host_vectors().tile[0]

    @property
    def tile_vectors(self) -> int:
        return host_vectors().tile[1]

    def a_panel_bytes(self) -> int:
        return self.row_tiles * self.tile_rows * self.groups * GROUP

    def b_panel_bytes(self) -> int:
        return self.tile_columns * self.groups * GROUP


def int_vector(lanes: int) -> ir.VectorType:
    return ir.VectorType(I32, lanes)


def splat_int(builder: ir.IRBuilder, value: ir.Value, lanes: int) -> ir.Value:
    start = splat_constant(I32, 0, lanes)
    single = builder.insert_element(start, value, ir.Constant(I32, 0))
    return builder.shuffle_vector(single, start, start)


def byte_offset(builder: ir.IRBuilder, pointer: ir.Value, count: int | ir.Value) -> ir.Value:
    """`pointer` advanced by `count` bytes."""
    return builder.gep(pointer, [i64(count) if isinstance(count, int) else count], inbounds=True,
                       source_etype=I8)


def dot4(ctx: KernelContext, vnni: bool, acc: ir.Value, unsigned: ir.Value, signed: ir.Value) -> ir.Value:
    """acc + per lane the sum of four products of unsigned bytes by signed bytes."""
    builder, lanes = ctx.builder, acc.type.count
    if vnni:
        function = ctx.declare("llvm.x86.avx512.vpdpbusd.512", ir.FunctionType(acc.type, [acc.type] * 3))
        return builder.call(function, [acc, unsigned, signed])
    bytes_type, wide = ir.VectorType(I8, lanes * GROUP), ir.VectorType(I32, lanes * GROUP)
    products = builder.mul(builder.zext(builder.bitcast(unsigned, bytes_type), wide),
                           builder.sext(builder.bitcast(signed, bytes_type), wide))
    total = acc
    for j in range(GROUP):
        picked = builder.shuffle_vector(products, splat_constant(I32, 0, lanes * GROUP),
                                        vector_constant(I32, [GROUP * i + j for i in range(lanes)]))
        total = builder.add(total, picked)
    return total


def _store(ctx: KernelContext, value: ir.Value, pointer: ir.Value, count: int) -> None:
    """The first `count` lanes of an int32 vector to `pointer`."""
    lanes = value.type.count
    if count == lanes:
        ctx.builder.store(value, pointer, align=4)
        return
    mask = vector_constant(I1, [1] * count + [0] * (lanes - count))
    function = ctx.declare(f"llvm.masked.store.v{lanes}i32.p0",
                           ir.FunctionType(ir.VoidType(), [value.type, PTR, I32, mask.type]))
    ctx.builder.call(function, [value, pointer, ir.Constant(I32, 4), mask])


@dataclass(frozen=True)
class RowTerms:
    """Per row of A: where its rowsum(A') is, and alpha(row) = cA + zA(row); bias(row) or None."""

    rowsums: ir.Value
    alpha: Callable[[ir.Value], ir.Value]
    bias: Callable[[ir.Value], ir.Value] | None


@dataclass(frozen=True)
class ColumnTile:
    """One column tile of B: its panel, and per vector of columns colsum(B') and beta = cB + zB."""

    panel: ir.Value
    colsums: list[ir.Value]
    betas: list[ir.Value]


def micro_kernel(ctx: KernelContext, gemm: IntGemm, a: ir.Value, tile: ColumnTile, rows: RowTerms,
                 first: ir.Value, columns: int, c: ir.Value, c_at: ir.Value, ldc: int, c_rows: int) -> None:
    """C[first + r, :columns] for r < c_rows from A panel tile `a` and column tile `tile`."""
    builder, lanes, mr = ctx.builder, gemm.lanes, gemm.tile_rows
    vectors = -(-columns // lanes)
    vector = int_vector(lanes)
    zero = splat_constant(I32, 0, lanes)

    def row_of(r: int) -> ir.Value:
        return builder.add(first, i64(min(r, c_rows - 1)))

    start = [[splat_int(builder, rows.bias(row_of(r)), lanes) if rows.bias else zero for _ in range(vectors)]
             for r in range(mr)]
    sums = start
    if gemm.groups:
        before = builder.block
        body = builder.append_basic_block("int.k")
        after = builder.append_basic_block("int.done")
        builder.branch(body)
        builder.position_at_end(body)
        g = builder.phi(I64, name="g")
        g.add_incoming(i64(0), before)
        acc = [[builder.phi(vector, name=f"c{r}_{v}") for v in range(vectors)] for r in range(mr)]
        for r in range(mr):
            for v in range(vectors):
                acc[r][v].add_incoming(start[r][v], before)
        b_row = byte_offset(builder, tile.panel, builder.mul(g, i64(gemm.tile_columns * GROUP)))
        b_vectors = [builder.load(byte_offset(builder, b_row, v * lanes * GROUP), typ=vector, align=4)
                     for v in range(vectors)]
        a_group = byte_offset(builder, a, builder.mul(g, i64(mr * GROUP)))
        sums = []
        for r in range(mr):
            broadcast = splat_int(builder, builder.load(byte_offset(builder, a_group, r * GROUP), typ=I32), lanes)
            sums.append([dot4(ctx, gemm.vnni, acc[r][v], *((broadcast, b_vectors[v]) if gemm.a_unsigned
                                                          else (b_vectors[v], broadcast))) for v in range(vectors)])
        following = builder.add(g, i64(1), flags=("nuw", "nsw"))
        latch = builder.block
        g.add_incoming(following, latch)
        for r in range(mr):
            for v in range(vectors):
                acc[r][v].add_incoming(sums[r][v], latch)
        builder.cbranch(builder.icmp_unsigned("<", following, i64(gemm.groups)), body, after)
        builder.position_at_end(after)
    for r in range(c_rows):
        row = builder.add(first, i64(r))
        alpha = rows.alpha(row)
        rowsum = builder.load(builder.gep(rows.rowsums, [row], inbounds=True, source_etype=I32), typ=I32)
        gamma = splat_int(builder, builder.sub(builder.mul(alpha, ir.Constant(I32, gemm.depth)), rowsum), lanes)
        alphas = splat_int(builder, alpha, lanes)
        for v in range(vectors):
            fixed = builder.add(sums[r][v], builder.mul(tile.betas[v], gamma))
            fixed = builder.sub(fixed, builder.mul(alphas, tile.colsums[v]))
            at = builder.add(c_at, i64(r * ldc + v * lanes))
            _store(ctx, fixed, builder.gep(c, [at], inbounds=True, source_etype=I32),
                   min(lanes, columns - v * lanes))


def emit_int_gemm(ctx: KernelContext, gemm: IntGemm, a_panels: ir.Value, rows: RowTerms,
                  tile_of: Callable[[ir.Value], ColumnTile], c: ir.Value, ldc: int) -> None:
    """C = (A - zA) @ (B - zB) over every tile; this thread's share of the column tiles."""
    builder = ctx.builder
    mr, nr = gemm.tile_rows, gemm.tile_columns

    def tile(column: ColumnTile, nt: ir.Value, mt: ir.Value, columns: int, c_rows: int) -> None:
        first = builder.mul(mt, i64(mr))
        a = byte_offset(builder, a_panels, builder.mul(mt, i64(mr * gemm.groups * GROUP)))
        c_at = builder.add(builder.mul(nt, i64(nr)), builder.mul(first, i64(ldc)))
        micro_kernel(ctx, gemm, a, column, rows, first, columns, c, c_at, ldc, c_rows)
    each_tile(ctx, gemm, ctx.share(gemm.column_tiles), (i64(0), i64(gemm.row_tiles)), tile_of, tile)


def column_tile(ctx: KernelContext, gemm: IntGemm, tile: ir.Value, panel: ir.Value, colsums: ir.Value,
                beta: Callable[[ir.Value], ir.Value], per_column: bool) -> ColumnTile:
    """Column tile `tile`'s operands: its panel, its NR colsums at `colsums` as vectors, and beta
    per column (`beta(column)`, one value for every column unless `per_column`)."""
    builder, lanes = ctx.builder, gemm.lanes
    vector = int_vector(lanes)
    sums = [builder.load(builder.gep(colsums, [i64(v * lanes)], inbounds=True, source_etype=I32), typ=vector,
                         align=4) for v in range(gemm.tile_vectors)]
    if not per_column:
        return ColumnTile(panel, sums, [splat_int(builder, beta(i64(0)), lanes)] * gemm.tile_vectors)
    betas = []
    first = builder.mul(tile, i64(gemm.tile_columns))
    for v in range(gemm.tile_vectors):
        lanes_value = ir.Constant(vector, None)
        for lane in range(lanes):
            column = builder.add(first, i64(v * lanes + lane))
            column = builder.select(builder.icmp_unsigned("<", column, i64(gemm.columns)), column,
                                    i64(gemm.columns - 1))
            lanes_value = builder.insert_element(lanes_value, beta(column), ir.Constant(I32, lane))
        betas.append(lanes_value)
    return ColumnTile(panel, sums, betas)
