"""LayerNorm and Softmax over trailing dims, each one kernel that walks every row while it is in cache.

Lowered, a LayerNorm is two ReduceSums, a Sub, a Mul and a scale-and-shift over
the whole tensor, and a Softmax a ReduceMax, a Sub+Exp, a ReduceSum and a Div:
each a pass through memory (ConvNeXt's 56 x 56 x 96 LayerNorms, ViT's 197 x 197
attention rows). Here the backend keeps the node (CpuBackend.should_lower) and
this kernel takes one row of the normalised dims at a time, so the tensor is read
from memory once and written once; the passes over a row (sum, centred sum of
squares, result; or max, exp and sum, divide) run in L1. Each pass walks the row
in whole vectors and one masked tail, with its sum or max in a vector folded
once at the end (LLVM unrolled a scalar loop over a 96-element row fully and
left it scalar). The arithmetic is the lowering's, operation for operation (nn.py:
mean = sum / n, var = sum((x - mean)^2) / n, inv_std = 1 / sqrt(var + eps),
y = (x - mean) * inv_std * scale + bias; e = exp(x - max)), so results differ from
it by the order of the sums, and a Softmax by one more rounding: y = e * (1 / sum(e)),
one divide a row (a divide an element bound ViT's attention rows), within 1 ulp of e / sum(e). float32 only (other kinds
are lowered); threads share the rows.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from llvmlite import ir

from ....graph.types import ElemKind
from ..codegen.kinds import F32, I32, i64, splat_constant
from ..codegen.loops import loop, loop_nest
from ..codegen.module import KernelContext, Step
from ..codegen.target import host_vectors
from . import vmath
from .gemm import lane_mask, load_vector, offset, splat, store_vector, vector_type
from .reduce import SHARED_ROWS
from .scalar import SCALARS
from .table import register

F32_ONLY = frozenset({ElemKind.FLOAT32})
Combine = Callable[[ir.Value, ir.Value], ir.Value]


def _trailing(shape: tuple[int, ...], axes: Any) -> bool:
    """Whether `axes` are the last dims of `shape`, each once."""
    return sorted(axes) == list(range(len(shape) - len(tuple(axes)), len(shape)))


def _rows(ctx: KernelContext, rows: int):
    """A loop over this thread's rows (every row when there are too few to share)."""
    share = ctx.share(rows) if rows >= SHARED_ROWS else None
    return loop_nest(ctx.builder, [rows], outer=share)


def _walk(ctx: KernelContext, length: int, body: Callable[[ir.Value, int], None]) -> None:
    """body(first element, count) over a row of `length`: whole vectors in a loop, then the tail."""
    lanes = host_vectors().lanes
    whole, tail = divmod(length, lanes)
    if whole:
        with loop(ctx.builder, whole, name="v") as v:
            body(ctx.builder.mul(v, i64(lanes)), lanes)
    if tail:
        body(i64(whole * lanes), tail)


def _fold(ctx: KernelContext, length: int, identity: float, combine: Combine,
          term: Callable[[ir.Value, int], ir.Value]) -> ir.Value:
    """combine over a row of term(first, count) vectors (lanes past count are `identity`), folded to one
    float: halves combined until one lane is left."""
    builder, lanes = ctx.builder, host_vectors().lanes
    acc = ctx.local(vector_type(lanes))
    builder.store(splat_constant(F32, identity, lanes), acc)

    def add(first: ir.Value, count: int) -> None:
        value = term(first, count)
        if count < lanes:
            value = builder.select(lane_mask(lanes, count), value, splat_constant(F32, identity, lanes))
        builder.store(combine(builder.load(acc, typ=value.type), value), acc)
    _walk(ctx, length, add)
    vector = builder.load(acc, typ=vector_type(lanes))
    while lanes > 1:
        lanes //= 2
        low = builder.shuffle_vector(vector, vector, ir.Constant(ir.VectorType(I32, lanes), list(range(lanes))))
        high = builder.shuffle_vector(vector, vector,
                                      ir.Constant(ir.VectorType(I32, lanes), list(range(lanes, 2 * lanes))))
        vector = combine(low, high)
    return builder.extract_element(vector, ir.Constant(I32, 0))


def _layer_norm_accepts(node: Any) -> bool:
    """float32 throughout, scale and bias one value per normalised element (no broadcast)."""
    length = math.prod(node.input.type.shape[node.axis:])
    operands = [v for v in node.inputs if v is not None]
    return all(v.type.elem is ElemKind.FLOAT32 for v in operands) and node.stats_elem is ElemKind.FLOAT32 \
        and all(v.type.size == length for v in operands[1:])


def _row(ctx: KernelContext, x: ir.Value, y: ir.Value, row: ir.Value,
         length: int) -> tuple[ir.Value, Callable[[ir.Value, int], ir.Value]]:
    """Row `row` of `length` elements: its output pointer, and its input's vector from element `first`
    (`n` lanes in use)."""
    builder, lanes = ctx.builder, host_vectors().lanes
    start = builder.mul(row, i64(length))
    row_x = offset(builder, x, start)

    def at(first: ir.Value, n: int) -> ir.Value:
        return load_vector(ctx, offset(builder, row_x, first), lanes, n)
    return offset(builder, y, start), at


def _layer_norm(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    dest, mean_out, inv_out = instr.operands[:3]
    source, scale, bias = instr.inputs[0], instr.inputs[1], instr.inputs[2]
    shape = source.type.shape
    length, rows = math.prod(shape[instr.axis:]), math.prod(shape[:instr.axis])
    builder, lanes = ctx.builder, host_vectors().lanes
    x, y, gamma = ctx.address(source), ctx.address(dest), ctx.address(scale)
    beta = ctx.address(bias) if bias is not None else None
    means, invs = ctx.address(mean_out), ctx.address(inv_out)
    count = ir.Constant(F32, float(length))

    with _rows(ctx, rows) as (row,):
        row_y, at = _row(ctx, x, y, row, length)
        mean = builder.fdiv(_fold(ctx, length, 0.0, builder.fadd, at), count)
        mean_lanes = splat(builder, mean, lanes)

        def square(first: ir.Value, n: int) -> ir.Value:
            centred = builder.fsub(at(first, n), mean_lanes)
            return builder.fmul(centred, centred)
        var = builder.fdiv(_fold(ctx, length, 0.0, builder.fadd, square), count)
        root = builder.call(ctx.intrinsic("llvm.sqrt", [F32]), [builder.fadd(var, ir.Constant(F32, instr.epsilon))])
        inv = builder.fdiv(ir.Constant(F32, 1.0), root)
        inv_lanes = splat(builder, inv, lanes)

        def result(first: ir.Value, n: int) -> None:
            value = builder.fmul(builder.fmul(builder.fsub(at(first, n), mean_lanes), inv_lanes),
                                 load_vector(ctx, offset(builder, gamma, first), lanes, n))
            if beta is not None:
                value = builder.fadd(value, load_vector(ctx, offset(builder, beta, first), lanes, n))
            store_vector(ctx, value, offset(builder, row_y, first), lanes, n)
        _walk(ctx, length, result)
        builder.store(mean, offset(builder, means, row))
        builder.store(inv, offset(builder, invs, row))


def _softmax_accepts(node: Any) -> bool:
    """float32 over trailing axes (the attention rows; a channel softmax of NCHW is lowered)."""
    return node.input.type.elem is ElemKind.FLOAT32 and _trailing(node.input.type.shape, node.axes)


def _softmax(ctx: KernelContext, step: Step) -> None:
    instr = step.instrs[0]
    dest, source = instr.operands[0], instr.input
    shape = source.type.shape
    length = math.prod(shape[len(shape) - len(instr.axes):])
    rows = math.prod(shape) // length if length else 0
    builder, lanes = ctx.builder, host_vectors().lanes
    x, y = ctx.address(source), ctx.address(dest)

    def maximum(a: ir.Value, b: ir.Value) -> ir.Value:
        return SCALARS["Max"].scalar(ctx, instr, [a, b])  # NaN-propagating, as ReduceMax

    with _rows(ctx, rows) as (row,):
        row_y, at = _row(ctx, x, y, row, length)
        shift = splat(builder, _fold(ctx, length, float("-inf"), maximum, at), lanes)

        def exp(first: ir.Value, n: int) -> ir.Value:
            e = vmath.exp(ctx, builder.fsub(at(first, n), shift))
            store_vector(ctx, e, offset(builder, row_y, first), lanes, n)
            return e
        reciprocal = splat(builder, builder.fdiv(ir.Constant(F32, 1.0), _fold(ctx, length, 0.0, builder.fadd, exp)),
                           lanes)

        def scale(first: ir.Value, n: int) -> None:
            where = offset(builder, row_y, first)
            store_vector(ctx, builder.fmul(load_vector(ctx, where, lanes, n), reciprocal), where, lanes, n)
        _walk(ctx, length, scale)


register("LayerNorm", F32_ONLY, _layer_norm, accepts=_layer_norm_accepts)
register("Softmax", F32_ONLY, _softmax, accepts=_softmax_accepts)
