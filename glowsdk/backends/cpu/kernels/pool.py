"""MaxPool and AveragePool over 1 to 3 spatial dims (strides, pads, dilations, ceil_mode).

Per plane (image, channel), the kernel loops taps outside and outputs inside, as
the direct convolution does: the output plane starts at the reduction's identity
(-inf, or 0 for an average), then each tap folds in the input elements it reads,
over the box of output positions where it lands inside the input (constant
per-tap tables, window.py). So padding is never read and never wins a maximum
(ONNX), the plane stays in cache across taps, and the innermost loop, along an
output row, is a plain strided loop without bound checks that LLVM vectorises.
An average then divides by the product of the per-dim tap counts (inside the
input, plus the explicit pads with count_include_pad), also tabled. Max
propagates NaN like numpy, and takes integers (plain and quantized: the larger
raw q) by their signedness. float16 and bfloat16 fold into a float32 plane in
scratch (one per thread), rounded into the output once: the interpreter computes
them in float32 and casts. The pools that keep per-output state, the 8-bit
quantized average and MaxPoolWithIndices, loop the other way (pool_taps.py).
Threads share the planes.
"""
from __future__ import annotations

import math

from llvmlite import ir

from ....graph.types import ElemKind
from ..codegen.kinds import (
    COMPUTE_FLOATS,
    COMPUTE_INTS,
    HALF_FLOATS,
    I64,
    element_pointer,
    i64,
    load,
    storage_type,
    store,
)
from ..codegen.loops import loop
from ..codegen.module import KernelContext, Step
from ..codegen.threads import MAX_THREADS
from .pool_taps import larger, lowest, max_pool_with_indices, quantized_average_pool
from .quant import BYTE_QUANTIZED, QUANTIZED
from .table import register
from .window import Dim, spatial_strides, window_dims

NSW = ("nsw",)
"""Index arithmetic never wraps (every index is inside its buffer), which lets LLVM's scalar
evolution see the inner loop's constant stride and vectorise it."""


def _pool(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    average = instr.kind == "AveragePool"
    if average and instr.input.type.elem.is_quantized:
        quantized_average_pool(ctx, step)
        return
    dest, source = instr.operands[0], instr.input
    kind = dest.type.elem
    half = kind in HALF_FLOATS
    acc_kind = ElemKind.FLOAT32 if half else kind
    element = storage_type(acc_kind)
    builder = ctx.builder
    dims = window_dims(instr)
    planes = math.prod(source.type.shape[:2])
    plane_in = math.prod(d.size for d in dims)
    plane_out = math.prod(d.out for d in dims)
    ranges = [(ctx.table(f"lo{i}", I64, [d.outputs_of_tap(t)[0] for t in range(d.kernel)]),
               ctx.table(f"hi{i}", I64, [d.outputs_of_tap(t)[1] for t in range(d.kernel)])) for i, d in enumerate(dims)]
    identity = ir.Constant(element, 0.0) if average else lowest(kind)
    x, out = ctx.address(source), ctx.address(dest)
    # The plane folds in the output itself, or for a half kind in this thread's float32 plane of
    # scratch, rounded into the output once (the interpreter computes halves in float32).
    acc = element_pointer(builder, ctx.scratch(MAX_THREADS * plane_out * 4), acc_kind,
                          builder.mul(builder.zext(ctx.thread, I64), i64(plane_out))) if half else out
    start, stop = ctx.share(planes)
    with loop(builder, stop, start, name="plane") as p:
        plane = builder.mul(p, i64(plane_out))
        acc_plane = i64(0) if half else plane
        image_plane = builder.mul(p, i64(plane_in))
        with loop(builder, plane_out, name="init") as o:
            builder.store(identity, element_pointer(builder, acc, acc_kind, builder.add(acc_plane, o)))
        with loop(builder, dims[0].kernel, name="t0") as t0, loop(builder, dims[1].kernel, name="t1") as t1, \
                loop(builder, dims[2].kernel, name="t2") as t2:
            taps = (t0, t1, t2)
            bounds = [[ctx.lookup(table, I64, t) for table in pair] for pair, t in zip(ranges, taps)]

            def combine(pointer: ir.Value, value: ir.Value) -> None:
                current = builder.load(pointer, typ=element)
                builder.store(builder.fadd(current, value, flags=("reassoc",)) if average
                              else larger(builder, kind, current, value), pointer)
            _fold(ctx, dims, taps, bounds, acc, acc_plane, x, image_plane, kind, acc_kind, combine)
        if average:
            _divide(ctx, instr, dims, acc, acc_plane, acc_kind)
        if half:
            with loop(builder, plane_out, name="round") as o:
                store(builder, load(builder, acc, acc_kind, o), out, kind, builder.add(plane, o))


def _fold(ctx: KernelContext, dims: list[Dim], taps: tuple[ir.Value, ...], bounds: list[list[ir.Value]],
          out: ir.Value, plane: ir.Value, x: ir.Value, image_plane: ir.Value, kind: ElemKind, out_kind: ElemKind,
          combine) -> None:
    """combine(&out[plane + o], x[image_plane + position(o, tap)]) over the output box `bounds`
    (x of `kind`, out holding `out_kind`)."""
    builder = ctx.builder
    in_strides = spatial_strides(dims, "size")

    def add(a: ir.Value, b: ir.Value) -> ir.Value:
        return builder.add(a, b, flags=NSW)

    def mul(a: ir.Value, b: int) -> ir.Value:
        return builder.mul(a, i64(b), flags=NSW)

    def position(index: ir.Value, tap: ir.Value, dim: Dim) -> ir.Value:
        return builder.sub(add(mul(index, dim.stride), mul(tap, dim.dilation)), i64(dim.begin), flags=NSW)

    d0, d1, d2 = dims
    with loop(builder, bounds[0][1], bounds[0][0], name="o0") as o0, \
            loop(builder, bounds[1][1], bounds[1][0], name="o1") as o1:
        out_row = add(plane, mul(add(mul(o0, d1.out), o1), d2.out))
        in_row = add(image_plane, add(mul(position(o0, taps[0], d0), in_strides[0]),
                                      mul(position(o1, taps[1], d1), in_strides[1])))
        with loop(builder, bounds[2][1], bounds[2][0], name="o2") as o2:
            value = load(builder, x, kind, add(in_row, position(o2, taps[2], d2)))
            combine(element_pointer(builder, out, out_kind, add(out_row, o2)), value)


def _divide(ctx: KernelContext, instr, dims: list[Dim], out: ir.Value, plane: ir.Value, kind) -> None:
    """Divide each output of the plane by the number of taps its average counts."""
    builder = ctx.builder
    element = storage_type(kind)
    counts = [ctx.table(f"count{i}", element, [float(d.counted_taps(o, instr.count_include_pad))
                                                for o in range(d.out)]) for i, d in enumerate(dims)]
    with loop(builder, dims[0].out, name="a0") as o0, loop(builder, dims[1].out, name="a1") as o1:
        row_count = builder.fmul(ctx.lookup(counts[0], element, o0), ctx.lookup(counts[1], element, o1))
        row = builder.add(plane, builder.mul(builder.add(builder.mul(o0, i64(dims[1].out)), o1), i64(dims[2].out)))
        with loop(builder, dims[2].out, name="a2") as o2:
            pointer = element_pointer(builder, out, kind, builder.add(row, o2))
            count = builder.fmul(row_count, ctx.lookup(counts[2], element, o2))
            builder.store(builder.fdiv(builder.load(pointer, typ=element), count), pointer)


register("MaxPool", COMPUTE_FLOATS | HALF_FLOATS | COMPUTE_INTS | QUANTIZED, _pool)
register("AveragePool", COMPUTE_FLOATS | HALF_FLOATS | BYTE_QUANTIZED, _pool)
register("MaxPoolWithIndices", COMPUTE_FLOATS | HALF_FLOATS | COMPUTE_INTS | QUANTIZED, max_pool_with_indices)
