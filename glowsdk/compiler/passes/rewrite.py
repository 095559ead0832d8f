"""Rewrites as rules (tinygrad's PatternMatcher; the rule half of Glow's GraphOptimizer).

A rule looks at one node and returns the value(s) that replace its results, one
per result, or None to leave the node alone. A `RuleSet` holds rules by node kind
and sweeps a function once in schedule order: each node is offered to its kind's
rules in order until one fires; the replaced node, and every producer only it
kept alive, is then erased. New nodes go just before the node they replace, so
the schedule stays valid, and later nodes see the rewritten operands in the same
sweep (a chain collapses in one sweep). Pipelines run rule passes in "fixpoint"
mode to catch what one sweep exposes.

The matching helpers below are what rules share: who produced a value, whether a
value is a uniform constant, whether a node is a value's only reader.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ...graph.function import Function
from ...graph.node import Constant, Node, NodeValue, Storage
from ...graph.nodes.core import Save, Splat

Produced = NodeValue | Sequence[NodeValue | None] | None
Rule = Callable[[Node], Produced]


class RuleSet:
    """Rules by node kind, applied by one sweep over a function."""

    def __init__(self) -> None:
        self.by_kind: dict[str, list[Rule]] = {}

    def rule(self, *kinds: type[Node]) -> Callable[[Rule], Rule]:
        """Decorator: offer each node of `kinds` to the rule."""

        def register(fn: Rule) -> Rule:
            for kind in kinds:
                self.by_kind.setdefault(kind.spec.name, []).append(fn)
            return fn

        return register

    def apply(self, function: Function) -> bool:
        """One sweep in schedule order; returns whether any rule fired."""
        changed = False
        for node in list(function.nodes):  # only producers (already visited) are ever erased
            for rule in self.by_kind.get(node.kind, ()):
                with function.inserting_before(node):
                    produced = rule(node)
                if produced is not None:
                    replace(function, node, produced)
                    changed = True
                    break
        return changed


def replace(function: Function, node: Node, produced: Produced) -> None:
    """Make the users of `node`'s results use `produced`; erase `node` and what only it used."""
    values = [produced] if isinstance(produced, NodeValue) else list(produced)
    if len(values) != len(node.types):
        raise AssertionError(f"a rewrite of {node.kind} gave {len(values)} values for {len(node.types)} results")
    for old, new in zip(node.results, values):
        if new is not None and new != old:
            function.replace_all_uses(old, new)
    if node.users:
        raise AssertionError(f"a rewrite of '{node.name}' ({node.kind}) left a used result without replacement")
    erase_with_dead_producers(function, node)


def erase_with_dead_producers(function: Function, node: Node) -> None:
    """Erase `node` (unused) and, transitively, the producers nobody else uses."""
    stack = [node]
    while stack:
        dead = stack.pop()
        if dead.users or dead.function is not function or isinstance(dead, Save):
            continue
        producers = [v.node for v in dead.present_inputs() if not isinstance(v.node, Storage)]
        function.erase(dead)
        stack.extend(producers)


def emit(node: Node, kind: type[Node], *inputs: NodeValue | None, **attrs: Any) -> NodeValue:
    """A new single-result node named after `node` (the one it replaces) and coming from the same model
    node (a BatchNorm folded into a Conv leaves the Conv's ONNX node), placed at the insertion point
    (just before the node the rule fired on)."""
    assert node.function is not None
    with node.function.from_origin(node.origin):
        return node.function.add(kind, *inputs, name=node.name, **attrs)


def emit_constant(node: Node, array: np.ndarray, hint: str) -> NodeValue:
    """A new Constant named after `node`, for tensors a rule computes at compile time."""
    assert node.function is not None
    module = node.function.module
    return module.create_constant(f"{node.name}/{hint}", np.require(array, requirements="C")).result()


def producer(value: NodeValue | None, kind: type[Node]) -> Node | None:
    """The node of `kind` that produced `value`, or None."""
    if value is not None and isinstance(value.node, kind):
        return value.node
    return None


def constant_array(value: NodeValue | None) -> np.ndarray | None:
    """The array of a Constant operand, or None if the operand is not a Constant."""
    if value is not None and isinstance(value.node, Constant):
        return value.node.value
    return None


def uniform_value(value: NodeValue | None) -> float | None:
    """The one value every element of a Splat or a non-empty Constant equals, else None.

    Quantized values return None: their stored integers are not the real values.
    """
    if value is None or value.type.elem.is_quantized:
        return None
    if isinstance(value.node, Splat):
        return value.node.value
    array = constant_array(value)
    if array is None or array.size == 0:
        return None
    first = array.flat[0]
    if not np.all(array == first):
        return None  # not uniform, or NaN
    return float(first)


def only_reader(value: NodeValue, reader: Node) -> bool:
    """Whether `reader` is the only node that reads any result of `value`'s node."""
    return list(value.node.users) == [reader]
