"""Element-wise instructions stacked onto a GEMM kernel's store (paper 5.2, Conv + Add + ReLU).

Operator stacking (stacking.py) may hand a compute kernel the element-wise
instructions that follow it in place on its result: each reads the result's
exact bytes and writes them back, and its other sources are either tensors of
the result's shape that share no byte with it (the residual of an Add) or a
single element (the zero of a ReLU). The GEMM then computes them on each C
vector before its one store, with the same `scalar` semantics element-wise
kernels use (scalar.py builds on vectors as well), so the output is written once.
"""
from __future__ import annotations

from typing import Any

from llvmlite import ir

from ....graph.types import ElemKind
from ..codegen.kinds import F32
from ..codegen.module import KernelContext, Step
from .gemm import Epilogue, load_vector, offset, splat
from .scalar import SCALARS

VECTOR_KINDS = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min"})
"""Element-wise kinds whose `scalar` builds on vectors unchanged (plain arithmetic, intrinsics)."""


def same_bytes(program: Any, a: Any, b: Any) -> bool:
    """Whether two operands are the same elements: same region, offset, shape and kind."""
    return program.plan.address(a) == program.plan.address(b) and a.type == b.type


def _disjoint(program: Any, a: Any, b: Any) -> bool:
    (region_a, start_a), (region_b, start_b) = program.plan.address(a), program.plan.address(b)
    return region_a != region_b or start_a + a.type.nbytes <= start_b or start_b + b.type.nbytes <= start_a


def can_follow(program: Any, result: Any, instr: Any) -> bool:
    """Whether element-wise `instr` can run in the store of a float32 kernel writing `result`."""
    if instr.kind not in VECTOR_KINDS or instr.operands[0].type.elem is not ElemKind.FLOAT32:
        return False
    if not same_bytes(program, instr.operands[0], result):
        return False
    inputs = list(instr.inputs)
    if not any(same_bytes(program, v, result) for v in inputs):
        return False
    for value in inputs:
        if same_bytes(program, value, result):
            continue
        if value.type.elem is not ElemKind.FLOAT32 or not _disjoint(program, value, result):
            return False
        if value.type.size != 1 and value.type.shape != result.type.shape:
            return False
    return True


def stacked_epilogue(ctx: KernelContext, step: Step) -> Epilogue | None:
    """The vector function applying `step.epilogue` to C (None without one)."""
    if not step.epilogue:
        return None
    program = ctx.owner.program
    result = step.instrs[0].operands[0]
    pointers = {id(v): ctx.address(v) for instr in step.epilogue for v in instr.inputs
                if not same_bytes(program, v, result)}

    def apply(vector: ir.Value, at: ir.Value, count: int) -> ir.Value:
        builder, lanes = ctx.builder, vector.type.count
        for instr in step.epilogue:
            args = []
            for value in instr.inputs:
                if same_bytes(program, value, result):
                    args.append(vector)
                elif value.type.size == 1:
                    args.append(splat(builder, builder.load(pointers[id(value)], typ=F32), lanes))
                else:
                    args.append(load_vector(ctx, offset(builder, pointers[id(value)], at), lanes, count))
            vector = SCALARS[instr.kind].scalar(ctx, instr, args)
        return vector
    return apply
