"""The LLVM CPU backend: the low-level IR program compiled to host machine code (paper 5).

Compiling builds the Program every IR backend builds (IRGen, IR optimisation,
static allocation), groups its instructions into steps (operator stacking),
emits one specialised kernel per step into one LLVM module, and JIT-compiles it
for the host CPU. Executing copies the inputs into the placeholder region at
their planned offsets, calls the entry point with the three regions, and copies
the outputs out. The supported primitives are exactly the kernel table's kinds.
"""
from __future__ import annotations

import threading
from typing import Mapping

import numpy as np

from ...compiler.ir.program import build_program
from ...compiler.lowering.primitives import PRIMITIVES
from ...errors import GlowError, UnsupportedError
from ...files import write_text
from ...graph.function import Function
from ...graph.node import Node
from ...reference.evaluator import check_inputs, declared_inputs
from ..base import Backend, CompiledFunction, CompileOptions, DeviceInfo
from .codegen.module import ENTRY, ModuleBuilder
from .jit import JitModule, host_description, host_machine
from .kernels import KERNELS
from .stacking import plan_steps

OPTIONS = {
    "dump_llvm": "write the generated LLVM module (before optimisation) to this file",
    "stacking": "fuse runs of element-wise instructions into one loop (default true)",
}
"""The backend-specific CompileOptions.extra keys the CPU backend understands."""

ALIGNMENT = 64


def aligned_bytes(size: int) -> np.ndarray:
    """A zeroed byte array of `size` whose data starts on an ALIGNMENT-byte boundary."""
    raw = np.zeros(size + ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start:start + size]


class CpuFunction(CompiledFunction):
    """A function JIT-compiled to one module; `execute` runs its entry point."""

    def __init__(self, function: Function, options: CompileOptions) -> None:
        super().__init__(function)
        self._wanted = function.input_placeholders()
        self._declared = declared_inputs(function)
        self.program = program = build_program(function, passes=options.ir_passes)
        self.steps = plan_steps(program, stacking=bool(options.extra.get("stacking", True)))
        machine = host_machine()
        builder = ModuleBuilder(program, machine.triple, str(machine.target_data))
        for step in self.steps:
            builder.add_step(step, KERNELS[step.instrs[0].kind].build)
        module = builder.finish()
        self.llvm_ir = str(module)
        if options.extra.get("dump_llvm"):
            write_text(options.extra["dump_llvm"], self.llvm_ir, "--dump-llvm")
        self.jit = JitModule(module, ENTRY)
        plan = program.plan
        self._constants = aligned_bytes(plan.constant_bytes)
        self._activations = aligned_bytes(plan.activation_bytes)
        self._placeholders = aligned_bytes(plan.placeholder_bytes)
        self._views: dict[str, np.ndarray] = {}
        for weight in program.ir.weights.values():
            region = self._constants if weight.role == "constant" else self._placeholders
            offset = plan.address(weight)[1]
            view = region[offset:offset + weight.type.nbytes].view(weight.type.dtype).reshape(weight.type.shape)
            if weight.role == "constant":
                if weight.value is None:
                    raise UnsupportedError(f"constant weight %{weight.name} has no data")
                np.copyto(view, weight.value)
            else:
                self._views[weight.name] = view
        self._outputs = [w.name for w in program.ir.weights.values() if w.role == "output"]
        self._lock = threading.Lock()

    def execute(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        checked = check_inputs(self._wanted, self._declared, inputs)
        with self._lock:
            for name, array in checked.items():
                np.copyto(self._views[name], array)
            status = self.jit.entry(self._constants.ctypes.data, self._activations.ctypes.data,
                                    self._placeholders.ctypes.data)
            if status:
                raise GlowError("cpu backend: a Gather index is outside its axis")
            return {name: self._views[name].copy() for name in self._outputs}


class CpuBackend(Backend):
    """Compiles to host machine code with LLVM; runs what the kernel table covers."""

    name = "cpu"
    primitives = {kind: record.elems for kind, record in KERNELS.items() if kind in PRIMITIVES}

    def is_op_supported(self, node: Node) -> bool:
        return super().is_op_supported(node) and KERNELS[node.kind].supports(node)

    def device_info(self) -> DeviceInfo:
        return DeviceInfo(memory_bytes=0, description=f"host CPU, LLVM JIT for {host_description()}")

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        unknown = set(options.extra) - set(OPTIONS)
        if unknown:
            raise UnsupportedError(f"the cpu backend takes no option(s) {', '.join(sorted(unknown))}; "
                                   f"it takes {', '.join(OPTIONS)}")
        return CpuFunction(function, options)

