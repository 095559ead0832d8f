"""Reshape chains collapse: a Reshape only states the result shape, so the last one wins."""
from __future__ import annotations

from ...graph.function import Function
from ...graph.node import Node, NodeValue
from ...graph.nodes import tensor
from .manager import Pass, register_pass
from .rewrite import RuleSet, emit, producer

RULES = RuleSet()


@RULES.rule(tensor.Reshape)
def _same_shape(node: Node) -> NodeValue | None:
    # Reshape(x) to x's own shape -> x
    return node.input if node.shape == node.input.type.shape else None


@RULES.rule(tensor.Reshape)
def _merge(node: Node) -> NodeValue | None:
    # Reshape(Reshape(x, s), t) -> Reshape(x, t), or x when t is x's shape
    inner = producer(node.input, tensor.Reshape)
    if inner is None:
        return None
    if node.shape == inner.input.type.shape:
        return inner.input
    return emit(node, tensor.Reshape, inner.input, shape=node.shape)


@register_pass
class MergeReshape(Pass):
    """Reshape of Reshape -> one Reshape; Reshape to the same shape -> removed."""

    name = "merge-reshape"

    def run(self, function: Function) -> bool:
        return RULES.apply(function)
