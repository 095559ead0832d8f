"""Direct grouped N-d convolution (1 to 3 spatial dims), strided, padded and dilated.

Per (image, output channel) the output plane starts as the bias; then for each
input channel of the group and each filter tap, the plane gets weight times the
input plane shifted by the tap. The output rows a tap reaches inside the input
come from constant tables (window.py), so the innermost loop, along an output
row, has no bound checks: with stride 1 it is a contiguous multiply-add that
LLVM vectorises to FMA. What remains for peak speed (issue 6): a register-blocked
micro-kernel over several output channels with the filter in the
[M/N, taps, C, N] layout of paper Figure 6, and im2col + blocked matmul for
pointwise convolutions.
"""
from __future__ import annotations

import math

from llvmlite import ir

from ....graph.types import ElemKind

from ..codegen.kinds import COMPUTE_FLOATS, I64, element_pointer, i64, load, storage_type
from ..codegen.loops import loop
from ..codegen.module import KernelContext, Step
from .matmul import multiply_add
from .table import register
from .window import Dim, window_dims


def _conv(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    dest, source, weights, bias = instr.operands[0], instr.input, instr.filter, instr.bias
    kind = dest.type.elem
    builder = ctx.builder
    images, channels = source.type.shape[:2]
    filters, group = weights.type.shape[0], instr.group
    per_group_in, per_group_out = channels // group, filters // group
    dims = window_dims(instr)
    taps = [d.kernel for d in dims]
    plane_in = math.prod(d.size for d in dims)
    plane_out = math.prod(d.out for d in dims)
    ranges = [(ctx.table(f"lo{i}", I64, [d.outputs_of_tap(t)[0] for t in range(d.kernel)]),
               ctx.table(f"hi{i}", I64, [d.outputs_of_tap(t)[1] for t in range(d.kernel)])) for i, d in enumerate(dims)]
    out, x, w = ctx.address(dest), ctx.address(source), ctx.address(weights)
    b = ctx.address(bias) if bias is not None else None
    zero = ir.Constant(storage_type(kind), 0.0)
    with loop(builder, images, name="n") as n, loop(builder, group, name="g") as g:
        with loop(builder, per_group_out, name="m") as mm:
            m = builder.add(builder.mul(g, i64(per_group_out)), mm)
            plane = builder.mul(builder.add(builder.mul(n, i64(filters)), m), i64(plane_out))
            start = load(builder, b, kind, m) if b is not None else zero
            with loop(builder, plane_out, name="init") as o:
                builder.store(start, element_pointer(builder, out, kind, builder.add(plane, o)))
            with loop(builder, per_group_in, name="c") as c:
                channel = builder.add(builder.mul(g, i64(per_group_in)), c)
                image_plane = builder.mul(builder.add(builder.mul(n, i64(channels)), channel), i64(plane_in))
                filter_base = builder.mul(builder.add(builder.mul(m, i64(per_group_in)), c), i64(math.prod(taps)))
                with loop(builder, taps[0], name="t0") as t0, loop(builder, taps[1], name="t1") as t1, \
                        loop(builder, taps[2], name="t2") as t2:
                    tap = builder.add(builder.mul(builder.add(builder.mul(t0, i64(taps[1])), t1), i64(taps[2])), t2)
                    weight = load(builder, w, kind, builder.add(filter_base, tap))
                    bounds = [[ctx.lookup(table, I64, t) for table in pair] for pair, t in zip(ranges, (t0, t1, t2))]
                    _accumulate(ctx, dims, (t0, t1, t2), bounds, weight, out, plane, x, image_plane, kind)


def _accumulate(ctx: KernelContext, dims: list[Dim], taps: tuple[ir.Value, ...], bounds: list[list[ir.Value]],
                weight: ir.Value, out: ir.Value, plane: ir.Value, x: ir.Value, image_plane: ir.Value,
                kind: ElemKind) -> None:
    """out[plane + o] += weight * x[image_plane + position(o, tap)] over the output box `bounds`."""
    builder = ctx.builder

    def position(index: ir.Value, tap: ir.Value, dim: Dim) -> ir.Value:
        return builder.sub(builder.add(builder.mul(index, i64(dim.stride)), builder.mul(tap, i64(dim.dilation))),
                           i64(dim.begin))

    d0, d1, d2 = dims
    with loop(builder, bounds[0][1], bounds[0][0], name="o0") as o0, \
            loop(builder, bounds[1][1], bounds[1][0], name="o1") as o1:
        out_row = builder.add(plane, builder.mul(builder.add(builder.mul(o0, i64(d1.out)), o1), i64(d2.out)))
        in_row = builder.add(image_plane, builder.mul(builder.add(builder.mul(position(o0, taps[0], d0), i64(d1.size)),
                                                                  position(o1, taps[1], d1)), i64(d2.size)))
        with loop(builder, bounds[2][1], bounds[2][0], name="o2") as o2:
            pointer = element_pointer(builder, out, kind, builder.add(out_row, o2))
            value = load(builder, x, kind, builder.add(in_row, position(o2, taps[2], d2)))
            multiply_add(builder, pointer, weight, value)


register("Conv", COMPUTE_FLOATS, _conv)
