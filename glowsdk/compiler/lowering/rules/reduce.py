"""Lowering rules of the reduce node kinds.

Every reduction lowers onto ReduceSum or ReduceMax with the node's own axes and
keepdims, so a reduction over an empty set of elements gives ReduceSum's 0 (or
ReduceMax's -inf), from which the rules derive the reference's identity: 0 for
ReduceL1/L2/SumSquare, -inf for ReduceLogSum/LogSumExp, NaN for a float mean.

The half kinds accumulate in float32 in the reference (and in the ReduceSum
primitive, which rounds once at the end): where a rule works on the sum before
rounding, it casts its operand to float32 first and rounds once at the end. The
rules are exact (up to the summation order of numpy's own reductions) except
CumSum on floats, whose docstring states its rounding difference. ArgMax, ArgMin,
TopK, ReduceSum, ReduceMax, ReduceMin and ReduceProd are primitives.
"""
from __future__ import annotations

import math

import numpy as np

from ....graph.node import Node, NodeValue
from ....graph.nodes import elementwise as ew
from ....graph.nodes import reduce as rd
from ....graph.nodes import tensor
from ....graph.nodes.core import Splat
from ....graph.types import ElemKind
from ..registry import Lowerer, lowers
from .common import cast_to, compute_elem


def _sum(b: Lowerer, node: Node, x: NodeValue, keepdims: bool | None = None) -> NodeValue:
    """ReduceSum of `x` over the node's axes."""
    return b.add(rd.ReduceSum, x, axes=node.axes,
                 keepdims=node.keepdims if keepdims is None else keepdims)


def _wide_integer(elem: ElemKind) -> ElemKind:
    """The 64-bit integer kind of `elem`'s signedness."""
    return ElemKind.INT64 if elem.dtype.kind == "i" else ElemKind.UINT64


@lowers(rd.ReduceMean)
def _mean(b: Lowerer, node: Node) -> NodeValue:
    """Floats divide the float32 (half kinds) or own-kind sum by the count, as the reference.

    Integers sum in x's kind (wrapping), then the reference divides in float64 and truncates
    toward zero. For kinds of up to 32 bits with a count that fits the kind, float64 holds
    every operand exactly and this is Div's own truncating integer division. Otherwise (a
    64-bit sum beyond 2**53 rounds, a count of 0 makes NaN, or the count does not fit) the
    rule divides in float64 too, and the Cast back truncates as the reference's conversion.
    """
    # mean(x) -> sum(x) / count; integers, otherwise: cast(cast(sum(x), f64) / count, x)
    x, elem = node.input, node.type.elem
    count = math.prod(x.type.shape[axis] for axis in node.axes)
    total = _sum(b, node, cast_to(b, x, compute_elem(x)) if elem.is_float else x)
    if not elem.is_float and not (elem.itemsize <= 4 and 0 < count <= np.iinfo(elem.dtype).max):
        total = cast_to(b, total, ElemKind.FLOAT64)
    return cast_to(b, b.add(ew.Div, total, b.scalar(count, total.type.elem)), elem)


@lowers(rd.ReduceL1)
def _l1(b: Lowerer, node: Node) -> NodeValue:
    """ReduceSum accumulates half kinds in float32 like the reference, so no cast is needed."""
    # reducel1(x) -> reducesum(abs(x))
    return _sum(b, node, b.add(ew.Abs, node.input))


@lowers(rd.ReduceSumSquare)
def _sum_square(b: Lowerer, node: Node) -> NodeValue:
    """Half kinds square in float32 (exact there, and no overflow), as the reference does."""
    # reducesumsquare(x) -> reducesum(x * x)
    x = node.input
    w = cast_to(b, x, compute_elem(x)) if x.type.elem.is_float else x
    return cast_to(b, _sum(b, node, b.add(ew.Mul, w, w)), x.type.elem)


@lowers(rd.ReduceL2)
def _l2(b: Lowerer, node: Node) -> NodeValue:
    """Integers square and sum as 64-bit integers, take the float64 square root and truncate
    toward zero on the Cast back, as the reference does."""
    # reducel2(x) -> sqrt(reducesum(x * x)); integers: cast(sqrt(cast(reducesum(x64 * x64), f64)), x)
    x, elem = node.input, node.input.type.elem
    if elem.is_float:
        w = cast_to(b, x, compute_elem(x))
        return cast_to(b, b.add(ew.Sqrt, _sum(b, node, b.add(ew.Mul, w, w))), elem)
    w = cast_to(b, x, _wide_integer(elem))
    total = cast_to(b, _sum(b, node, b.add(ew.Mul, w, w)), ElemKind.FLOAT64)
    return b.add(ew.Cast, b.add(ew.Sqrt, total), to=elem)


@lowers(rd.ReduceLogSum)
def _log_sum(b: Lowerer, node: Node) -> NodeValue:
    # reducelogsum(x) -> log(reducesum(x))
    x = node.input
    total = _sum(b, node, cast_to(b, x, compute_elem(x)))
    return cast_to(b, b.add(ew.Log, total), x.type.elem)


@lowers(rd.ReduceLogSumExp)
def _log_sum_exp(b: Lowerer, node: Node) -> NodeValue:
    """Shifted by the largest finite element m, so exp cannot overflow, as the reference.

    Infinities and NaN are left out of m (they pass through exp and the sum on their own);
    with no finite element m is -inf and the shift is 0.
    """
    # reducelogsumexp(x) -> log(reducesum(exp(x - s))) + s,
    #   s = where(-inf < m, m, 0), m = reducemax(where(-inf < x < inf, x, -inf))
    x = node.input
    w = cast_to(b, x, compute_elem(x))
    inf = b.scalar(np.inf, w.type.elem)
    minus_inf = b.scalar(-np.inf, w.type.elem)
    finite = b.add(ew.And, b.add(ew.Less, minus_inf, w), b.add(ew.Less, w, inf))
    largest = b.add(rd.ReduceMax, b.add(ew.Where, finite, w, minus_inf), axes=node.axes, keepdims=True)
    shift = b.add(ew.Where, b.add(ew.Less, minus_inf, largest), largest, b.scalar(0, w.type.elem))
    total = _sum(b, node, b.add(ew.Exp, b.add(ew.Sub, w, shift)), keepdims=True)
    result = b.add(ew.Add, b.add(ew.Log, total), shift)
    if not node.keepdims:
        result = b.add(tensor.Reshape, result, shape=node.type.shape)
    return cast_to(b, result, x.type.elem)


# -- CumSum -------------------------------------------------------------------------------------
def _slice(b: Lowerer, x: NodeValue, axis: int, start: int, end: int) -> NodeValue:
    """x[start:end] along `axis`, everything along the other axes."""
    shape = x.type.shape
    starts = tuple(start if i == axis else 0 for i in range(len(shape)))
    ends = tuple(end if i == axis else d for i, d in enumerate(shape))
    return b.add(tensor.Slice, x, starts=starts, ends=ends, steps=(1,) * len(shape))


def _concat(b: Lowerer, axis: int, *parts: NodeValue) -> NodeValue:
    return b.add(tensor.Concat, *parts, axis=axis)


def _inclusive_scan(b: Lowerer, x: NodeValue, axis: int, reverse: bool) -> NodeValue:
    """Running sums along `axis` by ceil(log2 n) doubling steps (Hillis-Steele).

    Step k adds to each element the partial sum k positions before it (after it, reversed);
    the first k elements (last k, reversed) are already complete and are kept as they are,
    so no zero is ever added (which would turn a -0 sum into +0).
    """
    n = x.type.shape[axis]
    k = 1
    while k < n:
        if reverse:
            summed = b.add(ew.Add, _slice(b, x, axis, 0, n - k), _slice(b, x, axis, k, n))
            x = _concat(b, axis, summed, _slice(b, x, axis, n - k, n))
        else:
            summed = b.add(ew.Add, _slice(b, x, axis, k, n), _slice(b, x, axis, 0, n - k))
            x = _concat(b, axis, _slice(b, x, axis, 0, k), summed)
        k *= 2
    return x


@lowers(rd.CumSum)
def _cumsum(b: Lowerer, node: Node) -> NodeValue:
    """A doubling scan of Slice, Concat and Add; exclusive sums shift it by one, filling with 0.

    Exact for integers (wrapping sums do not depend on the order). Floats (half kinds in
    float32, as the reference) add the same terms in a tree order instead of left to
    right: each result differs from the reference by at most about
    2 * ceil(log2 n) * u * sum |x_i| (u: the unit roundoff of the accumulating kind), and
    infinities and NaN propagate to the same elements. A MatMul with a constant triangular
    matrix would turn an infinity into NaN across its whole row (0 * inf = NaN).
    """
    # cumsum(x) -> scan(x); exclusive: concat(0, scan(x)[:-1]); reverse: concat(scan(x)[1:], 0)
    x, axis = node.input, node.axis
    n = x.type.shape[axis]
    if x.type.size == 0:
        return x
    w = cast_to(b, x, compute_elem(x)) if x.type.elem.is_float else x
    total = _inclusive_scan(b, w, axis, node.reverse)
    if node.exclusive:
        zero_shape = tuple(1 if i == axis else d for i, d in enumerate(w.type.shape))
        zeros = b.add(Splat, shape=zero_shape, value=0.0, elem=w.type.elem)
        if node.reverse:
            total = _concat(b, axis, _slice(b, total, axis, 1, n), zeros)
        else:
            total = _concat(b, axis, zeros, _slice(b, total, axis, 0, n - 1))
    return cast_to(b, total, x.type.elem)


@lowers(rd.ReduceMax, rd.ReduceMin)
def _bool_extremum(b: Lowerer, node: Node) -> NodeValue | None:
    """Boolean any/all: the primitive reductions are numeric, so go through uint8 (exact)."""
    # bool ReduceMax(x) -> Cast(ReduceMax(Cast(x, uint8)), bool); integer and float forms stay
    if node.input.type.elem is not ElemKind.BOOL:
        return None
    widened = cast_to(b, node.input, ElemKind.UINT8)
    reduced = b.add(type(node), widened, axes=node.axes, keepdims=node.keepdims)
    return cast_to(b, reduced, ElemKind.BOOL)
