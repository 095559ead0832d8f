"""The reference evaluator: numpy semantics for a whole Function.

It is the golden reference every backend is checked against and what constant
folding runs. It checks each kernel's results against the node's declared types,
so a type rule and its kernel cannot silently disagree.
"""
from __future__ import annotations

from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from ..errors import GlowError, InputError, UnsupportedError
from ..graph.function import Function
from ..graph.node import Constant, Node, NodeValue, Placeholder
from ..graph.nodes.core import Save
from ..graph.types import Type
from . import kernels  # noqa: F401  (registers the kernels)
from .registry import KERNELS, group_variadic, kernel_results

Progress = Callable[[int, int, Node], None]


def check_input(placeholder: Placeholder, array: np.ndarray) -> np.ndarray:
    """`array` as the placeholder's dtype; InputError if its shape or kind does not fit."""
    expected = placeholder.type
    array = np.asarray(array)
    if array.shape != expected.shape:
        raise InputError(f"input '{placeholder.name}': expected shape {list(expected.shape)}, "
                         f"got {list(array.shape)}")
    if array.dtype != expected.dtype:
        same_family = array.dtype.kind == expected.dtype.kind or (
            array.dtype.kind in "fiu" and expected.dtype.kind in "fiu" and expected.elem.is_float)
        if not same_family:
            raise InputError(f"input '{placeholder.name}': expected {expected.elem.value}, got {array.dtype}")
        array = array.astype(expected.dtype)
    return array


def check_inputs(wanted: Sequence[Placeholder], declared: Iterable[str],
                 inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The `wanted` inputs by name, each through `check_input`.

    InputError for a name that is not among the `declared` input names (a module
    input the function no longer reads is still accepted) or a missing input; every
    backend validates inputs through this, so all report bad input alike.
    """
    declared = set(declared)
    unknown = set(inputs) - declared
    if unknown:
        raise InputError(f"unknown input(s): {', '.join(sorted(unknown))}; "
                         f"the inputs are {', '.join(sorted(declared))}")
    checked = {}
    for ph in wanted:
        if ph.name not in inputs:
            raise InputError(f"missing input '{ph.name}' ({ph.type})")
        checked[ph.name] = check_input(ph, inputs[ph.name])
    return checked


def declared_inputs(function: Function) -> list[str]:
    """Every input name of the function's module, read or not."""
    return [name for name, ph in function.module.placeholders.items() if not ph.is_output]


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
