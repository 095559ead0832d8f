"""Matrix-product node kinds: Gemm, MatMul (numpy semantics) and Einsum."""
from __future__ import annotations

from typing import Sequence

from ..kinds import define_node
from ..node import Node
from ..spec import bool_attr, float_attr, str_attr
from ..types import Type, broadcast_shapes
from .rules import accumulator_type, is_numeric, is_numeric_or_quantized, require_elem, require_same_elem

FAMILY = "linalg"


def _gemm_type(node: Node) -> Type:
    a, b = node.a.type, node.b.type
    if a.rank != 2 or b.rank != 2:
        raise node.fail(f"a and b must be matrices, got {a} and {b}")
    m, k = a.shape[::-1] if node.trans_a else a.shape
    kb, n = b.shape[::-1] if node.trans_b else b.shape
    if k != kb:
        raise node.fail(f"inner dims differ: op(a) is {m}x{k}, op(b) is {kb}x{n}")
    return a.with_shape((m, n))


def _verify_gemm(node: Node) -> None:
    require_elem(node, node.a.type, is_numeric, "a")
    require_same_elem(node, "a", "b", "c")
    if node.c is not None:
        shape = node.type.shape
        try:
            fits = broadcast_shapes(node.c.type.shape, shape) == shape
        except ValueError:
            fits = False
        if not fits:
            raise node.fail(f"c {node.c.type} does not broadcast to the result shape {list(shape)}")


Gemm = define_node(
    "Gemm", "a b c?",
    attrs=[float_attr("alpha", 1.0), float_attr("beta", 1.0), bool_attr("trans_a", False),
           bool_attr("trans_b", False)],
    infer=_gemm_type, verify=_verify_gemm, family=FAMILY,
    doc="""y = alpha * op(a) @ op(b) + beta * c (ONNX Gemm), op transposing when trans_a/trans_b;
    op(a) is M x K, op(b) K x N, and the optional c broadcasts unidirectionally to M x N.""")


def matmul_shape(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """numpy.matmul's result shape; ValueError if the operands do not fit."""
    if not a or not b:
        raise ValueError(f"matmul operands must have rank >= 1, got shapes {list(a)} and {list(b)}")
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    if a2[-1] != b2[-2]:
        raise ValueError(f"inner dims differ: {list(a)} @ {list(b)}")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    return batch + (a2[-2],) * (len(a) > 1) + (b2[-1],) * (len(b) > 1)


def _matmul_type(node: Node) -> Type:
    lhs, rhs = node.lhs.type, node.rhs.type
    if lhs.elem.is_quantized or rhs.elem.is_quantized:
        shape = matmul_shape(lhs.shape, rhs.shape)
        return accumulator_type(node, lhs, rhs, shape, (rhs.rank - 1, len(shape) - 1))
    if not node.lhs.type.same_elem(node.rhs.type):
        raise node.fail(f"operands must share one element kind, got {node.lhs.type} and {node.rhs.type}")
    return node.lhs.type.with_shape(matmul_shape(node.lhs.type.shape, node.rhs.type.shape))


MatMul = define_node(
    "MatMul", "lhs rhs", infer=_matmul_type,
    verify=lambda node: require_elem(node, node.lhs.type, is_numeric_or_quantized, "operands"), family=FAMILY,
    doc="""numpy.matmul: the last two dims multiply as matrices, leading dims broadcast; a 1-D lhs
    gains (and loses) a leading 1, a 1-D rhs a trailing 1. 8-bit quantized operands (int8q/uint8q,
    any scales and offsets) give their exact int32 accumulator: sum (q_l - offset_l) * (q_r - offset_r)
    of scale s_l * s_r and offset 0, wrapping modulo 2^32 as the NPU's array does.""")


def _einsum_term(term: str, shape: Sequence[int]) -> tuple[dict[str, int], tuple[int, ...]]:
    """Label sizes and the dims '...' stands for, in one operand of `shape`."""
    before, dots, after = term.partition("...")
    if not (before + after).isalpha() and before + after:
        raise ValueError(f"einsum term '{term}' has a character that is not a letter")
    if dots:
        if len(before) + len(after) > len(shape):
            raise ValueError(f"einsum term '{term}' has more labels than the operand's rank {len(shape)}")
        middle = tuple(shape[len(before):len(shape) - len(after)])
    elif len(before) != len(shape):
        raise ValueError(f"einsum term '{term}' labels {len(before)} dims of an operand of rank {len(shape)}")
    else:
        middle = ()
    labelled = tuple(shape[:len(before)]) + tuple(shape[len(shape) - len(after):])
    sizes: dict[str, int] = {}
    for label, size in zip(before + after, labelled):
        if sizes.setdefault(label, size) != size:
            raise ValueError(f"einsum label '{label}' is repeated with sizes {sizes[label]} and {size}")
    return sizes, middle


def einsum_shape(equation: str, shapes: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """The result shape of an explicit-form einsum; ValueError naming what does not fit.

    Label sizes of 1 broadcast against other sizes, as in numpy.einsum.
    """
    inputs, arrow, output = equation.partition("->")
    terms = inputs.split(",")
    if not arrow or len(terms) != len(shapes):
        raise ValueError(f"equation '{equation}' must be explicit ('->') with one term per operand "
                         f"({len(shapes)})")
    sizes: dict[str, int] = {}
    ellipsis: tuple[int, ...] = ()
    for term, shape in zip(terms, shapes):
        term_sizes, middle = _einsum_term(term, shape)
        ellipsis = broadcast_shapes(ellipsis, middle)
        for label, size in term_sizes.items():
            known = sizes.get(label, 1)
            if size != known and 1 not in (size, known):
                raise ValueError(f"label '{label}' has size {known} in one operand and {size} in another")
            sizes[label] = size if known == 1 else known
    before, dots, after = output.partition("...")
    labels = before + after
    if len(set(labels)) != len(labels) or any(label not in sizes for label in labels):
        raise ValueError(f"output '{output}' must name distinct labels of the inputs")
    if ellipsis and not dots:
        raise ValueError(f"output '{output}' needs '...' for the broadcast dims {list(ellipsis)}")
    return tuple(sizes[c] for c in before) + (ellipsis if dots else ()) + tuple(sizes[c] for c in after)


def _einsum_type(node: Node) -> Type:
    first = node.inputs[0].type
    for value in node.inputs[1:]:
        if not value.type.same_elem(first):
            raise node.fail(f"operands must share one element kind, got {first} and {value.type}")
    return first.with_shape(einsum_shape(node.equation, [v.type.shape for v in node.inputs]))


Einsum = define_node(
    "Einsum", "operands*", attrs=[str_attr("equation", doc="explicit form 'ij,jk->ik', no spaces")],
    infer=_einsum_type, verify=lambda node: require_elem(node, node.inputs[0].type, is_numeric, "operands"),
    family=FAMILY,
    doc="""Einstein summation (numpy.einsum) with an explicit output: labels missing from the output
    are summed over, a label repeated in one operand takes its diagonal, '...' stands for broadcast
    leading dims.""")
