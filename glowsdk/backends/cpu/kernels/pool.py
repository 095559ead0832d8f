"""MaxPool and AveragePool over 1 to 3 spatial dims (strides, pads, dilations, ceil_mode).

Per output position the kernel reduces only the taps that land inside the
input: their range along each dim comes from constant tables (window.py), so
padding is never read and never wins a maximum (ONNX). An average divides by
the product of the per-dim tap counts (inside the input, plus the explicit
pads with count_include_pad), also tabled. Max propagates NaN like numpy.
"""
from __future__ import annotations

import math

from llvmlite import ir

from ..codegen.kinds import COMPUTE_FLOATS, I64, i64, load, storage_type, store
from ..codegen.loops import loop
from ..codegen.module import KernelContext, Step
from .table import register
from .window import spatial_strides, window_dims


def _pool(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    average = instr.kind == "AveragePool"
    dest, source = instr.operands[0], instr.input
    kind = dest.type.elem
    element = storage_type(kind)
    builder = ctx.builder
    dims = window_dims(instr)
    planes = math.prod(source.type.shape[:2])
    plane_in = math.prod(d.size for d in dims)
    plane_out = math.prod(d.out for d in dims)
    in_strides = spatial_strides(dims, "size")
    tables = [(ctx.table(f"lo{i}", I64, [d.taps_of_output(o)[0] for o in range(d.out)]),
               ctx.table(f"hi{i}", I64, [d.taps_of_output(o)[1] for o in range(d.out)])) for i, d in enumerate(dims)]
    counts = [ctx.table(f"count{i}", element, [float(d.counted_taps(o, instr.count_include_pad)) for o in range(d.out)])
              for i, d in enumerate(dims)] if average else []
    acc = ctx.local(element)
    start = ir.Constant(element, 0.0 if average else float("-inf"))
    maximum = ctx.intrinsic("llvm.maximum", [element], ir.FunctionType(element, [element, element]))
    x, out = ctx.address(source), ctx.address(dest)
    with loop(builder, planes, name="plane") as p:
        with loop(builder, dims[0].out, name="o0") as o0, loop(builder, dims[1].out, name="o1") as o1, \
                loop(builder, dims[2].out, name="o2") as o2:
            outs = (o0, o1, o2)
            builder.store(start, acc)
            bounds = [[ctx.lookup(t, I64, o) for t in pair] for pair, o in zip(tables, outs)]
            with loop(builder, bounds[0][1], bounds[0][0], name="t0") as t0, \
                    loop(builder, bounds[1][1], bounds[1][0], name="t1") as t1, \
                    loop(builder, bounds[2][1], bounds[2][0], name="t2") as t2:
                index = builder.mul(p, i64(plane_in))
                for d, o, t, stride in zip(dims, outs, (t0, t1, t2), in_strides):
                    position = builder.add(builder.mul(o, i64(d.stride)), builder.mul(t, i64(d.dilation)))
                    position = builder.sub(position, i64(d.begin))
                    index = builder.add(index, builder.mul(position, i64(stride)))
                value = load(builder, x, kind, index)
                current = builder.load(acc, typ=element)
                builder.store(builder.fadd(current, value) if average else builder.call(maximum, [current, value]), acc)
            result = builder.load(acc, typ=element)
            if average:
                c0, c1, c2 = (ctx.lookup(table, element, o) for table, o in zip(counts, outs))
                result = builder.fdiv(result, builder.fmul(builder.fmul(c0, c1), c2))
            out_index = builder.add(builder.mul(p, i64(plane_out)), builder.add(
                builder.mul(builder.add(builder.mul(o0, i64(dims[1].out)), o1), i64(dims[2].out)), o2))
            store(builder, result, out, kind, out_index)


register("MaxPool", COMPUTE_FLOATS, _pool)
register("AveragePool", COMPUTE_FLOATS, _pool)
