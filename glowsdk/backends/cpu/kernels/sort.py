"""TopK: the k best elements along one axis and their int64 indices, sorted, ties lower index first.

Per slice along the axis the kernel keeps the destination itself as a sorted
list of at most k entries and inserts each element in index order: an element
goes after every kept entry at least as good (so of equal elements the one
met first, the lower index, stays ahead) and the worst kept entry falls off
the end. That is O(n * k) per slice with no scratch memory, and TopK's k is
small next to n in the networks that use it. A float NaN is the greatest
value, as in numpy's sort: first when the largest are asked for, last
otherwise. Elements move as their stored bits and are compared as their values
(float16 and bfloat16 widened to float32, exactly), so every kept element,
a NaN's payload too, is the input's own.
"""
from __future__ import annotations

import math
from typing import Callable

from llvmlite import ir

from ....graph.types import ElemKind
from ..codegen.kinds import (
    COMPUTE_FLOATS,
    COMPUTE_INTS,
    HALF_FLOATS,
    I64,
    element_pointer,
    i64,
    is_float,
    load,
    storage_type,
    store,
    widen_half,
)
from ..codegen.loops import loop
from ..codegen.module import KernelContext, Step
from .table import register


def greater(builder: ir.IRBuilder, kind: ElemKind, x: ir.Value, y: ir.Value) -> ir.Value:
    """x > y in numpy's sort order (a NaN above every number, NaNs equal to each other)."""
    if not is_float(kind):
        compare = builder.icmp_signed if kind.dtype.kind == "i" else builder.icmp_unsigned
        return compare(">", x, y)
    x_nan = builder.fcmp_unordered("uno", x, x)
    y_number = builder.fcmp_ordered("ord", y, y)
    return builder.or_(builder.and_(x_nan, y_number), builder.fcmp_ordered(">", x, y))


def _top_k(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    values, indices, source = instr.operands[0], instr.operands[1], instr.input
    kind, shape, axis, k = source.type.elem, source.type.shape, instr.axis, instr.k
    if k == 0 or source.type.size == 0:
        return
    builder = ctx.builder
    outer, length, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    x, out_values, out_indices = ctx.address(source), ctx.address(values), ctx.address(indices)

    def key(raw: ir.Value) -> ir.Value:
        return widen_half(builder, raw, kind) if kind in HALF_FLOATS else raw

    def better(a: ir.Value, b: ir.Value) -> ir.Value:
        """Whether stored element `a` goes ahead of stored element `b`."""
        a, b = key(a), key(b)
        return greater(builder, kind, a, b) if instr.largest else greater(builder, kind, b, a)

    with loop(builder, outer, name="a") as a, loop(builder, inner, name="b") as b:
        source_base = builder.add(builder.mul(a, i64(length * inner)), b)
        dest_base = builder.add(builder.mul(a, i64(k * inner)), b)

        def slot(position: ir.Value) -> ir.Value:
            return builder.add(dest_base, builder.mul(position, i64(inner)))

        with loop(builder, length, name="r") as r:
            value = _load_bits(builder, x, kind, builder.add(source_base, builder.mul(r, i64(inner))))
            _insert(ctx, kind, value, r, k, better, slot, out_values, out_indices)


def _insert(ctx: KernelContext, kind: ElemKind, value: ir.Value, index: ir.Value, k: int,
            better: Callable[[ir.Value, ir.Value], ir.Value], slot: Callable[[ir.Value], ir.Value],
            out_values: ir.Value, out_indices: ir.Value) -> None:
    """Insert (value, index) into the sorted list of min(index, k) kept entries, keeping at most k
    (`value` and the entries as stored, `better` comparing two such)."""
    builder = ctx.builder
    kept = builder.select(builder.icmp_signed("<", index, i64(k)), index, i64(k))
    full = builder.icmp_signed("==", kept, i64(k))
    last = _load_bits(builder, out_values, kind, slot(i64(k - 1)))
    enters = builder.or_(builder.not_(full), better(value, last))
    with builder.if_then(enters):
        start = builder.select(full, i64(k - 1), kept)
        # Shift entries worse than `value` one place down, from the end towards the front.
        before = builder.block
        head = builder.append_basic_block("shift.head")
        body = builder.append_basic_block("shift.body")
        done = builder.append_basic_block("shift.done")
        builder.branch(head)
        builder.position_at_end(head)
        position = builder.phi(I64, name="position")
        position.add_incoming(start, before)
        previous = builder.sub(position, i64(1))
        at_front = builder.icmp_signed("==", position, i64(0))
        front = builder.select(at_front, i64(0), previous)
        ahead = _load_bits(builder, out_values, kind, slot(front))
        moves = builder.and_(builder.not_(at_front), better(value, ahead))
        builder.cbranch(moves, body, done)
        builder.position_at_end(body)
        builder.store(ahead, element_pointer(builder, out_values, kind, slot(position)))
        store(builder, load(builder, out_indices, ElemKind.INT64, slot(previous)), out_indices, ElemKind.INT64,
              slot(position))
        position.add_incoming(previous, body)
        builder.branch(head)
        builder.position_at_end(done)
        builder.store(value, element_pointer(builder, out_values, kind, slot(position)))
        store(builder, index, out_indices, ElemKind.INT64, slot(position))


def _load_bits(builder: ir.IRBuilder, base: ir.Value, kind: ElemKind, index: ir.Value) -> ir.Value:
    """Element `index` as stored (a half float's 16 bits, not its float32 value)."""
    return builder.load(element_pointer(builder, base, kind, index), typ=storage_type(kind))


register("TopK", COMPUTE_FLOATS | HALF_FLOATS | COMPUTE_INTS, _top_k)
