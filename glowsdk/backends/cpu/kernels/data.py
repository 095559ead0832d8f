"""Data-movement kernels: copies, views that need copying, joins, broadcasts, gathers.

Nothing here computes on element values, so every kernel moves elements as
integers of their byte width and handles every element kind. Transpose, Slice,
Expand and Concat are one specialised strided copy each: the source index is a
constant base plus constant strides times the result indices (negative for a
reversed slice, zero for a broadcast dim), with dims merged where both sides
are contiguous, so a plain copy becomes one vectorisable loop. A copy of at least
SHARED_ELEMENTS elements is shared among threads by its outermost merged loop (a
Concat decides for all its parts at once, so no part is copied by every thread).
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from llvmlite import ir

from ....graph.types import ElemKind
from ..codegen.kinds import I1, I64, PTR, i64, value_type
from ..codegen.loops import linear_index, loop, loop_nest, merge_dims, row_major_strides
from ..codegen.module import KernelContext, Step
from .elementwise import SHARED_ELEMENTS, broadcast_strides
from .table import register

ANY = frozenset(ElemKind)
INDEX_KINDS = frozenset({ElemKind.INT32, ElemKind.INT64})


def strided_copy(ctx: KernelContext, dest: ir.Value, source: ir.Value, kind: ElemKind,
                 shape: Sequence[int], dest_strides: Sequence[int], source_strides: Sequence[int],
                 dest_base: int = 0, source_base: int = 0, shared: bool | None = None) -> None:
    """dest[dest_base + i . dest_strides] = source[source_base + i . source_strides] for i over `shape`;
    threads share the outermost loop when `shared` (by default: when the copy is large)."""
    if math.prod(shape) == 0:
        return
    element = ir.IntType(8 * kind.dtype.itemsize)
    builder = ctx.builder
    dims, (to, frm) = merge_dims(shape, [dest_strides, source_strides])
    if shared is None:
        shared = math.prod(shape) >= SHARED_ELEMENTS
    with loop_nest(builder, dims, outer=ctx.share(dims[0]) if shared and dims else None) as indices:
        at = builder.gep(source, [linear_index(builder, indices, frm, source_base)], inbounds=True,
                         source_etype=element)
        value = builder.load(at, typ=element)
        builder.store(value, builder.gep(dest, [linear_index(builder, indices, to, dest_base)],
                                         inbounds=True, source_etype=element))


def _copy_bytes(ctx: KernelContext, step: Step) -> None:
    """Copy and Reshape: the destination gets the source's bytes (memmove: they may coincide)."""
    instr = step.instrs[0]
    dest, source = instr.operands[0], instr.inputs[0]
    nbytes = dest.type.nbytes
    if nbytes:
        memmove = ctx.intrinsic("llvm.memmove", [PTR, PTR, I64])
        ctx.builder.call(memmove, [ctx.address(dest), ctx.address(source), i64(nbytes), ir.Constant(I1, 0)])


def _transpose(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    dest, source = instr.operands[0], instr.input
    strides = row_major_strides(source.type.shape)
    strided_copy(ctx, ctx.address(dest), ctx.address(source), dest.type.elem, dest.type.shape,
                 row_major_strides(dest.type.shape), [strides[p] for p in instr.perm])


def _slice(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    dest, source = instr.operands[0], instr.input
    strides = row_major_strides(source.type.shape)
    base = sum(start * stride for start, stride in zip(instr.starts, strides))
    strided_copy(ctx, ctx.address(dest), ctx.address(source), dest.type.elem, dest.type.shape,
                 row_major_strides(dest.type.shape), [step * s for step, s in zip(instr.steps, strides)],
                 source_base=base)


def _expand(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    dest, source = instr.operands[0], instr.input
    strided_copy(ctx, ctx.address(dest), ctx.address(source), dest.type.elem, dest.type.shape,
                 row_major_strides(dest.type.shape), broadcast_strides(source.type.shape, dest.type.shape))


def _concat(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    dest = instr.operands[0]
    strides = row_major_strides(dest.type.shape)
    shared = dest.type.size >= SHARED_ELEMENTS
    at = 0
    for part in instr.parts:
        strided_copy(ctx, ctx.address(dest), ctx.address(part), dest.type.elem, part.type.shape, strides,
                     row_major_strides(part.type.shape), dest_base=at * strides[instr.axis], shared=shared)
        at += part.type.shape[instr.axis]


def _splat(ctx: KernelContext, step: Step) -> None:
    """Every element the value as numpy converts it to the kind (np.full), stored by its bits."""
    instr = step.instrs[0]
    dest = instr.operands[0]
    stored = np.full((), instr.value, dtype=dest.type.dtype)
    element = ir.IntType(8 * stored.itemsize)
    constant = ir.Constant(element, int(stored.view(f"u{stored.itemsize}")))
    builder, pointer = ctx.builder, ctx.address(dest)
    with loop(builder, dest.type.size) as index:
        builder.store(constant, builder.gep(pointer, [index], inbounds=True, source_etype=element))


def _gather(ctx: KernelContext, step: Step) -> None:
    """result[a, j, b] = data[a, indices[j], b]; an index outside [-dim, dim) fails the run.
    Every index is checked first, then the result is written in memory order (a, then j): with
    the j loop outside, a Gather along the last axis (a bilinear Resize's, inner 1) wrote one
    element per row of the result per pass, 3 ns an element on lraspp's 21 x 224 x 224 upsampling."""
    instr = step.instrs[0]
    dest, data, indices = instr.operands[0], instr.data, instr.indices
    shape, axis = data.type.shape, instr.axis
    outer, dim, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    count = indices.type.size
    builder = ctx.builder
    index_type = value_type(indices.type.elem)
    index_pointer, source, target = ctx.address(indices), ctx.address(data), ctx.address(dest)

    def wrapped_index(j: ir.Value) -> ir.Value:
        raw = builder.load(builder.gep(index_pointer, [j], inbounds=True, source_etype=index_type), typ=index_type)
        wide = builder.sext(raw, I64) if index_type.width < 64 else raw
        return builder.select(builder.icmp_signed("<", wide, i64(0)), builder.add(wide, i64(dim)), wide)

    with loop(builder, count, name="check") as j:
        ctx.fail_unless(builder.icmp_unsigned("<", wrapped_index(j), i64(dim)))
    with loop(builder, outer, name="a") as a, loop(builder, count, name="j") as j:
        source_base = builder.mul(builder.add(builder.mul(a, i64(dim)), wrapped_index(j)), i64(inner))
        dest_base = builder.mul(builder.add(builder.mul(a, i64(count)), j), i64(inner))
        _copy_run(ctx, target, dest_base, source, source_base, data.type.elem, inner)


def _copy_run(ctx: KernelContext, dest: ir.Value, dest_base: ir.Value, source: ir.Value,
              source_base: ir.Value, kind: ElemKind, count: int) -> None:
    element = ir.IntType(8 * kind.dtype.itemsize)
    builder = ctx.builder
    with loop(builder, count, name="b") as b:
        value = builder.load(builder.gep(source, [builder.add(source_base, b)], inbounds=True,
                                         source_etype=element), typ=element)
        builder.store(value, builder.gep(dest, [builder.add(dest_base, b)], inbounds=True, source_etype=element))


def _indexed_by_ints(node: Any) -> bool:
    return node.indices.type.elem in INDEX_KINDS


for _kind, _build in {"Copy": _copy_bytes, "Reshape": _copy_bytes, "Transpose": _transpose,
                      "Slice": _slice, "Expand": _expand, "Concat": _concat}.items():
    register(_kind, ANY, _build)
register("Splat", ANY, _splat)
register("Gather", ANY, _gather, accepts=_indexed_by_ints)
