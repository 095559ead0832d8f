"""8-bit convolution on the int8 GEMM: IntegerConv and Conv on int8q/uint8q operands.

Per image and group, C[M/g, HW] = (filter - filter_zero) @ im2col(input - input_zero)
+ bias in int32 (wrapping), with K = C/g x taps: the filter is A (packed at
compile time when constant, else at run time once per group) and the input is
B, packed per column tile of output positions straight from the input (the
im2col fused into packing; padding reads the input's zero point, so it is zero
once shifted). IntegerConv (ONNX ConvInteger, QLinearConv's accumulator) takes
zero points as tensors (the filter's one value or one per output channel) and
an int32 bias; a quantized Conv takes them from its operands' types and its
bias is int32q. 1-d and 2-d convolutions; a 3-d one is reported unsupported.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir

from ....compiler.ir.function import Weight, base_of
from ....graph.types import ElemKind
from ..codegen.kinds import I32, i64, load
from ..codegen.loops import loop
from ..codegen.module import KernelContext, Step
from .int8_gemm import ColumnTile, IntGemm, RowTerms, byte_offset, column_tile, emit_int_gemm, host_has_vnni
from .int8_matmul import QUANTIZED, a_takes_unsigned, type_zero
from .int8_pack import (
    Window,
    Zero,
    column_origins,
    emit_pack_a,
    emit_pack_b,
    k_tables,
    pack_a_constant,
    shift_of,
)
from .table import register
from .window import window_dims


def conv_window(instr: Any) -> Window | None:
    """The im2col geometry of a 1-d/2-d convolution (per group), None for a 3-d one."""
    lead, d1, d2 = window_dims(instr)
    if (lead.size, lead.kernel) != (1, 1):
        return None
    channels = instr.inputs[0].type.shape[1] // instr.group
    return Window(channels, d1.size, d2.size, d1.out, d2.out, (d1.kernel, d2.kernel), (d1.stride, d2.stride),
                  (d1.dilation, d2.dilation), (d1.begin, d2.begin))


def _zeros(instr: Any) -> tuple[Zero, Zero] | None:
    """(filter zero per output channel, input zero), None for a layout the kernel does not take."""
    if instr.kind == "Conv":
        filter_zero, input_zero = type_zero(instr.filter.type, 0), type_zero(instr.input.type, 1)
        if filter_zero is None or input_zero is None or input_zero.varies:
            return None
        return filter_zero, input_zero
    zeros = [Zero(tensor=zero) if zero is not None else Zero() for zero in (instr.filter_zero, instr.input_zero)]
    return zeros[0], zeros[1]


def accepts(node: Any) -> bool:
    """A 1-d/2-d convolution on 8-bit operands with zero points the kernel can index (a float
    Conv is not this module's)."""
    if node.kind == "Conv":
        kinds = {node.input.type.elem, node.filter.type.elem}
        if not kinds & QUANTIZED:
            return True
        if not kinds <= {ElemKind.QINT8, ElemKind.QUINT8}:
            return False
    return conv_window(node) is not None and _zeros(node) is not None


def _constant(value: Any) -> Weight | None:
    base = base_of(value)
    if isinstance(base, Weight) and base.role == "constant" and base.value is not None and base is value:
        return base
    return None


def emit_int8_conv(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    dest, source, filt, bias = instr.operands[0], instr.input, instr.filter, instr.bias
    window = conv_window(instr)
    filter_zero, input_zero = _zeros(instr)
    images, group = source.type.shape[0], instr.group
    per_out = filt.type.shape[0] // group
    columns = window.out_height * window.out_width
    a_kind, b_kind = filt.type.elem, source.type.elem
    unsigned = a_takes_unsigned(a_kind, b_kind)
    gemm = IntGemm(per_out, columns, window.channels * window.taps, unsigned, host_has_vnni())
    a_shift, b_shift = shift_of(a_kind, unsigned), shift_of(b_kind, not unsigned)
    builder = ctx.builder
    sums_bytes = gemm.row_tiles * gemm.tile_rows * 4
    weight = _constant(filt)
    if weight is not None:
        def packed(value: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
            return [pack_a_constant(m, a_shift, gemm) for m in value.reshape(group, per_out, gemm.depth)]
        key = ("a", gemm.tile_rows, a_shift)
        a_panels = ctx.constant(weight, "int8", key, lambda value: np.concatenate([p for p, _ in packed(value)]))
        a_sums = ctx.constant(weight, "rowsums", key, lambda value: np.concatenate([s for _, s in packed(value)]))
    per_thread = gemm.a_panel_bytes() + sums_bytes + gemm.b_panel_bytes() + gemm.tile_columns * 4
    scratch = ctx.thread_scratch(per_thread)
    b_panel = byte_offset(builder, scratch, gemm.a_panel_bytes() + sums_bytes)
    colsums = byte_offset(builder, b_panel, gemm.b_panel_bytes())
    tables = (k_tables(ctx, window, gemm), column_origins(ctx, window, gemm))
    x, w, out = ctx.address(source), ctx.address(filt), ctx.address(dest)
    b = ctx.address(bias) if bias is not None else None
    plane = window.channels * window.height * window.width
    with loop(builder, images, name="n") as n, loop(builder, group, name="g") as g:
        first_filter = builder.mul(g, i64(per_out))
        if weight is not None:
            a_panel = byte_offset(builder, a_panels, builder.mul(g, i64(gemm.a_panel_bytes())))
            rowsums = byte_offset(builder, a_sums, builder.mul(g, i64(sums_bytes)))
        else:
            a_panel, rowsums = scratch, byte_offset(builder, scratch, gemm.a_panel_bytes())
            emit_pack_a(ctx, gemm, byte_offset(builder, w, builder.mul(first_filter, i64(gemm.depth))), a_kind,
                        a_shift, a_panel, rowsums)
        image = byte_offset(builder, x, builder.mul(builder.add(builder.mul(n, i64(group)), g), i64(plane)))
        c = builder.gep(out, [builder.mul(builder.add(builder.mul(n, i64(group)), g), i64(per_out * columns))],
                        inbounds=True, source_etype=I32)
        padding = input_zero.at(ctx, i64(0))

        def alpha(row: ir.Value) -> ir.Value:
            return builder.add(ir.Constant(I32, a_shift), filter_zero.at(ctx, builder.add(first_filter, row)))

        def beta(column: ir.Value) -> ir.Value:
            return builder.add(ir.Constant(I32, b_shift), padding)

        def bias_of(row: ir.Value) -> ir.Value:
            return load(builder, b, ElemKind.INT32, builder.add(first_filter, row))

        def tile_of(nt: ir.Value) -> ColumnTile:
            emit_pack_b(ctx, gemm, window, image, b_kind, b_shift, padding, nt, tables, b_panel, colsums)
            return column_tile(ctx, gemm, nt, b_panel, colsums, beta, False)

        rows = RowTerms(rowsums, alpha, bias_of if b is not None else None)
        emit_int_gemm(ctx, gemm, a_panel, rows, tile_of, c, columns)


register("IntegerConv", frozenset({ElemKind.INT8, ElemKind.UINT8, ElemKind.INT32}), emit_int8_conv,
         accepts=accepts)
