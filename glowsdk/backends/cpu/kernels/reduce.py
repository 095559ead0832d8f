"""ReduceSum, ReduceProd, ReduceMax and ReduceMin over any set of axes; ArgMax and ArgMin.

The kernel walks the input in memory order. The trailing run of reduced dims
is an inner reduction in a register (float sums and products may reassociate,
so LLVM vectorises them, as numpy's pairwise sum also reorders); the dims
before it accumulate into the destination, which starts at the reduction's
identity, so reducing a middle axis streams through memory with contiguous,
vectorisable inner loops. Max and Min share the element-wise kinds' NaN
propagating semantics (scalar.py). float16 and bfloat16 accumulate in float32,
as the reference does, so their partial results wait in float32 scratch memory
and are rounded once, as they are stored. Threads share the kept elements of a
reduction over trailing axes (the squeeze of a squeeze-and-excitation block).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
from llvmlite import ir

from ....graph.types import ElemKind
from ..codegen.kinds import COMPUTE_INTS, FLOATS, HALF_FLOATS, I64, i64, is_float, load, store, value_type
from ..codegen.loops import linear_index, loop, loop_nest, row_major_strides
from ..codegen.module import KernelContext, Step
from .scalar import SCALARS
from .table import register

REASSOCIATE = ("reassoc", "contract")
"""A reduction's order is free (numpy's pairwise sum has its own): let LLVM vectorise it."""

Combine = Callable[[KernelContext, Any, ir.Value, ir.Value], ir.Value]
SHARED_ROWS = 16
"""A reduction over trailing axes with at least this many kept elements shares them among
threads (whether the step is worth sharing is threads.serial_nanoseconds's call)."""


def _arithmetic(float_op: str, int_op: str) -> Combine:
    def combine(ctx: KernelContext, instr: Any, total: ir.Value, value: ir.Value) -> ir.Value:
        if is_float(instr.input.type.elem):
            return getattr(ctx.builder, float_op)(total, value, flags=REASSOCIATE)
        return getattr(ctx.builder, int_op)(total, value)
    return combine


def _extremum(kind: str) -> Combine:
    def combine(ctx: KernelContext, instr: Any, total: ir.Value, value: ir.Value) -> ir.Value:
        return SCALARS[kind].scalar(ctx, instr, [total, value])
    return combine


def _identity(reduction: str, kind: ElemKind) -> ir.Constant:
    """The value an empty reduction yields."""
    element = value_type(kind)
    if is_float(kind):
        return ir.Constant(element, {"ReduceSum": 0.0, "ReduceProd": 1.0, "ReduceMax": float("-inf"),
                                     "ReduceMin": float("inf")}[reduction])
    limits = np.iinfo(kind.dtype)
    return ir.Constant(element, {"ReduceSum": 0, "ReduceProd": 1, "ReduceMax": int(limits.min),
                                 "ReduceMin": int(limits.max)}[reduction])


COMBINE: dict[str, Combine] = {
    "ReduceSum": _arithmetic("fadd", "add"),
    "ReduceProd": _arithmetic("fmul", "mul"),
    "ReduceMax": _extremum("Max"),
    "ReduceMin": _extremum("Min"),
}


def _reduce(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    dest, source = instr.operands[0], instr.input
    kind = source.type.elem
    shape, axes = source.type.shape, set(instr.axes)
    builder = ctx.builder
    combine = COMBINE[instr.kind]
    identity = _identity(instr.kind, kind)
    kept_strides = iter(row_major_strides([d for i, d in enumerate(shape) if i not in axes]))
    dest_strides = [0 if i in axes else next(kept_strides) for i in range(len(shape))]
    trailing = len(shape)
    while trailing > 0 and trailing - 1 in axes:
        trailing -= 1
    outer, inner = shape[:trailing], math.prod(shape[trailing:])
    accumulate_in_memory = any(i in axes for i in range(trailing))
    x, out = ctx.address(source), ctx.address(dest)
    partial, partial_kind = out, kind  # where accumulation happens across the outer dims
    if accumulate_in_memory and kind in HALF_FLOATS:
        partial, partial_kind = ctx.scratch(4 * dest.type.size), ElemKind.FLOAT32
    if accumulate_in_memory:
        with loop(builder, dest.type.size, name="init") as i:
            store(builder, identity, partial, partial_kind, i)
    acc = ctx.local(identity.type)
    source_strides = row_major_strides(shape)[:trailing]
    rows = math.prod(outer)
    dims, share = outer, None
    if not accumulate_in_memory and rows >= SHARED_ROWS:
        # Every kept element is one independent row of `inner` (a global average pool's
        # channels): threads share the rows, as flat indices into the destination.
        dims, dest_strides, source_strides, share = [rows], [1], [inner], ctx.share(rows)
    with loop_nest(builder, dims, outer=share) as indices:
        at = linear_index(builder, indices, dest_strides[:len(dims)])
        builder.store(load(builder, partial, partial_kind, at) if accumulate_in_memory else identity, acc)
        base = linear_index(builder, indices, source_strides)
        with loop(builder, inner, name="r") as r:
            value = load(builder, x, kind, builder.add(base, r))
            builder.store(combine(ctx, instr, builder.load(acc, typ=identity.type), value), acc)
        store(builder, builder.load(acc, typ=identity.type), partial, partial_kind, at)
    if partial is not out:
        with loop(builder, dest.type.size, name="round") as i:
            store(builder, load(builder, partial, partial_kind, i), out, kind, i)


def _arg_extreme(ctx: KernelContext, step: Step) -> None:
    """ArgMax/ArgMin along one axis: the first extreme index (the last with select_last_index);
    a NaN is the extreme of a float axis, its first (or last) occurrence winning, as in numpy."""
    instr = step.instrs[0]
    dest, source = instr.operands[0], instr.input
    kind, shape, axis = source.type.elem, source.type.shape, instr.axis
    builder = ctx.builder
    outer, length, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    predicate = (">" if instr.kind == "ArgMax" else "<") + ("=" if instr.select_last_index else "")
    element = value_type(kind)
    best, where = ctx.local(element, "best"), ctx.local(I64, "where")
    x, out = ctx.address(source), ctx.address(dest)
    with loop(builder, outer, name="a") as a, loop(builder, inner, name="b") as b:
        base = builder.add(builder.mul(a, i64(length * inner)), b)
        builder.store(load(builder, x, kind, base), best)
        builder.store(i64(0), where)
        with loop(builder, length, 1, name="r") as r:
            value = load(builder, x, kind, builder.add(base, builder.mul(r, i64(inner))))
            current = builder.load(best, typ=element)
            better = _better(builder, kind, predicate, value, current, instr.select_last_index)
            builder.store(builder.select(better, value, current), best)
            builder.store(builder.select(better, r, builder.load(where, typ=I64)), where)
        store(builder, builder.load(where, typ=I64), out, ElemKind.INT64, builder.add(builder.mul(a, i64(inner)), b))


def _better(builder: ir.IRBuilder, kind: ElemKind, predicate: str, value: ir.Value, best: ir.Value,
            last: bool) -> ir.Value:
    """Whether `value`, met later along the axis, replaces `best`."""
    if not is_float(kind):
        compare = builder.icmp_signed if kind.dtype.kind == "i" else builder.icmp_unsigned
        return compare(predicate, value, best)
    value_nan = builder.fcmp_unordered("uno", value, value)
    best_nan = builder.fcmp_unordered("uno", best, best)
    ordered = builder.fcmp_ordered(predicate, value, best)
    if last:
        return builder.or_(value_nan, builder.and_(builder.not_(best_nan), ordered))
    return builder.or_(builder.and_(value_nan, builder.not_(best_nan)), ordered)


for _kind in COMBINE:
    register(_kind, FLOATS | COMPUTE_INTS, _reduce)
for _kind in ("ArgMax", "ArgMin"):
    register(_kind, FLOATS | COMPUTE_INTS, _arg_extreme)
