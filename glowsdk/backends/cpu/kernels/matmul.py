"""Matrix multiply: C[b] = A[b] @ B[b], every size a constant.

Float32 runs on the register-blocked GEMM (gemm.py): A is the left operand read
in place (row-major, broadcast per k), B the right one, which for constant
weights (a fully-connected layer) is packed at compile time into [N/NR, K, NR]
panels and otherwise read in place, row by row. Stacked element-wise
instructions run as C is stored (epilogue.py); threads share the column tiles.

Float64 and the plain integer kinds keep the simple (batch, row, k, column)
loop: each row of C stays in cache while row k of B streams through it, and the
innermost loop is a contiguous multiply-add LLVM vectorises ('contract' lets a
float one fuse into FMA; integer ones wrap in the element kind, as numpy's do).
So does an empty inner dim, whose product is all zeros (the micro-kernel's K loop
runs at least once). float16 and bfloat16 take that loop too, summing each row in
float32 scratch and rounding it into C once, as the interpreter computes them
(in float32, then cast). 8-bit quantized operands run on the int8 GEMM (int8_gemm.py).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from llvmlite import ir

from ....compiler.ir.function import Weight, base_of
from ....graph.types import ElemKind
from ..codegen.kinds import (
    COMPUTE_FLOATS,
    COMPUTE_INTS,
    HALF_FLOATS,
    element_pointer,
    i64,
    is_float,
    load,
    storage_type,
    store,
)
from ..codegen.loops import loop
from ..codegen.module import KernelContext, Step
from .epilogue import stacked_epilogue
from .gemm import Gemm, Panel, bias_init, emit_gemm, offset
from .int8_matmul import QUANTIZED, accepts, emit_int8_matmul
from .packing import column_panels_size, edge_panel_columns, pack_column_panels
from .table import register

CONTRACT = ("contract",)
"""Let LLVM fuse a multiply and the add of its product into one FMA."""


def multiply_add(builder: ir.IRBuilder, pointer: ir.Value, left: ir.Value, right: ir.Value) -> None:
    """*pointer += left * right, fusable into one FMA (wrapping for integers)."""
    total = builder.load(pointer, typ=left.type)
    if isinstance(left.type, ir.IntType):
        builder.store(builder.add(total, builder.mul(left, right)), pointer)
        return
    product = builder.fmul(left, right, flags=CONTRACT)
    builder.store(builder.fadd(total, product, flags=CONTRACT), pointer)


def _on_gemm(instr: Any) -> bool:
    """Whether the float32 micro-kernel computes `instr` (a non-empty inner dim)."""
    return instr.types[0].elem is ElemKind.FLOAT32 and instr.inputs[0].type.shape[-1] > 0


def _matmul_gemm(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    dest, lhs, rhs = instr.operands[0], instr.inputs[0], instr.inputs[1]
    *batch, rows, inner = lhs.type.shape
    columns = rhs.type.shape[-1]
    batches = math.prod(batch)
    gemm = Gemm(rows, columns, inner)
    builder = ctx.builder
    nr = gemm.tile_columns
    a, b, c = ctx.address(lhs), ctx.address(rhs), ctx.address(dest)
    weight = base_of(rhs)
    constant = isinstance(weight, Weight) and weight.role == "constant" and weight.value is not None \
        and weight is rhs
    if constant:
        edge = edge_panel_columns(gemm.edge_columns(), gemm.lanes)
        panels_size = column_panels_size(inner, columns, nr, gemm.lanes)
        panels = ctx.constant(weight, "panels", ("columns", nr, batches, gemm.lanes),
                              lambda value: _packed_weights(value, batches, nr, gemm.lanes))
    epilogue = stacked_epilogue(ctx, step)
    with loop(builder, batches, name="batch") as n:
        a_n = offset(builder, a, builder.mul(n, i64(rows * inner)))
        b_n = offset(builder, b, builder.mul(n, i64(inner * columns)))
        c_n = offset(builder, c, builder.mul(n, i64(rows * columns)))

        def a_of(mt: ir.Value) -> Panel:
            return Panel(offset(builder, a_n, builder.mul(mt, i64(gemm.tile_rows * inner))), 1, inner)

        def b_of(nt: ir.Value) -> Panel:
            if constant:
                at = builder.add(builder.mul(n, i64(panels_size)), builder.mul(nt, i64(inner * nr)))
                return Panel(offset(builder, panels, at), nr, streamed=True, edge_k_stride=edge)
            return Panel(offset(builder, b_n, builder.mul(nt, i64(nr))), columns, masked=True)

        shifted = None if epilogue is None else epilogue.shifted(builder, builder.mul(n, i64(rows * columns)))
        emit_gemm(ctx, gemm, a_of, False, b_of, c_n, columns, bias_init(ctx, None, rows), shifted)


def _packed_weights(value: Any, batches: int, tile_columns: int, lanes: int) -> Any:
    matrices = value.reshape(batches, *value.shape[-2:])
    return np.concatenate([pack_column_panels(m, tile_columns, lanes) for m in matrices])


def _matmul_loop(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    dest, lhs, rhs = instr.operands[0], instr.inputs[0], instr.inputs[1]
    *batch, rows, inner = lhs.type.shape
    columns = rhs.type.shape[-1]
    kind = dest.type.elem
    builder = ctx.builder
    c, a, b = ctx.address(dest), ctx.address(lhs), ctx.address(rhs)
    half = kind in HALF_FLOATS
    # A row of C sums in C itself, or for a half kind in a float32 row of scratch that is rounded
    # into C once (the interpreter's float32 product, cast to the half kind).
    acc_kind = ElemKind.FLOAT32 if half else kind
    acc = ctx.scratch(columns * 4) if half else c
    zero = ir.Constant(storage_type(acc_kind), 0.0 if is_float(kind) else 0)
    with loop(builder, math.prod(batch), name="batch") as n:
        with loop(builder, rows, name="row") as m:
            lhs_row = builder.add(builder.mul(n, i64(rows)), m)
            row = builder.mul(lhs_row, i64(columns))
            acc_row = i64(0) if half else row
            with loop(builder, columns, name="clear") as j:
                builder.store(zero, element_pointer(builder, acc, acc_kind, builder.add(acc_row, j)))
            with loop(builder, inner, name="k") as k:
                left = load(builder, a, kind, builder.add(builder.mul(lhs_row, i64(inner)), k))
                rhs_row = builder.mul(builder.add(builder.mul(n, i64(inner)), k), i64(columns))
                with loop(builder, columns, name="col") as j:
                    multiply_add(builder, element_pointer(builder, acc, acc_kind, builder.add(acc_row, j)), left,
                                 load(builder, b, kind, builder.add(rhs_row, j)))
            if half:
                with loop(builder, columns, name="round") as j:
                    store(builder, load(builder, acc, acc_kind, j), c, kind, builder.add(row, j))


def _matmul(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    if instr.inputs[0].type.elem.is_quantized:
        emit_int8_matmul(ctx, step)
    elif _on_gemm(instr):
        _matmul_gemm(ctx, step)
    else:
        _matmul_loop(ctx, step)


register("MatMul", COMPUTE_FLOATS | HALF_FLOATS | COMPUTE_INTS | QUANTIZED, _matmul, accepts=accepts, epilogue=_on_gemm,
         epilogue_rows=True)
