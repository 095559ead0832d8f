"""The interpreter backend: the golden functional reference.

It declares exactly the primitive set, so everything it runs has gone through
lowering, and executes with the reference kernels. Until the low-level IR exists
it interprets the graph; a later step re-bases it onto the instruction stream and
the static allocator.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ...compiler.lowering.primitives import PRIMITIVES
from ...graph.function import Function
from ...reference.evaluator import evaluate
from ..base import Backend, CompiledFunction, CompileOptions, DeviceInfo


class InterpreterFunction(CompiledFunction):
    def __init__(self, function: Function) -> None:
        super().__init__(function)
        self.function = function

    def execute(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return evaluate(self.function, inputs)


class InterpreterBackend(Backend):
    """Runs every primitive on every element kind the primitive allows."""

    name = "interpreter"
    primitives = {name: p.elems for name, p in PRIMITIVES.items()}

    def device_info(self) -> DeviceInfo:
        return DeviceInfo(memory_bytes=0, description="host numpy interpreter (memory bound by the host)")

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        return InterpreterFunction(function)
