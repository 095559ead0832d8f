"""Pools that loop outputs outside and taps inside: MaxPoolWithIndices and the 8-bit quantized AveragePool.

pool.py reduces each output's window to one value, SIMD-wide along a row. Two
pools keep more per output: MaxPoolWithIndices tracks which tap won
(the first maximum in window order, as primitives.md says), and a quantized
average sums raw integers in an i32 register before one rounded division. Both
run per output position over its window, so they are written in the order the
reference reads them (reference/kernels/nn.py) and match it bit for bit:

- MaxPoolWithIndices walks every tap of the window, the padding too, which is
  worth the kind's lowest value (-inf, or the integer minimum) and so can only
  win a window where nothing beats it; a tap wins when it is strictly greater
  than the running maximum (ordered: never after a NaN), and the maximum
  propagates NaN. The index is the flat position in the unpadded input,
  ((n*C + c)*D1 + d1)*D2.. (spatial dims reversed when column_major).
- The quantized average walks only the taps inside the input (constant per-output
  tables, window.py): total = sum(q) + offset * (counted taps - taps inside),
  so padding is worth the offset, then total / count rounded half to even.

Threads share the (image, channel) planes.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from ....graph.types import ElemKind
from ..codegen.kinds import I1, I32, I64, i64, load, store, value_type
from ..codegen.loops import loop
from ..codegen.module import KernelContext, Step
from .quant import is_signed, widen
from .window import Dim, window_dims


def lowest(kind: ElemKind) -> ir.Constant:
    """The value padding is worth in a maximum: -inf, or the integer kind's minimum."""
    if kind.is_float:
        return ir.Constant(value_type(kind), float("-inf"))
    return ir.Constant(value_type(kind), int(np.iinfo(kind.dtype).min))


def greater(builder: ir.IRBuilder, kind: ElemKind, a: ir.Value, b: ir.Value) -> ir.Value:
    """a > b: ordered on floats (false with NaN), by the signedness of integers."""
    if kind.is_float:
        return builder.fcmp_ordered(">", a, b)
    compare = builder.icmp_signed if is_signed(kind) else builder.icmp_unsigned
    return compare(">", a, b)


def nan_max(builder: ir.IRBuilder, current: ir.Value, value: ir.Value) -> ir.Value:
    """max(current, value) of floats, NaN if either is NaN, as compares and a select (which LLVM
    vectorises to a compare-and-blend; llvm.maximum's x86 lowering kept pool loops scalar)."""
    keep = builder.or_(builder.fcmp_ordered(">=", current, value), builder.fcmp_unordered("uno", current, current))
    return builder.select(keep, current, value)


def larger(builder: ir.IRBuilder, kind: ElemKind, current: ir.Value, value: ir.Value) -> ir.Value:
    """The maximum of two values of `kind`, as np.maximum (NaN propagates)."""
    if kind.is_float:
        return nan_max(builder, current, value)
    return builder.select(greater(builder, kind, value, current), value, current)


def index_steps(dims: list[Dim], rank: int, column_major: bool) -> list[int]:
    """The flat-index step of each of the 3 window dims: row- or column-major over the real
    spatial dims, 0 for the size-1 dims a lower-rank window is padded with."""
    real = [d.size for d in dims[len(dims) - rank:]]
    if column_major:
        steps = [math.prod(real[:i]) for i in range(rank)]
    else:
        steps = [math.prod(real[i + 1:]) for i in range(rank)]
    return [0] * (len(dims) - rank) + steps


def max_pool_with_indices(ctx: KernelContext, step: Step) -> None:
    """Per output position, the running maximum over the window and the flat index of its winner."""
    instr = step.instrs[0]
    builder = ctx.builder
    source = instr.input
    result, indices = instr.operands[:2]
    kind = source.type.elem
    dims = window_dims(instr)
    rank = source.type.rank - 2
    steps = index_steps(dims, rank, instr.column_major)
    plane_in = math.prod(d.size for d in dims)
    x, out = ctx.address(source), ctx.address(result)
    best_slot, winner_slot = ctx.local(value_type(kind), "best"), ctx.local(I64, "winner")
    padding = lowest(kind)
    start, stop = ctx.share(math.prod(source.type.shape[:2]))
    with loop(builder, stop, start, name="plane") as p, \
            loop(builder, dims[0].out, name="o0") as o0, loop(builder, dims[1].out, name="o1") as o1, \
            loop(builder, dims[2].out, name="o2") as o2:
        outputs = (o0, o1, o2)

        def tap(taps: tuple[ir.Value, ...]) -> tuple[ir.Value, ir.Value]:
            """The tap's value (lowest in the padding) and its flat index in the unpadded input."""
            inside: ir.Value = ir.Constant(I1, 1)
            memory, flat = builder.mul(p, i64(plane_in)), builder.mul(p, i64(plane_in))
            in_stride = plane_in
            for o, t, d, index_step in zip(outputs, taps, dims, steps):
                in_stride //= d.size
                position = builder.sub(builder.add(builder.mul(o, i64(d.stride)), builder.mul(t, i64(d.dilation))),
                                       i64(d.begin))
                ok = builder.and_(builder.icmp_signed(">=", position, i64(0)),
                                  builder.icmp_signed("<", position, i64(d.size)))
                inside = builder.and_(inside, ok)
                memory = builder.add(memory, builder.mul(position, i64(in_stride)))
                flat = builder.add(flat, builder.mul(position, i64(index_step)))
            loaded = load(builder, x, kind, builder.select(inside, memory, i64(0)))
            return builder.select(inside, loaded, padding), flat

        first, first_index = tap((i64(0),) * 3)
        builder.store(first, best_slot)
        builder.store(first_index, winner_slot)
        with loop(builder, dims[0].kernel, name="t0") as t0, loop(builder, dims[1].kernel, name="t1") as t1, \
                loop(builder, dims[2].kernel, name="t2") as t2:
            value, flat = tap((t0, t1, t2))
            best = builder.load(best_slot)
            builder.store(builder.select(greater(builder, kind, value, best), flat, builder.load(winner_slot)),
                          winner_slot)
            builder.store(larger(builder, kind, best, value), best_slot)
        position = _output_position(builder, p, outputs, dims)
        store(builder, builder.load(best_slot), out, result.type.elem, position)
        store(builder, builder.load(winner_slot), ctx.address(indices), ElemKind.INT64, position)


def _output_position(builder: ir.IRBuilder, plane: ir.Value, outputs: tuple[ir.Value, ...],
                     dims: list[Dim]) -> ir.Value:
    """The flat position of output (o0, o1, o2) of `plane`."""
    position = plane
    for o, d in zip(outputs, dims):
        position = builder.add(builder.mul(position, i64(d.out)), o)
    return position


def quantized_average_pool(ctx: KernelContext, step: Step) -> None:
    """Per output position, the rounded average of the raw q its window counts (padding worth the offset)."""
    instr = step.instrs[0]
    builder = ctx.builder
    source, result = instr.input, instr.operands[0]
    kind, offset = source.type.elem, source.type.offset
    dims = window_dims(instr)
    plane_in = math.prod(d.size for d in dims)
    in_strides = [math.prod(d.size for d in dims[i + 1:]) for i in range(len(dims))]
    taps = [[ctx.table(f"{bound}{i}", I64, [d.taps_of_output(o)[j] for o in range(d.out)])
             for j, bound in enumerate(("lo", "hi"))] for i, d in enumerate(dims)]
    counts = [ctx.table(f"count{i}", I32, [max(d.counted_taps(o, instr.count_include_pad), 1)
                                           for o in range(d.out)])  # 0 only in windows the output rule drops
              for i, d in enumerate(dims)]
    x, out = ctx.address(source), ctx.address(result)
    total_slot = ctx.local(I32, "total")
    start, stop = ctx.share(math.prod(source.type.shape[:2]))
    with loop(builder, stop, start, name="plane") as p, \
            loop(builder, dims[0].out, name="o0") as o0, loop(builder, dims[1].out, name="o1") as o1, \
            loop(builder, dims[2].out, name="o2") as o2:
        outputs = (o0, o1, o2)
        bounds = [[ctx.lookup(table, I64, o) for table in pair] for pair, o in zip(taps, outputs)]
        inside: ir.Value = ir.Constant(I32, 1)
        count: ir.Value = ir.Constant(I32, 1)
        for (lo, hi), table, o in zip(bounds, counts, outputs):
            inside = builder.mul(inside, builder.trunc(builder.sub(hi, lo), I32))
            count = builder.mul(count, ctx.lookup(table, I32, o))
        builder.store(builder.mul(ir.Constant(I32, offset), builder.sub(count, inside)), total_slot)
        with loop(builder, bounds[0][1], bounds[0][0], name="t0") as t0, \
                loop(builder, bounds[1][1], bounds[1][0], name="t1") as t1, \
                loop(builder, bounds[2][1], bounds[2][0], name="t2") as t2:
            element = builder.mul(p, i64(plane_in))
            for o, t, d, stride in zip(outputs, (t0, t1, t2), dims, in_strides):
                position = builder.sub(builder.add(builder.mul(o, i64(d.stride)), builder.mul(t, i64(d.dilation))),
                                       i64(d.begin))
                element = builder.add(element, builder.mul(position, i64(stride)))
            q = widen(builder, load(builder, x, kind, element), kind, I32)
            builder.store(builder.add(builder.load(total_slot), q), total_slot)
        average = rounded_average(builder, builder.load(total_slot), count)
        store(builder, builder.trunc(average, value_type(kind)), out, kind, _output_position(builder, p, outputs, dims))


def rounded_average(builder: ir.IRBuilder, total: ir.Value, count: ir.Value) -> ir.Value:
    """total / count rounded half to even, for count >= 1 (numerics.rounded_average)."""
    zero = ir.Constant(total.type, 0)
    remainder = builder.srem(total, count)
    negative = builder.icmp_signed("<", remainder, zero)
    floor = builder.sub(builder.sdiv(total, count), builder.zext(negative, total.type))
    remainder = builder.select(negative, builder.add(remainder, count), remainder)
    twice = builder.shl(remainder, ir.Constant(total.type, 1))
    odd = builder.trunc(floor, I1)
    tie_up = builder.and_(builder.icmp_signed("==", twice, count), odd)
    up = builder.or_(builder.icmp_signed(">", twice, count), tie_up)
    return builder.add(floor, builder.zext(up, total.type))
