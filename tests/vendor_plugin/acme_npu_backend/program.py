"""Acme's compiled form: a list of kernel launches, run in order.

The chip's own kernels (Relu, and Conv fused with the Relu that follows it) are
numpy code here; every other primitive runs glowsdk's reference kernel, the way
a bring-up starts before each kernel has its hardware implementation.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from glowsdk.compiler.backend import CompiledFunction
from glowsdk.errors import InputError
from glowsdk.graph.function import Function
from glowsdk.graph.inputs import check_input
from glowsdk.graph.node import Node, NodeValue
from glowsdk.reference.evaluator import run_node

Kernel = Callable[[list], list]


def relu(x: np.ndarray) -> np.ndarray:
    """The chip's rectifier, in place: NaN stays NaN, like max(x, 0)."""
    return np.maximum(x, np.float32(0), out=x)


@dataclass
class Launch:
    """One kernel launch: which kernel, its operands, the values it produces."""

    kernel: str
    operands: list[NodeValue | None]
    results: list[NodeValue]
    run: Kernel


def _reference(node: Node) -> Kernel:
    return lambda args: run_node(node, args)


def _native_relu(args: list) -> list:
    return [relu(np.array(args[0], copy=True))]


def _conv_relu(conv: Node) -> Kernel:
    return lambda args: [relu(run_node(conv, args)[0])]


def _fusable_convs(function: Function) -> dict[int, Node]:
    """The Relu reading each Conv that nothing else reads, by id of the Conv."""
    fused = {}
    for node in function.nodes:
        if node.kind == "Relu":
            producer = node.inputs[0].node
            if producer.kind == "Conv" and list(producer.users) == [node]:
                fused[id(producer)] = node
    return fused


def schedule(function: Function, fuse: bool) -> list[Launch]:
    """The launches computing `function` (Saves excluded), in a valid order."""
    fused = _fusable_convs(function) if fuse else {}
    fused_relus = {id(relu_node) for relu_node in fused.values()}
    program = []
    for node in function.topo_order():
        if node.kind == "Save" or id(node) in fused:
            continue
        if id(node) in fused_relus:
            conv = node.inputs[0].node
            program.append(Launch("Conv+Relu", list(conv.inputs), node.results, _conv_relu(conv)))
        elif node.kind == "Relu":
            program.append(Launch("Relu", list(node.inputs), node.results, _native_relu))
        else:
            program.append(Launch(node.kind, list(node.inputs), node.results, _reference(node)))
    return program


class AcmeFunction(CompiledFunction):
    """A function compiled for the Acme NPU-1."""

    def __init__(self, function: Function, fuse: bool) -> None:
        super().__init__(function)
        # the node kinds compile() was handed: what glowsdk lowered, kept and transformed
        self.received = Counter(function.count_kinds())
        self.program = schedule(function, fuse)
        self.launches = Counter(launch.kernel for launch in self.program)
        self._placeholders = {p.name: p for p in function.input_placeholders()}
        self._constants = {c.result(): c.value for c in function.module.constants.values()}
        self._saves = {n.output.node.name: n.input for n in function.nodes if n.kind == "Save"}

    def execute(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        unknown = set(inputs) - set(self._placeholders)
        missing = set(self._placeholders) - set(inputs)
        if unknown or missing:
            raise InputError(f"acme: expected inputs {', '.join(sorted(self._placeholders))}; "
                             f"missing {sorted(missing)}, unknown {sorted(unknown)}")
        values = dict(self._constants)
        for name, placeholder in self._placeholders.items():
            values[placeholder.result()] = check_input(placeholder, inputs[name])
        with np.errstate(all="ignore"):
            for launch in self.program:
                args = [None if v is None else values[v] for v in launch.operands]
                values.update(zip(launch.results, launch.run(args), strict=True))
        return {name: np.array(values[value], copy=True) for name, value in self._saves.items()}
