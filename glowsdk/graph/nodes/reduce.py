"""Reduction node kinds: reductions over a set of axes, arg-reductions, TopK and CumSum.

The reductions are declared once by a factory and share one type rule: `axes`
is static, sorted, duplicate-free and non-negative, `keepdims` keeps reduced
axes as size 1. An empty `axes` reduces over no axis (the per-element map of
the reduction still applies: ReduceL2 over no axis is |x|). Reducing over an
empty set of elements yields the reduction's identity element.
"""
from __future__ import annotations

from typing import Callable

from ..kinds import define_node
from ..node import Node
from ..spec import bool_attr, int_attr, ints_attr
from ..types import ElemKind, Type
from .rules import is_float, is_numeric, normalise_axis, require_elem

FAMILY = "reduce"


def _numeric_or_bool(kind: ElemKind) -> bool:
    """a numeric kind or bool"""
    return is_numeric(kind) or kind is ElemKind.BOOL


def _reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce_type(node: Node) -> Type:
    source = node.input.type
    axes = node.axes
    if list(axes) != sorted(set(axes)):
        raise node.fail(f"axes {list(axes)} must be sorted and distinct")
    for axis in axes:
        if not 0 <= axis < source.rank:
            raise node.fail(f"axis {axis} is out of range for rank {source.rank}")
    return source.with_shape(_reduced_shape(source.shape, axes, node.keepdims))


def reduction(name: str, allowed: Callable[[ElemKind], bool], doc: str) -> type[Node]:
    """y = reduce(f(x)) over `axes`, then g(y); same element kind as x."""

    def verify(node: Node) -> None:
        require_elem(node, node.input.type, allowed, "input")

    return define_node(name, "input", attrs=[ints_attr("axes"), bool_attr("keepdims", True)],
                       infer=_reduce_type, verify=verify, family=FAMILY, doc=doc)


ReduceSum = reduction("ReduceSum", is_numeric, "Sum; integers wrap; empty set gives 0.")
ReduceMean = reduction(
    "ReduceMean", is_numeric,
    "Arithmetic mean: the sum (in x's kind for integers) divided by the element count; "
    "integer means truncate toward zero.")
ReduceProd = reduction("ReduceProd", is_numeric, "Product; empty set gives 1.")
ReduceMax = reduction(
    "ReduceMax", _numeric_or_bool,
    "Maximum (any for bool); NaN propagates; empty set gives -inf, the lowest integer or false.")
ReduceMin = reduction(
    "ReduceMin", _numeric_or_bool,
    "Minimum (all for bool); NaN propagates; empty set gives +inf, the highest integer or true.")
ReduceL1 = reduction("ReduceL1", is_numeric, "Sum of |x|; empty set gives 0.")
ReduceL2 = reduction("ReduceL2", is_numeric,
                     "sqrt(sum(x * x)); integer results truncate toward zero; empty set gives 0.")
ReduceSumSquare = reduction("ReduceSumSquare", is_numeric, "Sum of x * x; empty set gives 0.")
ReduceLogSum = reduction("ReduceLogSum", is_float, "log(sum(x)); empty set gives -inf.")
ReduceLogSumExp = reduction(
    "ReduceLogSumExp", is_float,
    "log(sum(exp(x))), computed shifted by the largest finite element; empty set gives -inf.")


def _arg_type(node: Node) -> Type:
    source = node.input.type
    axis = normalise_axis(node, node.axis, source.rank)
    if axis != node.axis:
        raise node.fail(f"axis {node.axis} must be normalised to [0, {source.rank})")
    if source.shape[axis] == 0:
        raise node.fail(f"cannot take an arg-reduction over the empty axis {axis}")
    return Type(ElemKind.INT64, _reduced_shape(source.shape, (axis,), node.keepdims))


def arg_reduction(name: str, doc: str) -> type[Node]:
    """int64 index of the extreme element along `axis`."""

    def verify(node: Node) -> None:
        require_elem(node, node.input.type, is_numeric, "input")

    return define_node(name, "input",
                       attrs=[int_attr("axis"), bool_attr("keepdims", True),
                              bool_attr("select_last_index", False)],
                       infer=_arg_type, verify=verify, family=FAMILY, doc=doc)


ArgMax = arg_reduction("ArgMax", "Index (int64) of the largest element along `axis`; ties go to the "
                                 "first index, or the last if select_last_index.")
ArgMin = arg_reduction("ArgMin", "Index (int64) of the smallest element along `axis`; ties go to the "
                                 "first index, or the last if select_last_index.")


def _topk_types(node: Node) -> list[Type]:
    source = node.input.type
    axis = normalise_axis(node, node.axis, source.rank)
    if axis != node.axis:
        raise node.fail(f"axis {node.axis} must be normalised to [0, {source.rank})")
    if not 0 <= node.k <= source.shape[axis]:
        raise node.fail(f"k = {node.k} is outside [0, {source.shape[axis]}] (the size of axis {axis})")
    shape = tuple(node.k if i == axis else d for i, d in enumerate(source.shape))
    return [source.with_shape(shape), Type(ElemKind.INT64, shape)]


TopK = define_node(
    "TopK", "input", results="values indices",
    attrs=[int_attr("k"), int_attr("axis"), bool_attr("largest", True)],
    infer=_topk_types, family=FAMILY,
    verify=lambda node: require_elem(node, node.input.type, is_numeric, "input"),
    doc="The k largest (or smallest) elements along `axis` and their int64 indices, always sorted "
        "(descending if largest, else ascending); equal elements keep index order, lower index first.")


def _cumsum_type(node: Node) -> Type:
    source = node.input.type
    require_elem(node, source, is_numeric, "input")
    if normalise_axis(node, node.axis, source.rank) != node.axis:
        raise node.fail(f"axis {node.axis} must be normalised to [0, {source.rank})")
    return source


CumSum = define_node(
    "CumSum", "input", attrs=[int_attr("axis"), bool_attr("exclusive", False), bool_attr("reverse", False)],
    infer=_cumsum_type, family=FAMILY,
    doc="Running sum along `axis` in x's kind (integers wrap). exclusive: element i sums the elements "
        "before i (the first is 0); reverse: sums run from the end of the axis.")
