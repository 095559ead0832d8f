"""Convolution: per shape, a GEMM on the register-blocked micro-kernel or a direct loop nest.

Which path a convolution takes is a rule on its shape (paper 5.3), checked in
order (CONV_RULES):

- `squeeze`: a 1x1 convolution of 1 x 1 maps (a squeeze-and-excitation's) is a GEMM whose rows
  are the images and columns the filters (squeeze.py), not one of a single column.
- `pointwise`: a 1x1, stride-1, unpadded 2-d convolution is a plain GEMM on NCHW
  memory: C[C_out, HW] = W[C_out, C_in] @ X[C_in, HW]. B is still copied into a
  panel per column tile (one contiguous [k][NR] stream instead of K rows HW apart,
  which measured as fast or faster: fewer TLB misses, no cache-set conflicts).
- `im2col`: any other 2-d (or 1-d) convolution with more than one input channel per
  group, or one channel but a long window and many filters (LONG_KERNEL_TAPS), is a
  GEMM with K = C_in/group x taps, its B panels packed per column tile from the
  input on the fly (packing.py), never an im2col matrix in memory.
- `winograd`: a float32 3x3 stride-1 convolution with enough channels and output tiles is
  Winograd F(4 x 4, 3 x 3) or F(2 x 2, 3 x 3) (winograd.py): 36 or 16 GEMMs over transformed
  tiles, 4 or 2.25 times fewer multiply-adds than im2col.
- `depthwise`: a float32 depthwise convolution (one input channel per group, K = taps
  only, too little reuse for a GEMM tile) sums all its taps in registers over
  zero-padded phase planes of each input plane (depthwise.py), stacked element-wise
  instructions applied as it stores.
- `direct`: other depthwise convolutions (half kinds, strides over 4) and 3-d ones run
  the direct loop nest below.

In the GEMM paths the filter is a constant packed at compile time into [M/MR, K,
MR] panels (the micro-kernel broadcasts MR filter values per k; a filter computed
at run time is read in place, row-major), the bias initialises the accumulators,
stacked element-wise instructions are applied as C is stored, and threads share
the (image, group, column tile) units (output positions), or for a single image
with few column tiles its row tiles. A thread packs its column tiles in blocks
that fit gemm.BLOCK_BYTES, and each row tile (MR output channels) sweeps a whole
block, so C is written in runs of block x NR positions per channel rather than
NR: a 64 -> 256 1x1 convolution at 56 x 56, batch 8, went from 15.3 to 10.6 ms.
Where the columns read consecutive input elements (1x1 and stride-1 windows of up to
9 taps, packing.first_pass_packs), no pass packs the panels: the first row tile of
each column tile reads B from the input and stores it into the panel as it computes
(gemm.Source), its loads overlapping its FMAs; at batch 1, 3x3 64 -> 64 at 56 x 56
went from 1.59 to 1.37 ms and 1x1 256 -> 64 from 0.81 to 0.71 ms. Stride-2 windows whose
output rows are whole vectors (a 7x7/2 stem over 224 x 224) take the first pass too, each
vector two loads and a shuffle instead of a gather: resnet50's stem 1.84 -> 1.60 ms.

The direct path: per (image, output channel) the output plane starts as the bias;
then for each input channel of the group and each filter tap, the plane gets weight
times the input plane shifted by the tap. The output rows a tap reaches inside the
input come from constant tables (window.py), so the innermost loop, along an output
row, has no bound checks and LLVM vectorises it. Threads share the output channels.
float16 and bfloat16 convolutions of every shape take this path, each plane summed
in float32 scratch and rounded once, as the interpreter computes them.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable

import numpy as np
from llvmlite import ir

from ....graph.types import ElemKind
from ..codegen.kinds import (
    COMPUTE_FLOATS,
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
from .depthwise import applies as depthwise_applies
from .depthwise import emit_depthwise
from .epilogue import stacked_epilogue
from .gemm import (
    Epilogue,
    Gemm,
    Panel,
    Source,
    bias_init,
    column_block,
    emit_gemm,
    offset,
    shared_units,
    splits_rows,
)
from .int8_conv import accepts as int8_accepts
from .int8_conv import emit_int8_conv
from .int8_matmul import QUANTIZED
from .matmul import multiply_add
from .split_depth import emit_split_depth, splits_depth
from .squeeze import applies as squeeze_applies
from .squeeze import emit_squeeze
from .packing import (
    Window,
    constant_filter,
    emit_pack,
    first_pass_packs,
    first_pass_source,
    pack_row_panels,
    table_pair,
)
from .table import register
from .window import Dim, window_dims
from .winograd import applies as winograd_applies
from .winograd import emit_winograd


def conv_window(instr: Any) -> Window | None:
    """The im2col geometry of a 1-d/2-d convolution (per group), None for a 3-d one."""
    lead, d1, d2 = window_dims(instr)
    if (lead.size, lead.kernel) != (1, 1):
        return None
    channels = instr.input.type.shape[1] // instr.group
    return Window(channels, d1.size, d2.size, d1.out, d2.out, (d1.kernel, d2.kernel), (d1.stride, d2.stride),
                  (d1.dilation, d2.dilation), (d1.begin, d2.begin))


def _is_pointwise(instr: Any) -> bool:
    window = conv_window(instr)
    return window is not None and window.pointwise


LONG_KERNEL_TAPS, LONG_KERNEL_FILTERS = 16, 8
"""A convolution over one input channel per group is still a GEMM when its window has at least
this many taps (K) and each group this many filters (M): audio's first layers (1 channel, kernel
80, stride 16, 128 filters) ran at 0.5 GFLOP/s as direct strided loops, a GEMM tile instead
reuses every packed input column for all filters. A depthwise filter (one per group) stays direct."""


def _is_gemm(instr: Any) -> bool:
    window = conv_window(instr)
    if window is None or instr.types[0].elem is not ElemKind.FLOAT32:
        return False
    filters = instr.filter.type.shape[0] // instr.group
    return window.channels > 1 or (window.taps >= LONG_KERNEL_TAPS and filters >= LONG_KERNEL_FILTERS)


def _conv_gemm(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    dest, source, bias = instr.operands[0], instr.input, instr.bias
    window = conv_window(instr)
    images = source.type.shape[0]
    filters, group = instr.filter.type.shape[0], instr.group
    per_out = filters // group
    columns = window.out_height * window.out_width
    gemm = Gemm(per_out, columns, window.channels * window.taps)
    builder = ctx.builder
    mr, nr = gemm.tile_rows, gemm.tile_columns
    weight = constant_filter(instr)
    if weight is not None:
        panels = ctx.constant(weight, "panels", ("rows", mr, group), lambda value: _packed_filter(value, group, mr))
        panel_size = gemm.row_tiles * mr * gemm.depth
    x, out = ctx.address(source), ctx.address(dest)
    filt = ctx.address(instr.filter)
    b = ctx.address(bias) if bias is not None else None
    epilogue = stacked_epilogue(ctx, step)
    tables = table_pair(ctx, window, gemm)
    first_pass = first_pass_packs(window, gemm.lanes)
    panel_floats = gemm.depth * nr
    planes = images * group
    spread = planes > 1 and planes * gemm.column_tiles >= SPREAD_UNITS
    block = column_block(gemm, 4 * panel_floats) if spread or not splits_rows(gemm) else 1
    scratch = ctx.thread_scratch(block * panel_floats * 4)

    def panel_of(slot: ir.Value) -> Panel:
        return Panel(offset(builder, scratch, builder.mul(slot, i64(panel_floats))), nr)

    def plane(n: ir.Value, g: ir.Value, column_range: tuple[ir.Value, ir.Value] | None) -> None:
        image = offset(builder, x, builder.mul(builder.add(builder.mul(n, i64(group)), g),
                                               i64(window.channels * window.height * window.width)))
        c = offset(builder, out, builder.mul(builder.add(builder.mul(n, i64(group)), g), i64(per_out * columns)))
        rows = builder.mul(g, i64(per_out))
        init = bias_init(ctx, offset(builder, b, rows) if b is not None else None, per_out)
        if weight is not None:
            group_panels = offset(builder, panels, builder.mul(g, i64(panel_size)))

            def a_of(mt: ir.Value) -> Panel:
                return Panel(offset(builder, group_panels, builder.mul(mt, i64(mr * gemm.depth))), mr, 1,
                             streamed=True)
        else:
            group_filter = offset(builder, filt, builder.mul(rows, i64(gemm.depth)))

            def a_of(mt: ir.Value) -> Panel:
                return Panel(offset(builder, group_filter, builder.mul(mt, i64(mr * gemm.depth))), 1, gemm.depth)

        def b_of(nt: ir.Value, slot: ir.Value = i64(0)) -> Panel:
            if first_pass:
                return panel_of(slot)
            return emit_pack(ctx, window, gemm, image, nt, panel_of(slot).pointer, tables)

        def source_of(nt: ir.Value) -> Source:
            return first_pass_source(ctx, window, gemm, image, nt, tables)

        def at_image(whole: Epilogue | None) -> Epilogue | None:
            if whole is None:
                return None
            return whole.shifted(builder, builder.mul(builder.add(builder.mul(n, i64(group)), g),
                                                      i64(per_out * columns)))

        emit_gemm(ctx, gemm, a_of, weight is not None, b_of, c, columns, init, at_image(epilogue), block, panel_of,
                  column_range, source_of if first_pass else None)

    if window.pointwise and splits_depth(gemm, planes):
        def part_gemm(part: ir.Value, half: Gemm, c: ir.Value, init: Callable, column_range: tuple) -> None:
            part_window = replace(window, channels=window.channels // 2)
            image = offset(builder, x, builder.mul(part, i64(part_window.channels * window.height * window.width)))

            def a_of(mt: ir.Value) -> Panel:
                if weight is None:  # row-major [M, K]: the part's first column
                    return Panel(offset(builder, filt, builder.add(builder.mul(part, i64(half.depth)),
                                                                   builder.mul(mt, i64(mr * gemm.depth)))),
                                 1, gemm.depth)
                first = builder.mul(part, i64(half.depth * mr))  # [M / MR, K, MR] panels: the part's first k
                return Panel(offset(builder, panels, builder.add(first, builder.mul(mt, i64(mr * gemm.depth)))), mr, 1,
                             streamed=True)
            emit_gemm(ctx, half, a_of, weight is not None, lambda nt, slot=i64(0): panel_of(slot), c, columns, init,
                      None, 1, panel_of, column_range,
                      lambda nt: first_pass_source(ctx, part_window, half, image, nt, tables))
        emit_split_depth(ctx, gemm, lambda: plane(i64(0), i64(0), None), part_gemm, out,
                         bias_init(ctx, b, per_out), epilogue)
        return
    if not spread:
        with loop(builder, images, name="n") as n, loop(builder, group, name="g") as g:
            plane(n, g, None)
        return
    # Threads share the (image, group, column tile) units, so a batch splits evenly even where
    # one image's column tiles do not.
    with shared_units(ctx, planes, gemm.column_tiles, "ng") as (ng, tiles):
        plane(builder.udiv(ng, i64(group)), builder.urem(ng, i64(group)), tiles)


SPREAD_UNITS = 8
"""(image, group, column tile) units from which threads share those rather than, per image, its
column or row tiles."""


def _packed_filter(value: Any, group: int, tile_rows: int) -> Any:
    """[M, C/g, kh, kw] -> per group [M/g / MR, K, MR] panels, groups one after another."""
    filters = value.shape[0]
    matrix = value.reshape(group, filters // group, -1)
    if group == 1:
        return pack_row_panels(matrix[0], tile_rows).reshape(-1)  # no concatenation's copy
    return np.concatenate([pack_row_panels(matrix[g], tile_rows).reshape(-1) for g in range(group)])


def _conv_direct(ctx: KernelContext, step: Step) -> None:
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
    half = kind in HALF_FLOATS
    # The plane sums in the output itself, or for a half kind in this thread's float32 plane of
    # scratch, rounded into the output once (the interpreter's float32 convolution, then cast).
    acc_kind = ElemKind.FLOAT32 if half else kind
    acc = ctx.thread_scratch(plane_out * 4) if half else out
    zero = ir.Constant(storage_type(acc_kind), 0.0)
    start, stop = ctx.share(images * filters)
    with loop(builder, stop, start, name="nm") as nm:
        n, m = builder.udiv(nm, i64(filters)), builder.urem(nm, i64(filters))
        g = builder.udiv(m, i64(per_group_out))
        plane = builder.mul(nm, i64(plane_out))
        acc_plane = i64(0) if half else plane
        begin = load(builder, b, kind, m) if b is not None else zero
        with loop(builder, plane_out, name="init") as o:
            builder.store(begin, element_pointer(builder, acc, acc_kind, builder.add(acc_plane, o)))
        with loop(builder, per_group_in, name="c") as c:
            channel = builder.add(builder.mul(g, i64(per_group_in)), c)
            image_plane = builder.mul(builder.add(builder.mul(n, i64(channels)), channel), i64(plane_in))
            filter_base = builder.mul(builder.add(builder.mul(m, i64(per_group_in)), c), i64(math.prod(taps)))
            with loop(builder, taps[0], name="t0") as t0, loop(builder, taps[1], name="t1") as t1, \
                    loop(builder, taps[2], name="t2") as t2:
                tap = builder.add(builder.mul(builder.add(builder.mul(t0, i64(taps[1])), t1), i64(taps[2])), t2)
                weight = load(builder, w, kind, builder.add(filter_base, tap))
                bounds = [[ctx.lookup(table, I64, t) for table in pair] for pair, t in zip(ranges, (t0, t1, t2))]
                _accumulate(ctx, dims, (t0, t1, t2), bounds, weight, acc, acc_plane, x, image_plane, kind, acc_kind)
        if half:
            with loop(builder, plane_out, name="round") as o:
                store(builder, load(builder, acc, acc_kind, o), out, kind, builder.add(plane, o))


def _accumulate(ctx: KernelContext, dims: list[Dim], taps: tuple[ir.Value, ...], bounds: list[list[ir.Value]],
                weight: ir.Value, out: ir.Value, plane: ir.Value, x: ir.Value, image_plane: ir.Value,
                kind: ElemKind, out_kind: ElemKind) -> None:
    """out[plane + o] += weight * x[image_plane + position(o, tap)] over the output box `bounds`
    (x of `kind`, out holding `out_kind`)."""
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
            pointer = element_pointer(builder, out, out_kind, builder.add(out_row, o2))
            value = load(builder, x, kind, builder.add(in_row, position(o2, taps[2], d2)))
            multiply_add(builder, pointer, weight, value)


CONV_RULES: list[tuple[str, Callable[[Any], bool], Callable[[KernelContext, Step], None]]] = [
    ("int8", lambda instr: instr.types[0].elem.is_quantized, emit_int8_conv),
    ("squeeze", squeeze_applies, emit_squeeze),
    ("pointwise", lambda instr: _is_pointwise(instr) and _is_gemm(instr), _conv_gemm),
    ("winograd", winograd_applies, emit_winograd),
    ("im2col", _is_gemm, _conv_gemm),
    ("depthwise", depthwise_applies, emit_depthwise),
    ("direct", lambda instr: True, _conv_direct),
]
"""(name, applies to the instruction, kernel builder), first match wins (see the module doc)."""


def conv_strategy(instr: Any) -> str:
    """The name of the rule a Conv instruction takes."""
    return next(name for name, applies, _ in CONV_RULES if applies(instr))


def _conv(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    next(build for _, applies, build in CONV_RULES if applies(instr))(ctx, step)


def _takes_epilogue(instr: Any) -> bool:
    """Whether the kernel `instr` takes applies stacked element-wise instructions as it stores."""
    return conv_strategy(instr) in ("squeeze", "pointwise", "winograd", "im2col", "depthwise")


register("Conv", COMPUTE_FLOATS | HALF_FLOATS | QUANTIZED, _conv, accepts=int8_accepts, epilogue=_takes_epilogue)
