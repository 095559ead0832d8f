"""Byte panels for the 8-bit GEMM (int8_gemm.py): constants at compile time, activations at run time.

Every byte is stored shifted into the signedness its vpdpbusd slot wants (its
top bit flipped when the kinds differ, i.e. +128 for int8 in the unsigned slot,
-128 for uint8 in the signed one), in groups of four consecutive k: A as
[row tile][K/4][MR][4] and B as [column tile][K/4][NR][4], zero past K and past
the last row. Each panel comes with the sums of its shifted values (per row of
A, per column of B) that the zero-point correction needs.

Constant operands (a convolution's filter, a MatMul's weights) are packed once
in numpy and appended to the constants region. Run-time ones are packed into
scratch memory by scalar loops: A (a MatMul's left operand) once per matrix, B
per column tile straight from the input, the im2col of a convolution fused
with packing (a matrix is the 1 x N image of a 1 x 1 window, as in packing.py);
padding reads the input's zero point, so it is zero once shifted.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from ....compiler.ir.function import Value
from ....graph.types import ElemKind
from ..codegen.kinds import I8, I32, I64, i64, is_signed, load
from ..codegen.loops import loop
from ..codegen.module import KernelContext
from .int8_gemm import GROUP, IntGemm, byte_offset
from .packing import Window, column_tables

FLIP = 128


def shift_of(kind: ElemKind, unsigned_slot: bool) -> int:
    """What packing adds to `kind`'s raw bytes for the vpdpbusd slot (unsigned or signed) they take."""
    signed = is_signed(kind) or kind is ElemKind.QINT8
    if signed == unsigned_slot:
        return FLIP if signed else -FLIP
    return 0


def pack_a_constant(matrix: np.ndarray, shift: int, gemm: IntGemm) -> tuple[np.ndarray, np.ndarray]:
    """[M, K] raw bytes -> (A panel bytes, rowsum(A') per row padded to whole tiles, int32)."""
    mr, depth = gemm.tile_rows, gemm.groups * GROUP
    shifted = np.zeros((gemm.row_tiles * mr, depth), np.int64)
    shifted[:matrix.shape[0], :matrix.shape[1]] = matrix.astype(np.int64) + shift
    panel = shifted.reshape(gemm.row_tiles, mr, gemm.groups, GROUP).transpose(0, 2, 1, 3)
    return (panel & 0xFF).astype(np.uint8).reshape(-1), shifted.sum(axis=1).astype(np.int32)


def pack_b_constant(matrix: np.ndarray, shift: int, gemm: IntGemm) -> tuple[np.ndarray, np.ndarray]:
    """[K, N] raw bytes -> (B panel bytes per column tile, colsum(B') per column padded, int32)."""
    nr, depth = gemm.tile_columns, gemm.groups * GROUP
    shifted = np.zeros((depth, gemm.column_tiles * nr), np.int64)
    shifted[:matrix.shape[0], :matrix.shape[1]] = matrix.astype(np.int64) + shift
    panel = shifted.reshape(gemm.groups, GROUP, gemm.column_tiles, nr).transpose(2, 0, 3, 1)
    return (panel & 0xFF).astype(np.uint8).reshape(-1), shifted.sum(axis=0).astype(np.int32)


def widen(builder: ir.IRBuilder, raw: ir.Value, kind: ElemKind) -> ir.Value:
    """A raw byte of `kind` as int32."""
    signed = is_signed(kind) or kind is ElemKind.QINT8
    return builder.sext(raw, I32) if signed else builder.zext(raw, I32)


@dataclass(frozen=True)
class Zero:
    """An operand's zero point: compile-time values (one, or one per row/column), a run-time
    tensor (one value, or one per row/column), or none."""

    values: tuple[int, ...] = ()
    tensor: Value | None = None

    @property
    def varies(self) -> bool:
        """Whether rows (or columns) have zero points of their own."""
        return len(self.values) > 1 or (self.tensor is not None and self.tensor.type.size > 1)

    def at(self, ctx: KernelContext, index: ir.Value) -> ir.Value:
        """The zero point of row/column `index`, int32."""
        builder = ctx.builder
        if self.tensor is not None:
            at = index if self.tensor.type.size > 1 else i64(0)
            return widen(builder, load(builder, ctx.address(self.tensor), self.tensor.type.elem, at),
                         self.tensor.type.elem)
        if len(self.values) > 1:
            return ctx.lookup(ctx.table("zero", I32, self.values), I32, index)
        return ir.Constant(I32, self.values[0] if self.values else 0)


def emit_pack_a(ctx: KernelContext, gemm: IntGemm, source: ir.Value, kind: ElemKind, shift: int,
                panel: ir.Value, rowsums: ir.Value) -> None:
    """Pack the row-major [M, K] matrix at `source` into the A panel and its rowsums (run time)."""
    builder, mr = ctx.builder, gemm.tile_rows
    words = gemm.a_panel_bytes() // 4
    with loop(builder, words, name="clear") as w:
        builder.store(ir.Constant(I32, 0), builder.gep(panel, [w], inbounds=True, source_etype=I32))
    with loop(builder, gemm.row_tiles * mr, name="rowsum") as m:
        builder.store(ir.Constant(I32, 0), builder.gep(rowsums, [m], inbounds=True, source_etype=I32))
    with loop(builder, gemm.rows, name="m") as m:
        tile_base = builder.mul(builder.udiv(m, i64(mr)), i64(mr * gemm.groups * GROUP))
        lane = builder.mul(builder.urem(m, i64(mr)), i64(GROUP))
        total = ctx.local(I32, "rowsum")
        builder.store(ir.Constant(I32, 0), total)
        with loop(builder, gemm.depth, name="k") as k:
            value = builder.add(widen(builder, load(builder, source, kind, builder.add(
                builder.mul(m, i64(gemm.depth)), k)), kind), ir.Constant(I32, shift))
            group, within = builder.udiv(k, i64(GROUP)), builder.urem(k, i64(GROUP))
            at = builder.add(builder.add(tile_base, builder.mul(group, i64(mr * GROUP))), builder.add(lane, within))
            builder.store(builder.trunc(value, I8), byte_offset(builder, panel, at))
            builder.store(builder.add(builder.load(total, typ=I32), value), total)
        builder.store(builder.load(total, typ=I32), builder.gep(rowsums, [m], inbounds=True, source_etype=I32))


@dataclass(frozen=True)
class KTables:
    """Per k (padded to whole groups): the element offset of its input channel plane, and its
    row and column offsets within the window (dilated tap); k past K reads nothing."""

    planes: ir.Value
    dys: ir.Value
    dxs: ir.Value


def k_tables(ctx: KernelContext, window: Window, gemm: IntGemm) -> KTables:
    planes, dys, dxs = [], [], []
    kh, kw = window.kernel
    for k in range(gemm.groups * GROUP):
        channel, tap = divmod(k, window.taps)
        ky, kx = divmod(tap, kw)
        planes.append(channel * window.height * window.width if k < gemm.depth else -1)
        dys.append(ky * window.dilations[0])
        dxs.append(kx * window.dilations[1])
    return KTables(ctx.table("planes", I64, planes), ctx.table("dys", I64, dys), ctx.table("dxs", I64, dxs))


def column_origins(ctx: KernelContext, window: Window, gemm: IntGemm) -> tuple[ir.Value, ir.Value]:
    """Per GEMM column (padded to whole tiles): oy * stride - pad and ox * stride - pad."""
    rows, cols = column_tables(window, gemm)
    return ctx.table("oys", I64, rows), ctx.table("oxs", I64, cols)


def emit_pack_b(ctx: KernelContext, gemm: IntGemm, window: Window, source: ir.Value, kind: ElemKind, shift: int,
                padding: ir.Value, tile: ir.Value, tables: tuple[KTables, tuple[ir.Value, ir.Value]],
                panel: ir.Value, colsums: ir.Value) -> None:
    """Pack column tile `tile` of im2col(`source`) into a B panel and its colsums (run time);
    `padding` (int32) is the raw value read outside the input (its zero point)."""
    builder, nr = ctx.builder, gemm.tile_columns
    ks, (oys, oxs) = tables
    shift_c = ir.Constant(I32, shift)
    with loop(builder, nr, name="n") as n:
        column = builder.add(builder.mul(tile, i64(nr)), n)
        oy, ox = ctx.lookup(oys, I64, column), ctx.lookup(oxs, I64, column)
        total = ctx.local(I32, "colsum")
        builder.store(ir.Constant(I32, 0), total)
        with loop(builder, gemm.groups * GROUP, name="k") as k:
            plane = ctx.lookup(ks.planes, I64, k)
            iy = builder.add(oy, ctx.lookup(ks.dys, I64, k))
            ix = builder.add(ox, ctx.lookup(ks.dxs, I64, k))
            inside = builder.and_(builder.icmp_unsigned("<", iy, i64(window.height)),
                                  builder.icmp_unsigned("<", ix, i64(window.width)))
            real = builder.icmp_signed(">=", plane, i64(0))
            at = builder.add(plane, builder.add(builder.mul(iy, i64(window.width)), ix))
            at = builder.select(builder.and_(inside, real), at, i64(0))
            raw = builder.select(inside, widen(builder, load(builder, source, kind, at), kind), padding)
            value = builder.select(real, builder.add(raw, shift_c), ir.Constant(I32, 0))
            group, within = builder.udiv(k, i64(GROUP)), builder.urem(k, i64(GROUP))
            position = builder.add(builder.mul(builder.add(builder.mul(group, i64(nr)), n), i64(GROUP)), within)
            builder.store(builder.trunc(value, I8), byte_offset(builder, panel, position))
            builder.store(builder.add(builder.load(total, typ=I32), value), total)
        builder.store(builder.load(total, typ=I32), builder.gep(colsums, [n], inbounds=True, source_etype=I32))
