"""Transpose sinking and merging (Glow's sinkCode for Transpose).

Element-wise ops commute with a permutation of the axes, so a Transpose can move
below them; moving Transposes down brings pairs together, where they merge or
cancel. An element-wise op with several operands sinks the Transposes only when
every operand is one with the same perm (same rank, so broadcasting commutes
with the permutation too). A Transpose moves only when the op is its only
reader; otherwise moving would add a Transpose instead of moving one.
"""
from __future__ import annotations

from ...graph.function import Function
from ...graph.node import Node, NodeValue
from ...graph.nodes import tensor
from ...graph.spec import NODE_KINDS
from .manager import Pass, register_pass
from .rewrite import RuleSet, emit, only_reader, producer

RULES = RuleSet()

ELEMENTWISE = [kind for kind in NODE_KINDS.values() if kind.spec.family == "elementwise"]


def _compose(inner: tuple[int, ...], outer: tuple[int, ...]) -> tuple[int, ...]:
    """The perm of Transpose(Transpose(x, inner), outer): result dim i is x dim inner[outer[i]]."""
    return tuple(inner[p] for p in outer)


@RULES.rule(tensor.Transpose)
def _identity(node: Node) -> NodeValue | None:
    # Transpose(x, identity) -> x
    return node.input if node.perm == tuple(range(len(node.perm))) else None


@RULES.rule(tensor.Transpose)
def _merge(node: Node) -> NodeValue | None:
    # Transpose(Transpose(x, p), q) -> Transpose(x, p.q), or x when p.q is the identity
    inner = producer(node.input, tensor.Transpose)
    if inner is None:
        return None
    perm = _compose(inner.perm, node.perm)
    if perm == tuple(range(len(perm))):
        return inner.input
    return emit(node, tensor.Transpose, inner.input, perm=perm)


@RULES.rule(*ELEMENTWISE)
def _sink(node: Node) -> NodeValue | None:
    # f(Transpose(x, p), Transpose(y, p), ..) -> Transpose(f(x, y, ..), p)
    operands = [producer(v, tensor.Transpose) for v in node.inputs]
    if any(t is None or not only_reader(v, node) for t, v in zip(operands, node.inputs)):
        return None
    perms = {t.perm for t in operands}
    if len(perms) != 1:
        return None
    moved = emit(node, type(node), *(t.input for t in operands), **node.attrs)
    return emit(node, tensor.Transpose, moved, perm=perms.pop())


@register_pass
class SinkTranspose(Pass):
    """Transposes below element-wise ops; consecutive Transposes merged; identity ones removed."""

    name = "sink-transpose"

    def run(self, function: Function) -> bool:
        return RULES.apply(function)
