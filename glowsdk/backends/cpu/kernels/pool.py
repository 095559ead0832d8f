"""MaxPool and AveragePool over 1 to 3 spatial dims (strides, pads, dilations, ceil_mode).

Outputs are computed where they are stored, one output row (image, channel,
o0, o1) at a time: each output reads the taps of its window that land inside
the input (constant per-output tap tables, window.py), so padding is never read
and never wins a maximum (ONNX), and nothing is written twice. Along the row,
the columns whose whole window is inside the input go SIMD-wide: the row's k2
taps are unrolled, each a contiguous vector load (for stride s, a load s times
as wide and a shuffle keeping every s-th lane), so a 3x3 stride-2 pool is nine
loads, shuffles and compare-and-blends per 16 outputs. The last vector of a row
is shifted left to end at the row's last SIMD column (recomputing a few outputs
rather than running a scalar tail); the few border columns take the per-output
path. An average adds the taps and divides by the product of the per-dim tap
counts (inside the input, plus the explicit pads with count_include_pad). Max
propagates NaN like numpy and takes integers (plain and quantized: the larger
raw q) by their signedness. float16 and bfloat16 are loaded as float32 and
rounded once into the output, as the interpreter computes them; they take the
per-output path. The pools that keep other per-output state, the 8-bit
quantized average and MaxPoolWithIndices, are in pool_taps.py. Threads share
the (image, channel) planes.
"""
from __future__ import annotations

import math
from typing import Callable

from llvmlite import ir

from ..codegen.kinds import (
    COMPUTE_FLOATS,
    COMPUTE_INTS,
    HALF_FLOATS,
    I32,
    I64,
    i64,
    load,
    splat_constant,
    storage_type,
    store,
    value_type,
    vector_constant,
)
from ..codegen.loops import loop
from ..codegen.module import KernelContext, Step
from ..codegen.target import host_vectors
from .gemm import splat
from .pool_taps import larger, lowest, max_pool_with_indices, quantized_average_pool
from .quant import BYTE_QUANTIZED, QUANTIZED
from .table import register
from .window import Dim, spatial_strides, window_dims

NSW = ("nsw",)
"""Index arithmetic never wraps (every index is inside its buffer)."""
MAX_SIMD_STRIDE = 4
"""Strides up to this load stride x lanes contiguous elements and shuffle; larger ones are rare
enough that the per-output path serves them."""
MAX_LANES = 32


def simd_columns(dim: Dim, lanes: int) -> tuple[int, int, int]:
    """(width, first, last): the output columns [first, last) of a row that go `width` lanes at a
    time. Every tap of their windows is inside the input, and so is the whole wide load of
    stride x width elements (its last stride - 1 are read and dropped). Width 0: none do."""
    if dim.stride > MAX_SIMD_STRIDE:
        return 0, 0, 0
    first = -(-dim.begin // dim.stride)
    reach = (dim.kernel - 1) * dim.dilation + dim.stride - 1 - dim.begin
    last = min(dim.out, (dim.size - 1 - reach) // dim.stride + 1)
    width = lanes
    while width >= 4 and width > last - first:
        width //= 2
    return (width, first, last) if width >= 4 else (0, 0, 0)


def _pool(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    average = instr.kind == "AveragePool"
    if average and instr.input.type.elem.is_quantized:
        quantized_average_pool(ctx, step)
        return
    _RowPool(ctx, instr, average).build()


class _RowPool:
    """The kernel of one MaxPool/AveragePool instruction, built row by row."""

    def __init__(self, ctx: KernelContext, instr, average: bool) -> None:
        self.ctx, self.builder, self.instr, self.average = ctx, ctx.builder, instr, average
        self.kind = instr.operands[0].type.elem
        self.value = value_type(self.kind)
        self.dims = window_dims(instr)
        self.source, self.dest = ctx.address(instr.input), ctx.address(instr.operands[0])
        self.taps = [tuple(ctx.table(f"{bound}{i}", I64, [d.taps_of_output(o)[j] for o in range(d.out)])
                           for j, bound in enumerate(("lo", "hi"))) for i, d in enumerate(self.dims)]
        self.counts = [ctx.table(f"count{i}", self.value, [float(d.counted_taps(o, instr.count_include_pad))
                                                           for o in range(d.out)])
                       for i, d in enumerate(self.dims)] if average else []
        vector_bytes = host_vectors().lanes * 4
        self.itemsize = self.kind.dtype.itemsize
        lanes = 0 if self.kind in HALF_FLOATS else min(MAX_LANES, vector_bytes // self.itemsize)
        self.width, self.first, self.last = simd_columns(self.dims[2], lanes)

    def build(self) -> None:
        builder, dims = self.builder, self.dims
        d0, d1, d2 = dims
        plane_in = math.prod(d.size for d in dims)
        start, stop = self.ctx.share(math.prod(self.instr.input.type.shape[:2]))
        with loop(builder, stop, start, name="plane") as p, loop(builder, d0.out, name="o0") as o0, \
                loop(builder, d1.out, name="o1") as o1:
            image = builder.mul(p, i64(plane_in), flags=NSW)
            out_row = builder.mul(builder.add(builder.mul(p, i64(d0.out * d1.out), flags=NSW),
                                              builder.add(builder.mul(o0, i64(d1.out), flags=NSW), o1, flags=NSW),
                                              flags=NSW), i64(d2.out), flags=NSW)
            bounds = [[self.ctx.lookup(table, I64, o) for table in pair] for pair, o in zip(self.taps[:2], (o0, o1))]
            row_count = builder.fmul(self.ctx.lookup(self.counts[0], self.value, o0),
                                     self.ctx.lookup(self.counts[1], self.value, o1)) if self.average else None
            window = _Window(self, image, (o0, o1), bounds)
            if self.width:
                self._simd_columns(window, out_row, row_count)
                self._scalar_columns(window, out_row, row_count, 0, self.first)
                self._scalar_columns(window, out_row, row_count, self.last, d2.out)
            else:
                self._scalar_columns(window, out_row, row_count, 0, d2.out)

    def _simd_columns(self, window: _Window, out_row: ir.Value, row_count: ir.Value | None) -> None:
        builder, width, d2 = self.builder, self.width, self.dims[2]
        vectors = -(-(self.last - self.first) // width)
        vector = ir.VectorType(self.value, width)
        slot = self.ctx.local(vector, "vacc")
        with loop(builder, vectors, name="v") as v:
            column = builder.add(i64(self.first), builder.mul(v, i64(width), flags=NSW), flags=NSW)
            column = builder.select(builder.icmp_signed(">", column, i64(self.last - width)),
                                    i64(self.last - width), column)

            def taps(row: ir.Value, fold: Callable[[ir.Value], None]) -> None:
                base = builder.add(row, builder.sub(builder.mul(column, i64(d2.stride), flags=NSW),
                                                    i64(d2.begin), flags=NSW), flags=NSW)
                for t2 in range(d2.kernel):
                    fold(self._strided_load(builder.add(base, i64(t2 * d2.dilation), flags=NSW), width))

            result = window.reduce(slot, splat(builder, self._identity(), width), taps)
            if row_count is not None:
                result = builder.fdiv(result, splat(builder, builder.fmul(row_count, self._constant(d2.kernel)), width))
            pointer = builder.gep(self.dest, [builder.add(out_row, column, flags=NSW)], inbounds=True,
                                  source_etype=storage_type(self.kind))
            builder.store(result, pointer, align=self.itemsize)

    def _strided_load(self, index: ir.Value, width: int) -> ir.Value:
        """`width` elements source[index + stride * j]: one contiguous load, shuffled for stride > 1."""
        builder, stride, element = self.builder, self.dims[2].stride, storage_type(self.kind)
        pointer = builder.gep(self.source, [index], inbounds=True, source_etype=element)
        wide = builder.load(pointer, typ=ir.VectorType(element, width * stride), align=self.itemsize)
        if stride == 1:
            return wide
        mask = vector_constant(I32, [j * stride for j in range(width)])
        return builder.shuffle_vector(wide, splat_constant(element, 0, width * stride), mask)

    def _scalar_columns(self, window: _Window, out_row: ir.Value, row_count: ir.Value | None,
                        begin: int, end: int) -> None:
        """Output columns [begin, end) one at a time, over the taps of each inside the input."""
        if begin >= end:
            return
        builder, d2 = self.builder, self.dims[2]
        slot = self.ctx.local(self.value, "acc")
        with loop(builder, end, begin, name="c") as column:
            lo, hi = (self.ctx.lookup(table, I64, column) for table in self.taps[2])

            def taps(row: ir.Value, fold: Callable[[ir.Value], None]) -> None:
                with loop(builder, hi, lo, name="t2") as t2:
                    position = builder.sub(builder.add(builder.mul(column, i64(d2.stride), flags=NSW),
                                                       builder.mul(t2, i64(d2.dilation), flags=NSW), flags=NSW),
                                           i64(d2.begin), flags=NSW)
                    fold(load(builder, self.source, self.kind, builder.add(row, position, flags=NSW)))

            result = window.reduce(slot, self._identity(), taps)
            if row_count is not None:
                result = builder.fdiv(result, builder.fmul(row_count, self.ctx.lookup(self.counts[2], self.value,
                                                                                         column)))
            store(builder, result, self.dest, self.kind, builder.add(out_row, column, flags=NSW))

    def _identity(self) -> ir.Constant:
        return ir.Constant(self.value, 0.0) if self.average else lowest(self.kind)

    def _constant(self, count: int) -> ir.Constant:
        return ir.Constant(self.value, float(count))

    def combine(self, current: ir.Value, value: ir.Value) -> ir.Value:
        if self.average:
            return self.builder.fadd(current, value, flags=("reassoc",))
        return larger(self.builder, self.kind, current, value)


class _Window:
    """The (t0, t1) taps of one output row inside the input: where each input row starts."""

    def __init__(self, pool: _RowPool, image: ir.Value, outputs: tuple[ir.Value, ir.Value],
                 bounds: list[list[ir.Value]]) -> None:
        self.pool, self.image, self.outputs, self.bounds = pool, image, outputs, bounds

    def reduce(self, slot: ir.Value, identity: ir.Value,
               taps: Callable[[ir.Value, Callable[[ir.Value], None]], None]) -> ir.Value:
        """The reduction over the window, kept in `slot`: `taps(row, fold)` folds one input row's taps."""
        pool = self.pool
        builder, dims = pool.builder, pool.dims
        strides = spatial_strides(dims, "size")
        builder.store(identity, slot)

        def fold(value: ir.Value) -> None:
            builder.store(pool.combine(builder.load(slot), value), slot)

        with loop(builder, self.bounds[0][1], self.bounds[0][0], name="t0") as t0, \
                loop(builder, self.bounds[1][1], self.bounds[1][0], name="t1") as t1:
            row = self.image
            for o, t, d, stride in zip(self.outputs, (t0, t1), dims[:2], strides[:2]):
                position = builder.sub(builder.add(builder.mul(o, i64(d.stride), flags=NSW),
                                                   builder.mul(t, i64(d.dilation), flags=NSW), flags=NSW),
                                       i64(d.begin), flags=NSW)
                row = builder.add(row, builder.mul(position, i64(stride), flags=NSW), flags=NSW)
            taps(row, fold)
        return builder.load(slot)


register("MaxPool", COMPUTE_FLOATS | HALF_FLOATS | COMPUTE_INTS | QUANTIZED, _pool)
register("AveragePool", COMPUTE_FLOATS | HALF_FLOATS | BYTE_QUANTIZED, _pool)
register("MaxPoolWithIndices", COMPUTE_FLOATS | HALF_FLOATS | COMPUTE_INTS | QUANTIZED, max_pool_with_indices)
