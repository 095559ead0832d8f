"""Lowering rules of the linalg node kinds: everything becomes the canonical MatMul primitive
(equal rank >= 2, equal batch dims) plus data movement, elementwise ops and ReduceSum."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ....graph.node import NodeValue
from ....graph.nodes import elementwise as ew, linalg, reduce as rd, tensor
from ....graph.types import ElemKind, broadcast_shapes
from ..registry import Lowerer, lowers
from .common import cast_to, compute_elem

HALF = (ElemKind.FLOAT16, ElemKind.BFLOAT16)


def _reshape(b: Lowerer, x: NodeValue, shape: Sequence[int]) -> NodeValue:
    shape = tuple(shape)
    return x if x.type.shape == shape else b.add(tensor.Reshape, x, shape=shape)


def _transpose(b: Lowerer, x: NodeValue, perm: Sequence[int]) -> NodeValue:
    perm = tuple(perm)
    return x if perm == tuple(range(len(perm))) else b.add(tensor.Transpose, x, perm=perm)


def _expand(b: Lowerer, x: NodeValue, shape: Sequence[int]) -> NodeValue:
    shape = tuple(shape)
    return x if x.type.shape == shape else b.add(tensor.Expand, x, shape=shape)


# -- Gemm ---------------------------------------------------------------------------------------
def _gemm_elem(node: linalg.Gemm) -> ElemKind:
    """The kind alpha and beta * c are applied in, as the reference kernel does.

    Floats: the product's own kind, but float32 for half precision when alpha or c is applied
    (the kernel rounds once, after them). Integers: their own kind when alpha = beta = 1; else
    float64 (the kernel scales the integer product in float64 and truncates the result).
    """
    elem = node.type.elem
    scaled = node.alpha != 1.0
    biased = node.c is not None and node.beta != 0.0
    if elem.is_float:
        return ElemKind.FLOAT32 if elem in HALF and (scaled or biased) else elem
    return ElemKind.FLOAT64 if scaled or (biased and node.beta != 1.0) else elem


@lowers(linalg.Gemm)
def _gemm(b: Lowerer, node: linalg.Gemm) -> NodeValue:
    # Gemm(a, b, c) -> MatMul(Transpose?(a), Transpose?(b)) * alpha + c * beta
    elem = node.type.elem
    work = _gemm_elem(node)
    product_elem = work if elem.is_float else elem
    a = cast_to(b, node.a, product_elem)
    w = cast_to(b, node.b, product_elem)
    a = _transpose(b, a, (1, 0) if node.trans_a else (0, 1))
    w = _transpose(b, w, (1, 0) if node.trans_b else (0, 1))
    y = cast_to(b, b.add(linalg.MatMul, a, w), work)
    if node.alpha != 1.0:
        y = b.add(ew.Mul, y, b.scalar(node.alpha, work))
    if node.c is not None and node.beta != 0.0:
        c = cast_to(b, node.c, work)
        if node.beta != 1.0:
            c = b.add(ew.Mul, c, b.scalar(node.beta, work))
        y = b.add(ew.Add, y, c)
    return cast_to(b, y, elem)


# -- MatMul -------------------------------------------------------------------------------------
@lowers(linalg.MatMul)
def _matmul(b: Lowerer, node: linalg.MatMul) -> NodeValue | None:
    # MatMul(1-D or broadcasting operands) -> Reshape/Expand, canonical MatMul, Reshape
    """A 1-D lhs becomes 1 x K and a 1-D rhs K x 1. When the rhs has no batch dims (all 1), the
    lhs batch dims fold into its rows, one 2-D product with no copies; otherwise both operands
    are expanded to the broadcast batch dims.
    """
    lhs, rhs = node.lhs, node.rhs
    a, c = lhs.type.shape, rhs.type.shape
    if len(a) == len(c) >= 2 and a[:-2] == c[:-2]:
        return None
    a = (1,) + a if len(a) == 1 else a
    c = c + (1,) if len(c) == 1 else c
    if int(np.prod(c[:-2])) == 1:
        rows = int(np.prod(a[:-1]))
        product = b.add(linalg.MatMul, _reshape(b, lhs, (rows, a[-1])), _reshape(b, rhs, c[-2:]))
        return _reshape(b, product, node.type.shape)
    batch = broadcast_shapes(a[:-2], c[:-2])
    lhs = _expand(b, _reshape(b, lhs, (1,) * (len(batch) + 2 - len(a)) + a), batch + a[-2:])
    rhs = _expand(b, _reshape(b, rhs, (1,) * (len(batch) + 2 - len(c)) + c), batch + c[-2:])
    return _reshape(b, b.add(linalg.MatMul, lhs, rhs), node.type.shape)


# -- Einsum -------------------------------------------------------------------------------------
class _Term:
    """One operand of an einsum during lowering: its value and one label per dim."""

    def __init__(self, value: NodeValue, labels: list[str]) -> None:
        self.value = value
        self.labels = labels


def _labels(term: str, rank: int, dots_rank: int) -> list[str]:
    """The label of each dim; the dims '...' stands for get labels '.0'.. aligned from the right."""
    before, dots, after = term.partition("...")
    middle = rank - len(before) - len(after) if dots else 0
    return list(before) + [f".{dots_rank - middle + j}" for j in range(middle)] + list(after)


def _diagonals(b: Lowerer, term: _Term) -> None:
    """Replace each pair of dims sharing a label by their diagonal.

    The pair moves to the end and flattens to n*n elements, of which every (n+1)-th, from 0,
    is on the diagonal: one strided Slice.
    """
    while len(set(term.labels)) != len(term.labels):
        label = next(name for name in term.labels if term.labels.count(name) > 1)
        first = term.labels.index(label)
        second = term.labels.index(label, first + 1)
        others = [i for i in range(len(term.labels)) if i not in (first, second)]
        shape = term.value.type.shape
        n = shape[first]
        moved = _transpose(b, term.value, others + [first, second])
        flat = _reshape(b, moved, [shape[i] for i in others] + [n * n])
        dims = flat.type.shape
        term.value = b.add(tensor.Slice, flat, starts=(0,) * len(dims), ends=dims,
                           steps=(1,) * (len(dims) - 1) + (n + 1,))
        term.labels = [term.labels[i] for i in others] + [label]


def _drop_broadcast_dims(b: Lowerer, term: _Term, sizes: dict[str, int]) -> None:
    """Drop dims of size 1 whose label is larger elsewhere: the operand is constant along it."""
    keep = [i for i, label in enumerate(term.labels)
            if term.value.type.shape[i] == sizes[label]]
    if len(keep) != len(term.labels):
        term.value = _reshape(b, term.value, [term.value.type.shape[i] for i in keep])
        term.labels = [term.labels[i] for i in keep]


def _sum_out(b: Lowerer, term: _Term, needed: set[str]) -> None:
    """Sum over the dims whose labels nothing later needs."""
    axes = tuple(i for i, label in enumerate(term.labels) if label not in needed)
    if axes:
        term.value = b.add(rd.ReduceSum, term.value, axes=axes, keepdims=False)
        term.labels = [label for label in term.labels if label in needed]


def _contract(b: Lowerer, left: _Term, right: _Term, kept: set[str]) -> _Term:
    """left x right as one canonical MatMul: batch labels (shared, kept) x rows (left only) x
    contracted labels (shared, not kept) times batch x contracted x columns (right only)."""
    _sum_out(b, left, kept | set(right.labels))
    _sum_out(b, right, kept | set(left.labels))
    shared = [label for label in left.labels if label in right.labels]
    batch = [label for label in shared if label in kept]
    inner = [label for label in shared if label not in kept]
    rows = [label for label in left.labels if label not in right.labels]
    columns = [label for label in right.labels if label not in left.labels]
    size = {label: dim for term in (left, right) for label, dim in zip(term.labels, term.value.type.shape)}

    def matrix(term: _Term, first: list[str], second: list[str]) -> NodeValue:
        order = [term.labels.index(label) for label in batch + first + second]
        moved = _transpose(b, term.value, order)
        dims = [int(np.prod([size[label] for label in group], dtype=np.int64)) for group in (first, second)]
        lead = [int(np.prod([size[label] for label in batch], dtype=np.int64))] if batch else []
        return _reshape(b, moved, lead + dims)

    product = b.add(linalg.MatMul, matrix(left, rows, inner), matrix(right, inner, columns))
    labels = batch + rows + columns
    return _Term(_reshape(b, product, [size[label] for label in labels]), labels)


@lowers(linalg.Einsum)
def _einsum(b: Lowerer, node: linalg.Einsum) -> NodeValue:
    # Einsum -> per operand: diagonal Slices, ReduceSum; pairwise canonical MatMuls; Transpose
    """Operands contract left to right. Half-precision operands are computed in float32 and the
    result rounded once, as the reference kernel does; float32 results differ from it only by
    summation order.
    """
    inputs, _, output = node.equation.partition("->")
    elem = node.type.elem
    work = compute_elem(*node.inputs) if elem in HALF else elem
    terms_text = inputs.split(",")
    dots_rank = max((v.type.rank - len(t.replace("...", "")) for t, v in zip(terms_text, node.inputs)
                     if "..." in t), default=0)
    terms = [_Term(cast_to(b, v, work), _labels(t, v.type.rank, dots_rank))
             for t, v in zip(terms_text, node.inputs)]
    out_labels = _labels(output, dots_rank + len(output.replace("...", "")), dots_rank)
    sizes: dict[str, int] = {}
    for term in terms:
        for label, dim in zip(term.labels, term.value.type.shape):
            sizes[label] = max(sizes.get(label, 1), dim)
    for term in terms:
        _diagonals(b, term)
        _drop_broadcast_dims(b, term, sizes)
    result = terms[0]
    for i in range(1, len(terms)):
        later = {label for term in terms[i + 1:] for label in term.labels}
        result = _contract(b, result, terms[i], set(out_labels) | later)
    _sum_out(b, result, set(out_labels))
    value = _transpose(b, result.value, [result.labels.index(label) for label in out_labels])
    return cast_to(b, value, elem)
