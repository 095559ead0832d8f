"""Reverse-mode automatic differentiation of a high-level Function (paper 3.2, Figure 2).

`differentiate` appends to the function the nodes computing the gradient of a loss
with respect to chosen Placeholders, visiting the nodes between them in reverse
schedule order and calling each kind's rule from the gradient registry. It runs
before lowering: a Regression node means something else to a gradient than to
inference (paper 3.4).
"""
from __future__ import annotations

from typing import Sequence

from ..errors import GraphError, UnsupportedError
from ..graph.function import Function
from ..graph.node import Node, NodeValue, Placeholder, Storage
from ..graph.nodes import elementwise as ew
from ..graph.nodes.core import Splat
from . import rules  # noqa: F401  (registers the gradient rules)
from .registry import GRADIENTS, GradBuilder, differentiable


def _between(function: Function, sources: Sequence[Placeholder], loss: NodeValue) -> set[int]:
    """Ids of the nodes (and sources) that depend on a source and that the loss depends on."""
    order = function.topo_order()
    depends = {id(p) for p in sources}
    for node in order:
        if any(id(v.node) in depends for v in node.present_inputs()):
            depends.add(id(node))
    needed, stack = set(), [loss.node]
    while stack:
        node = stack.pop()
        if id(node) in needed or id(node) not in depends:
            continue
        needed.add(id(node))
        stack.extend(v.node for v in node.present_inputs())
    return needed


def differentiate(function: Function, loss: NodeValue,
                  wrt: Sequence[Placeholder]) -> dict[str, NodeValue | None]:
    """Add the gradient of `loss` (summed over its elements) with respect to each of `wrt`.

    Returns the gradient value by placeholder name (None where the loss does not depend
    on it). UnsupportedError names a node on the way whose kind has no gradient rule.
    """
    if not differentiable(loss):
        raise GraphError(f"cannot differentiate the non-float loss %{loss.name}: {loss.type}")
    active = _between(function, wrt, loss)
    grads: dict[NodeValue, NodeValue] = {}
    if id(loss.node) in active:
        grads[loss] = function.create(Splat, [], f"{loss.node.name}_grad_seed", shape=loss.type.shape,
                                      value=1.0, elem=loss.type.elem).result()
    for node in reversed(function.topo_order()):
        if id(node) not in active or isinstance(node, Storage):
            continue
        incoming = [grads.get(value) for value in node.results]
        if all(g is None for g in incoming):
            continue
        rule = GRADIENTS.get(node.kind)
        if rule is None:
            raise UnsupportedError(f"node '{node.name}': no gradient rule for {node.kind}")
        wanted = [v is not None and differentiable(v) and id(v.node) in active for v in node.inputs]
        produced = list(rule(node, incoming, GradBuilder(function, node, wanted)))
        if len(produced) != len(node.inputs):
            raise AssertionError(f"the gradient rule of {node.kind} returned {len(produced)} gradients "
                                 f"for {len(node.inputs)} operands")
        for value, grad, want in zip(node.inputs, produced, wanted):
            if want and grad is not None:
                _accumulate(function, node, grads, value, grad)
    return {ph.name: grads.get(ph.result()) for ph in wrt}


def _accumulate(function: Function, node: Node, grads: dict[NodeValue, NodeValue],
                value: NodeValue, grad: NodeValue) -> None:
    """Add `grad` into the gradient of `value` (a value read twice gets the sum)."""
    if grad.type != value.type:
        raise GraphError(f"the gradient rule of {node.kind} gave %{value.name} ({value.type}) "
                         f"a gradient of type {grad.type}")
    previous = grads.get(value)
    grads[value] = grad if previous is None else function.create(
        ew.Add, [previous, grad], f"{value.node.name}_grad_sum").result()
