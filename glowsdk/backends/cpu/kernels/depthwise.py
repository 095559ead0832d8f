"""Depthwise stride-1 convolution: every tap summed in registers over a zero-padded plane.

A depthwise filter (one input channel per group) is too small for a GEMM tile, and
the general direct loop (conv.py) adds one tap at a time into the output plane:
each of a 7x7 filter's 49 taps reads and writes the whole plane again, and on a
7 x 7 plane a row is too short to vectorise. Here, per (image, filter):

1. the input plane is copied into this thread's zero-bordered scratch plane of
   Hp x Wp = (H + pads) x (W + pads) floats (the borders are zeroed once per run and
   never written, so no tap tests a bound);
2. one flat loop over i < (H_out - 1) * Wp + W_out computes
   y[i] = bias + sum over taps of w[t] * xp[i + offset(t)], all taps unrolled with
   their weights in registers: every output element is stored once, and the loop
   is long and contiguous (a 7 x 7 plane is one loop of 61, not 7 loops of 7), so
   LLVM vectorises it across output columns (8 or 16 lanes). Elements at columns
   W_out..Wp of a row are computed and dropped: (Wp - W_out) / Wp of the work;
3. the W_out valid columns of each row are copied to the output.

Strided and 3-d depthwise convolutions, and half kinds, stay on the general direct loop.
Threads share the (image, filter) planes.
"""
from __future__ import annotations

from typing import Any

from llvmlite import ir

from ....graph.types import ElemKind
from ..codegen.kinds import F32, I64, i64, load, store
from ..codegen.loops import loop
from ..codegen.module import KernelContext, Step
from ..codegen.threads import MAX_THREADS
from .gemm import offset
from .window import window_dims

MAX_TAPS = 81
"""Taps unrolled into the loop body at most (9 x 9): larger filters take the general loop."""


def padded_geometry(instr: Any) -> tuple[int, int, int, int] | None:
    """(Hp, Wp, H_out, W_out) of a depthwise stride-1 2-d (or 1-d) float32 convolution this kernel
    takes, else None."""
    if instr.types[0].elem is not ElemKind.FLOAT32:
        return None
    lead, rows, cols = window_dims(instr)
    channels = instr.input.type.shape[1]
    if (lead.size, lead.kernel) != (1, 1) or channels // instr.group != 1:
        return None
    if rows.stride != 1 or cols.stride != 1 or rows.kernel * cols.kernel > MAX_TAPS:
        return None
    return rows.size + rows.begin + rows.end, cols.size + cols.begin + cols.end, rows.out, cols.out


def applies(instr: Any) -> bool:
    return padded_geometry(instr) is not None


def emit_depthwise(ctx: KernelContext, step: Step) -> None:
    """The kernel of the module doc for `step`'s one Conv instruction."""
    instr = step.instrs[0]
    builder = ctx.builder
    height, width, out_h, out_w = padded_geometry(instr)
    _, rows, cols = window_dims(instr)
    images, channels = instr.input.type.shape[:2]
    filters = instr.filter.type.shape[0]
    per_channel = filters // channels  # the depth multiplier
    plane_in, plane_out = rows.size * cols.size, out_h * out_w
    span = (out_h - 1) * width + out_w
    padded = height * width
    per_thread = padded + span
    x, out, w = ctx.address(instr.input), ctx.address(instr.operands[0]), ctx.address(instr.filter)
    b = ctx.address(instr.bias) if instr.bias is not None else None
    scratch = offset(builder, ctx.scratch(MAX_THREADS * per_thread * 4),
                     builder.mul(builder.zext(ctx.thread, I64), i64(per_thread)))
    xp, y = scratch, offset(builder, scratch, padded)
    zero = ir.Constant(F32, 0.0)
    start, stop = ctx.share(images * filters)
    with loop(builder, padded, name="zero") as i:
        store(builder, zero, xp, ElemKind.FLOAT32, i)
    taps = [(t0, t1) for t0 in range(rows.kernel) for t1 in range(cols.kernel)]
    fmuladd = ctx.intrinsic("llvm.fmuladd", [F32], ir.FunctionType(F32, [F32, F32, F32]))
    with loop(builder, stop, start, name="nm") as nm:
        n, m = builder.udiv(nm, i64(filters)), builder.urem(nm, i64(filters))
        channel = builder.add(builder.mul(n, i64(channels)), builder.udiv(m, i64(per_channel)))
        source = offset(builder, x, builder.mul(channel, i64(plane_in)))
        with loop(builder, rows.size, name="r") as r:
            into = builder.add(builder.mul(builder.add(r, i64(rows.begin)), i64(width)), i64(cols.begin))
            with loop(builder, cols.size, name="c") as c:
                value = load(builder, source, ElemKind.FLOAT32, builder.add(builder.mul(r, i64(cols.size)), c))
                store(builder, value, xp, ElemKind.FLOAT32, builder.add(into, c))
        first = builder.mul(m, i64(len(taps)))
        weights = [load(builder, w, ElemKind.FLOAT32, builder.add(first, i64(k))) for k in range(len(taps))]
        bias = load(builder, b, ElemKind.FLOAT32, m) if b is not None else zero
        with loop(builder, span, name="i") as i:
            total = bias
            for weight, (t0, t1) in zip(weights, taps):
                shift = t0 * rows.dilation * width + t1 * cols.dilation
                tap = load(builder, xp, ElemKind.FLOAT32, builder.add(i, i64(shift)))
                total = builder.call(fmuladd, [weight, tap, total])
            store(builder, total, y, ElemKind.FLOAT32, i)
        target = offset(builder, out, builder.mul(nm, i64(plane_out)))
        with loop(builder, out_h, name="oh") as oh, loop(builder, out_w, name="ow") as ow:
            value = load(builder, y, ElemKind.FLOAT32, builder.add(builder.mul(oh, i64(width)), ow))
            store(builder, value, target, ElemKind.FLOAT32, builder.add(builder.mul(oh, i64(out_w)), ow))
