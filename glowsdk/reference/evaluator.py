"""The reference evaluator: numpy semantics for a whole Function.

It is the golden reference every backend is checked against and what constant
folding runs. It checks each kernel's results against the node's declared types,
so a type rule and its kernel cannot silently disagree.
"""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from ..errors import GlowError, UnsupportedError
from ..graph.function import Function
from ..graph.inputs import check_inputs, declared_inputs
from ..graph.node import Constant, Node, NodeValue, Placeholder
from ..graph.nodes.core import Save
from ..graph.types import Type
from . import kernels  # noqa: F401  (registers the kernels)
from .registry import KERNELS, group_variadic, kernel_results

Progress = Callable[[int, int, Node], None]


def run_node(node: Node, args: list) -> list[np.ndarray]:
    """Run one node's kernel on numpy operands and check the results against its types."""
    fn = KERNELS.get(node.kind)
    if fn is None:
        raise UnsupportedError(f"node '{node.name}': no reference kernel for {node.kind}")
    with np.errstate(all="ignore"):
        produced = fn(node, *group_variadic(node.spec.operands, args))
    results = kernel_results(produced, len(node.types), node.kind)
    return [_conform(node, r, t) for r, t in zip(results, node.types)]


def _conform(node: Node, array: np.ndarray, type_: Type) -> np.ndarray:
    if array.shape != type_.shape:
        raise AssertionError(f"{node.kind} '{node.name}': kernel produced shape {array.shape}, "
                             f"type says {type_}")
    if array.dtype != type_.dtype:
        array = array.astype(type_.dtype)
    return array


def evaluate(function: Function, inputs: Mapping[str, np.ndarray],
             progress: Progress | None = None) -> dict[str, np.ndarray]:
    """Run `function` on named input arrays; return its outputs by placeholder name."""
    checked = check_inputs(function.input_placeholders(), declared_inputs(function), inputs)
    values: dict[NodeValue, np.ndarray] = {ph.result(): checked[ph.name]
                                           for ph in function.input_placeholders()}
    remaining = _last_uses(function)
    outputs: dict[str, np.ndarray] = {}
    order = function.topo_order()
    for step, node in enumerate(order):
        if progress is not None:
            progress(step, len(order), node)
        if isinstance(node, Save):
            outputs[node.output.node.name] = np.array(_value(values, node.input), copy=True)
        else:
            args = [None if v is None else _value(values, v) for v in node.inputs]
            for value, array in zip(node.results, run_node(node, args)):
                values[value] = array
        for value in node.present_inputs():
            if value not in remaining:
                continue
            remaining[value] -= 1
            if remaining[value] == 0 and not isinstance(value.node, Placeholder):
                values.pop(value, None)
    return outputs


def _value(values: dict[NodeValue, np.ndarray], value: NodeValue) -> np.ndarray:
    if isinstance(value.node, Constant):
        return value.node.value
    return values[value]


def _last_uses(function: Function) -> dict[NodeValue, int]:
    """How many operand slots read each value, so dead intermediates can be freed early."""
    counts: dict[NodeValue, int] = {}
    for node in function.nodes:
        for value in node.present_inputs():
            counts[value] = counts.get(value, 0) + 1
    return counts


class NotConstantError(GlowError):
    """A value to fold depends on `placeholder`, so it is not known at compile time."""

    def __init__(self, value: str, placeholder: str) -> None:
        self.placeholder = placeholder
        super().__init__(f"'{value}' depends on placeholder '{placeholder}'")


def fold(value: NodeValue) -> np.ndarray:
    """Evaluate a value computed from Constants only (constant folding).

    Raises NotConstantError if it depends on a Placeholder.
    """
    cache: dict[NodeValue, np.ndarray] = {}

    def visit(v: NodeValue) -> np.ndarray:
        if v in cache:
            return cache[v]
        node = v.node
        if isinstance(node, Constant):
            return node.value
        if isinstance(node, Placeholder):
            raise NotConstantError(value.name, node.name)
        args = [None if i is None else visit(i) for i in node.inputs]
        for result, array in zip(node.results, run_node(node, args)):
            cache[result] = array
        return cache[v]

    return visit(value)
