"""Matrix multiply: C[b] = A[b] @ B[b] for float operands, every size a constant.

The loop order is (batch, row, k, column): each row of C stays in cache while
row k of B streams through it, so the innermost loop is a contiguous
multiply-add LLVM vectorises to FMA on the host's widest vectors ('contract'
lets it fuse). What remains for peak speed (issue 6): register blocking of a
tile of C across several rows, packing of B, and cache tiling.
"""
from __future__ import annotations

import math

from llvmlite import ir

from ..codegen.kinds import COMPUTE_FLOATS, element_pointer, i64, load, storage_type
from ..codegen.loops import loop
from ..codegen.module import KernelContext, Step
from .table import register

CONTRACT = ("contract",)
"""Let LLVM fuse a multiply and the add of its product into one FMA."""


def multiply_add(builder: ir.IRBuilder, pointer: ir.Value, left: ir.Value, right: ir.Value) -> None:
    """*pointer += left * right, fusable into one FMA."""
    product = builder.fmul(left, right, flags=CONTRACT)
    builder.store(builder.fadd(builder.load(pointer, typ=left.type), product, flags=CONTRACT), pointer)


def _matmul(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    dest, lhs, rhs = instr.operands[0], instr.inputs[0], instr.inputs[1]
    *batch, rows, inner = lhs.type.shape
    columns = rhs.type.shape[-1]
    kind = dest.type.elem
    builder = ctx.builder
    c, a, b = ctx.address(dest), ctx.address(lhs), ctx.address(rhs)
    zero = ir.Constant(storage_type(kind), 0.0)
    with loop(builder, math.prod(batch), name="batch") as n:
        with loop(builder, rows, name="row") as m:
            lhs_row = builder.add(builder.mul(n, i64(rows)), m)
            row = builder.mul(lhs_row, i64(columns))
            with loop(builder, columns, name="clear") as j:
                builder.store(zero, element_pointer(builder, c, kind, builder.add(row, j)))
            with loop(builder, inner, name="k") as k:
                left = load(builder, a, kind, builder.add(builder.mul(lhs_row, i64(inner)), k))
                rhs_row = builder.mul(builder.add(builder.mul(n, i64(inner)), k), i64(columns))
                with loop(builder, columns, name="col") as j:
                    multiply_add(builder, element_pointer(builder, c, kind, builder.add(row, j)), left,
                                 load(builder, b, kind, builder.add(rhs_row, j)))


register("MatMul", COMPUTE_FLOATS, _matmul)
