"""Canonical forms of Concat: no single-part Concats, no Concat of Concats on one axis.

An inner Concat that others read too stays (flattening would copy its parts
twice instead of once, and keep a memory planner from building it in place).

ONNX Sum arrives as a chain of binary Adds already, so there is nothing to
canonicalise there; an Add of a zero Splat is removed by simplify-arithmetic's
x + 0 rule (one rule, one place).
"""
from __future__ import annotations

from ...graph.function import Function
from ...graph.node import Node, NodeValue
from ...graph.nodes import tensor
from .manager import Pass, register_pass
from .rewrite import RuleSet, emit, only_reader, producer

RULES = RuleSet()


@RULES.rule(tensor.Concat)
def _single_part(node: Node) -> NodeValue | None:
    # Concat(x) -> x
    return node.inputs[0] if len(node.inputs) == 1 else None


@RULES.rule(tensor.Concat)
def _flatten(node: Node) -> NodeValue | None:
    # Concat(a, Concat(b, c), d) on one axis -> Concat(a, b, c, d), when the inner one has no other reader
    parts: list[NodeValue] = []
    flattened = False
    for value in node.inputs:
        inner = producer(value, tensor.Concat)
        if inner is not None and inner.axis == node.axis and only_reader(value, node):
            parts.extend(inner.inputs)
            flattened = True
        else:
            parts.append(value)
    if not flattened:
        return None
    return emit(node, tensor.Concat, *parts, axis=node.axis)


@register_pass
class Canonicalize(Pass):
    """Concat with one part -> that part; Concat of same-axis Concats -> one Concat."""

    name = "canonicalize"

    def run(self, function: Function) -> bool:
        return RULES.apply(function)
