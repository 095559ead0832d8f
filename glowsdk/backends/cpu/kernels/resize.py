"""Bilinear Resize of the last two dims in one pass: each output row from two input rows.

Lowered, a bilinear upsample is two Gathers, two Muls and an Add per axis, the last
axis's over the whole output (LR-ASPP's 21 x 28 x 28 -> 224 x 224 head: five passes
over a 4 MB result, an eighth of the network's time). Here the backend keeps the node
(CpuBackend.should_lower) and this kernel computes each output row once: the input
row it blends from the two nearest input rows (a vector loop over the input's width,
into the thread's scratch), then each output element from the two nearest samples of
that row, by compile-time tables of indices and weights. The tables are the reference
kernel's own (reference/kernels/resize.py: source_coordinates, clamped_taps), the
rows are resampled first and the columns second, and every tap is a product rounded
to float32 and summed in tap order, as the reference and the lowering compute it,
so the results are the same numbers. float32, mode linear, both of the last two dims
resampled, the others not, no crop box (every other Resize is lowered); threads
share the output rows.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from llvmlite import ir

from ....graph.types import ElemKind
from ....reference.kernels.resize import clamped_taps, is_identity, source_coordinates
from ..codegen.kinds import F32, I32, I64, i64, load, store
from ..codegen.loops import loop, loop_nest
from ..codegen.module import KernelContext, Step
from .table import register

SHARED_ROWS = 16
"""A resize of at least this many output rows shares them among threads."""


def _taps(node: Any, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """The (out, 2) input indices and float32 weights of `axis`, the reference kernel's."""
    in_size = node.input.type.shape[axis]
    coords, _ = source_coordinates(node.coordinate_mode, node.shape[axis], in_size, node.scales[axis], None)
    index, weights = clamped_taps(node, coords, node.scales[axis], in_size)
    return index, weights.astype(np.float32)


def _accepts(node: Any) -> bool:
    """float32 linear resampling of exactly the last two dims, without antialias or a crop box."""
    source = node.input.type
    rank = source.rank
    if source.elem is not ElemKind.FLOAT32 or node.mode != "linear" or node.antialias or rank < 2 \
            or node.coordinate_mode == "tf_crop_and_resize" or math.prod(node.shape) == 0:
        return False
    return all(is_identity(node, axis, source.shape[axis]) for axis in range(rank - 2)) \
        and not any(is_identity(node, axis, source.shape[axis]) for axis in (rank - 2, rank - 1))


def _resize(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    dest, source = instr.operands[0], instr.input
    *lead, in_h, in_w = source.type.shape
    out_h, out_w = instr.shape[-2:]
    rows = math.prod(lead) * out_h
    builder = ctx.builder
    rank = source.type.rank
    (row_index, row_weight), (column_index, column_weight) = _taps(instr, rank - 2), _taps(instr, rank - 1)
    tables = {name: ctx.table(name, I32, values.tolist()) for name, values in
              (("r0", row_index[:, 0]), ("r1", row_index[:, 1]), ("c0", column_index[:, 0]),
               ("c1", column_index[:, 1]))}
    tables.update({name: ctx.table(name, F32, [float(v) for v in values]) for name, values in
                   (("rw0", row_weight[:, 0]), ("rw1", row_weight[:, 1]), ("cw0", column_weight[:, 0]),
                    ("cw1", column_weight[:, 1]))})
    x, y = ctx.address(source), ctx.address(dest)
    blended = ctx.thread_scratch(4 * in_w)
    share = ctx.share(rows) if rows >= SHARED_ROWS else None

    def tap(name: str, at: ir.Value, element: ir.Type) -> ir.Value:
        value = ctx.lookup(tables[name], element, at)
        return builder.sext(value, I64) if element is I32 else value

    with loop_nest(builder, [rows], outer=share) as (row,):
        plane, out_row = builder.udiv(row, i64(out_h)), builder.urem(row, i64(out_h))
        plane_start = builder.mul(plane, i64(in_h * in_w))
        upper = builder.add(plane_start, builder.mul(tap("r0", out_row, I32), i64(in_w)))
        lower = builder.add(plane_start, builder.mul(tap("r1", out_row, I32), i64(in_w)))
        upper_weight, lower_weight = tap("rw0", out_row, F32), tap("rw1", out_row, F32)
        with loop(builder, in_w, name="blend") as i:
            value = builder.fadd(builder.fmul(load(builder, x, ElemKind.FLOAT32, builder.add(upper, i)), upper_weight),
                                 builder.fmul(load(builder, x, ElemKind.FLOAT32, builder.add(lower, i)), lower_weight))
            store(builder, value, blended, ElemKind.FLOAT32, i)
        out_start = builder.mul(row, i64(out_w))
        with loop(builder, out_w, name="column") as j:
            left = builder.fmul(load(builder, blended, ElemKind.FLOAT32, tap("c0", j, I32)), tap("cw0", j, F32))
            right = builder.fmul(load(builder, blended, ElemKind.FLOAT32, tap("c1", j, I32)), tap("cw1", j, F32))
            store(builder, builder.fadd(left, right), y, ElemKind.FLOAT32, builder.add(out_start, j))


register("Resize", frozenset({ElemKind.FLOAT32}), _resize, accepts=_accepts)
