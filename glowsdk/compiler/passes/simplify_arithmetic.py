"""Algebraic identities that remove a node: x*1, x+0, x-0, x/1, -(-x), Cast to the own kind.

The constant must be exactly a broadcast of 1 or 0 (a Splat, or a Constant whose
elements are all equal; quantized operands never match), and the result must
have x's very type, so broadcasting by the constant is never lost.

Exactness: x*1, x/1, x-0, -(-x) (integer wrap-around included) and a Cast to the
same type are identities. x+0 is one except for the sign of zero: -0.0 + 0.0 is
+0.0, while the rewrite keeps -0.0; every comparison treats the two as equal,
and x + (-0.0) is an exact identity.
"""
from __future__ import annotations

from ...graph.function import Function
from ...graph.node import Node, NodeValue
from ...graph.nodes import elementwise as ew
from .manager import Pass, register_pass
from .rewrite import RuleSet, producer, uniform_value

RULES = RuleSet()


def _keep(node: Node, x: NodeValue, other: NodeValue, neutral: float) -> NodeValue | None:
    """`x` if `other` is uniformly `neutral` and the result has x's type."""
    if uniform_value(other) == neutral and node.type == x.type:
        return x
    return None


@RULES.rule(ew.Mul)
def _times_one(node: Node) -> NodeValue | None:
    # x * 1 -> x, 1 * x -> x
    return _keep(node, node.lhs, node.rhs, 1.0) or _keep(node, node.rhs, node.lhs, 1.0)


@RULES.rule(ew.Add)
def _plus_zero(node: Node) -> NodeValue | None:
    # x + 0 -> x, 0 + x -> x (0 a zero Splat or Constant)
    return _keep(node, node.lhs, node.rhs, 0.0) or _keep(node, node.rhs, node.lhs, 0.0)


@RULES.rule(ew.Sub)
def _minus_zero(node: Node) -> NodeValue | None:
    # x - 0 -> x
    return _keep(node, node.lhs, node.rhs, 0.0)


@RULES.rule(ew.Div)
def _over_one(node: Node) -> NodeValue | None:
    # x / 1 -> x
    return _keep(node, node.lhs, node.rhs, 1.0)


@RULES.rule(ew.Neg)
def _double_negation(node: Node) -> NodeValue | None:
    # -(-x) -> x
    inner = producer(node.input, ew.Neg)
    return inner.input if inner is not None else None


@RULES.rule(ew.Cast)
def _same_kind(node: Node) -> NodeValue | None:
    # Cast(x) to x's own type -> x, unless a saturating float8 cast clamps x's infinities
    clamps = node.saturate and node.to in ew.SATURATING
    return node.input if node.type == node.input.type and not clamps else None


@register_pass
class SimplifyArithmetic(Pass):
    """Remove arithmetic with a neutral constant, double negation and no-op Casts."""

    name = "simplify-arithmetic"

    def run(self, function: Function) -> bool:
        return RULES.apply(function)
