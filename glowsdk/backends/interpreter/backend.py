"""The interpreter backend: the golden functional reference, run from the low-level IR.

It declares exactly the primitive set, so everything it runs has gone through
lowering. Compiling builds the Program every IR backend builds (IRGen, IR
optimisation, static allocation); executing runs its instructions with the
reference kernels on flat byte buffers at the allocated offsets, so it checks
the IR pipeline and the allocator as well as the kernels.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ...compiler.backend import Backend, CompiledFunction, CompileOptions, DeviceInfo
from ...compiler.ir.program import build_program
from ...compiler.lowering.primitives import PRIMITIVES
from ...compiler.passes.manager import PassManager
from ...errors import UnsupportedError
from ...graph.function import Function
from ...graph.inputs import check_inputs, declared_inputs
from .executor import ProgramRunner


class InterpreterFunction(CompiledFunction):
    """A function's Program (built with `passes` running the IR optimiser) and a runner for it."""

    def __init__(self, function: Function, passes: PassManager | None = None) -> None:
        super().__init__(function)
        self._wanted = function.input_placeholders()
        self._declared = declared_inputs(function)
        self.program = build_program(function, passes=passes)
        self._runner = ProgramRunner(self.program)

    def execute(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self._runner.run(check_inputs(self._wanted, self._declared, inputs))


class InterpreterBackend(Backend):
    """Runs every primitive on every element kind the primitive allows."""

    name = "interpreter"
    primitives = {name: p.elems for name, p in PRIMITIVES.items()}
    options: dict[str, str] = {}

    def device_info(self) -> DeviceInfo:
        # numpy's BLAS for the products, a Python step per node for the rest; on the host, so no link
        return DeviceInfo(memory_bytes=0, description="host numpy interpreter (memory bound by the host)",
                          macs_per_second=2e10, bytes_per_second=5e9,
                          link_bytes_per_second=float("inf"), launch_seconds=0.0)

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        if options.extra:
            raise UnsupportedError(f"the interpreter takes no option(s) {', '.join(sorted(options.extra))}")
        return InterpreterFunction(function, options.ir_passes)
