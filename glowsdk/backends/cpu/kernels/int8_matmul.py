"""8-bit matrix multiply on the int8 GEMM: IntegerMatMul and MatMul on int8q/uint8q operands.

Both are C[b] = (lhs[b] - lhs_zero) @ (rhs[b] - rhs_zero) in int32 (wrapping):
IntegerMatMul (ONNX MatMulInteger) takes its zero points as tensors (one value,
or one per column of rhs) and broadcasts leading dims as numpy does; a
quantized MatMul takes them from its operands' types (the offsets, one per row
of lhs or column of rhs when quantized per channel on that axis). The left
operand is packed at run time, once per matrix; constant weights on the right
are packed at compile time, any other right operand per column tile.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir

from ....compiler.ir.function import Weight, base_of
from ....graph.types import ElemKind, Type
from ..codegen.kinds import I32, i64, is_signed
from ..codegen.loops import linear_index, loop_nest, row_major_strides
from ..codegen.module import KernelContext, Step
from .int8_gemm import ColumnTile, IntGemm, RowTerms, byte_offset, column_tile, emit_int_gemm, host_has_vnni
from .int8_pack import (
    Window,
    Zero,
    emit_pack_a,
    emit_pack_b,
    column_origins,
    k_tables,
    pack_b_constant,
    shift_of,
)
from .table import register

QUANTIZED = frozenset({ElemKind.QINT8, ElemKind.QUINT8, ElemKind.QINT32})
"""A quantized MatMul's operand kinds and its int32q accumulator."""


def is_signed_byte(kind: ElemKind) -> bool:
    return is_signed(kind) or kind is ElemKind.QINT8


def a_takes_unsigned(a: ElemKind, b: ElemKind) -> bool:
    """Whether A takes vpdpbusd's unsigned slot: unless A is signed and B is not (then no shift)."""
    return not (is_signed_byte(a) and not is_signed_byte(b))


def type_zero(type_: Type, axis: int) -> Zero | None:
    """The offsets of a quantized operand as a Zero along `axis` (None when they vary along another)."""
    if not type_.per_channel:
        return Zero((int(type_.offset),))
    if type_.axis % type_.rank != axis % type_.rank:
        return None
    return Zero(tuple(int(o) for o in type_.offset))


def _zeros(instr: Any) -> tuple[Zero, Zero] | None:
    """(lhs zero per row, rhs zero per column), None for a layout the kernel does not take."""
    lhs, rhs = instr.inputs[0].type, instr.inputs[1].type
    if instr.kind == "MatMul":
        left, right = type_zero(lhs, -2), type_zero(rhs, -1)
        return None if left is None or right is None else (left, right)
    zeros = []
    for zero, size in ((instr.lhs_zero, 1), (instr.rhs_zero, rhs.shape[-1])):
        if zero is not None and zero.type.size not in (1, size):
            return None
        zeros.append(Zero(tensor=zero) if zero is not None else Zero())
    return zeros[0], zeros[1]


def accepts(node: Any) -> bool:
    """8-bit operands whose zero points the kernel can index: one value, or one per row of lhs /
    column of rhs (any MatMul of other kinds is not this module's)."""
    if node.kind == "MatMul":
        kinds = {v.type.elem for v in node.inputs[:2]}
        if not kinds & QUANTIZED:
            return True
        if not kinds <= {ElemKind.QINT8, ElemKind.QUINT8}:
            return False
    return _zeros(node) is not None


def _batch_strides(shape: tuple[int, ...], batch: tuple[int, ...]) -> list[int]:
    """Per output batch dim, the step in the operand's own matrix index (0 where it broadcasts)."""
    own = shape[:-2]
    strides = [s if d != 1 else 0 for s, d in zip(row_major_strides(own), own)]
    return [0] * (len(batch) - len(own)) + strides


def emit_int8_matmul(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    dest, lhs, rhs = instr.operands[0], instr.inputs[0], instr.inputs[1]
    rows, inner = lhs.type.shape[-2:]
    columns = rhs.type.shape[-1]
    batch = dest.type.shape[:-2]
    left_zero, right_zero = _zeros(instr)
    a_kind, b_kind = lhs.type.elem, rhs.type.elem
    unsigned = a_takes_unsigned(a_kind, b_kind)
    gemm = IntGemm(rows, columns, inner, unsigned, host_has_vnni())
    a_shift, b_shift = shift_of(a_kind, unsigned), shift_of(b_kind, not unsigned)
    builder = ctx.builder
    weight = base_of(rhs)
    constant = isinstance(weight, Weight) and weight.role == "constant" and weight.value is not None \
        and weight is rhs
    per_thread = gemm.a_panel_bytes() + gemm.row_tiles * gemm.tile_rows * 4 + gemm.b_panel_bytes() \
        + gemm.tile_columns * 4
    scratch = ctx.thread_scratch(per_thread)
    a_panel = scratch
    rowsums = byte_offset(builder, a_panel, gemm.a_panel_bytes())
    b_panel = byte_offset(builder, rowsums, gemm.row_tiles * gemm.tile_rows * 4)
    colsums = byte_offset(builder, b_panel, gemm.b_panel_bytes())
    if constant:
        def packed(value: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
            return [pack_b_constant(m, b_shift, gemm) for m in value.reshape(-1, inner, columns)]
        key = ("b", gemm.tile_columns, b_shift)
        b_panels = ctx.constant(weight, "int8", key, lambda value: _joined([p for p, _ in packed(value)]))
        b_sums = ctx.constant(weight, "colsums", key, lambda value: _joined([s for _, s in packed(value)]))
    else:
        window = Window(inner, 1, columns, 1, columns)
        tables = (k_tables(ctx, window, gemm), column_origins(ctx, window, gemm))
    a, b, c = ctx.address(lhs), ctx.address(rhs), ctx.address(dest)
    lhs_strides, rhs_strides = _batch_strides(lhs.type.shape, batch), _batch_strides(rhs.type.shape, batch)
    with loop_nest(builder, batch, name="batch") as indices:
        lhs_at = linear_index(builder, indices, lhs_strides)
        a_n = byte_offset(builder, a, builder.mul(lhs_at, i64(rows * inner)))
        rhs_at = linear_index(builder, indices, rhs_strides)
        out_at = linear_index(builder, indices, row_major_strides(batch))
        c_n = builder.gep(c, [builder.mul(out_at, i64(rows * columns))], inbounds=True, source_etype=I32)
        emit_pack_a(ctx, gemm, a_n, a_kind, a_shift, a_panel, rowsums)

        def alpha(row: ir.Value) -> ir.Value:
            return builder.add(ir.Constant(I32, a_shift), left_zero.at(ctx, row))

        def beta(column: ir.Value) -> ir.Value:
            return builder.add(ir.Constant(I32, b_shift), right_zero.at(ctx, column))

        def tile_of(nt: ir.Value) -> ColumnTile:
            if constant:
                tile = builder.add(builder.mul(rhs_at, i64(gemm.column_tiles)), nt)
                panel = byte_offset(builder, b_panels, builder.mul(tile, i64(gemm.b_panel_bytes())))
                sums = byte_offset(builder, b_sums, builder.mul(tile, i64(gemm.tile_columns * 4)))
            else:
                b_n = byte_offset(builder, b, builder.mul(rhs_at, i64(inner * columns)))
                padding = ir.Constant(I32, 0)
                emit_pack_b(ctx, gemm, window, b_n, b_kind, b_shift, padding, nt, tables, b_panel, colsums)
                panel, sums = b_panel, colsums
            return column_tile(ctx, gemm, nt, panel, sums, beta, right_zero.varies)

        emit_int_gemm(ctx, gemm, a_panel, RowTerms(rowsums, alpha, None), tile_of, c_n, columns)


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([p.reshape(-1) for p in parts])


register("IntegerMatMul", frozenset({ElemKind.INT8, ElemKind.UINT8, ElemKind.INT32}), emit_int8_matmul,
         accepts=accepts)
