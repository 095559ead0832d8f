"""The MAC-array chip: what it runs, how fast, and its (numpy-modelled) execution."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from glowsdk.compiler.backend import Backend, CompiledFunction, CompileOptions, DeviceInfo
from glowsdk.graph.function import Function
from glowsdk.graph.node import Constant, Placeholder
from glowsdk.graph.types import ElemKind

F32 = frozenset({ElemKind.FLOAT32})

KERNELS = {"MatMul": np.matmul, "Add": np.add, "Max": np.maximum}
"""The chip's three kernels, modelled in numpy (what the silicon computes, element for element)."""


class MacArrayFunction(CompiledFunction):
    """A function of MatMul, Add and Max nodes, run node by node in its scheduled order."""

    def __init__(self, function: Function) -> None:
        super().__init__(function)
        self.function = function

    def execute(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        values: dict[int, np.ndarray] = {}
        outputs = {}
        for name, placeholder in self.function.module.placeholders.items():
            if name in inputs:
                values[id(placeholder)] = np.asarray(inputs[name], dtype=np.float32)
        for const in self.function.module.constants.values():
            values[id(const)] = const.value
        for node in self.function.nodes:
            if node.kind == "Save":
                outputs[node.output.node.name] = values[id(node.input.node)]
                continue
            operands = [values[id(v.node)] for v in node.present_inputs()]
            values[id(node)] = KERNELS[node.kind](*operands).astype(np.float32, copy=False)
        return outputs


class MacArrayBackend(Backend):
    """A 64x64 float32 MAC array at 500 MHz, on the host's memory bus (a short, fast link)."""

    name = "macarray"
    primitives = {"MatMul": F32, "Add": F32, "Max": F32}
    options: dict[str, str] = {}

    def device_info(self) -> DeviceInfo:
        return DeviceInfo(memory_bytes=256 << 20, description="MAC array (imaginary): 64x64 float32 MACs, 500 MHz",
                          macs_per_second=64 * 64 * 500e6, bytes_per_second=50e9,
                          link_bytes_per_second=50e9, launch_seconds=1e-6)

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        for node in function.nodes:
            assert isinstance(node, (Constant, Placeholder)) or node.kind == "Save" or node.kind in KERNELS, node.kind
        return MacArrayFunction(function)
