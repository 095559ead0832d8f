"""The interpreter backend.

Until the low-level IR exists it runs the reference evaluator over the graph;
a later step re-bases it onto the instruction stream and the static allocator.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ...graph.function import Function
from ...graph.node import Node
from ...reference.evaluator import evaluate
from ...reference.registry import KERNELS
from ..base import Backend, CompiledFunction, CompileOptions


class InterpreterFunction(CompiledFunction):
    def __init__(self, function: Function) -> None:
        super().__init__(function)
        self.function = function

    def execute(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return evaluate(self.function, inputs)


class InterpreterBackend(Backend):
    """Runs every node kind that has a reference kernel."""

    name = "interpreter"

    def is_op_supported(self, node: Node) -> bool:
        return node.kind in KERNELS or node.spec.family == "storage" or node.kind == "Save"

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        return InterpreterFunction(function)
