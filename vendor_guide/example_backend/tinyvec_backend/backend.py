"""What the TinyVec-1 runs, and how glowsdk compiles for it.

The chip is a float32 vector machine: a 16-lane vector unit for element-wise
arithmetic and a 16 x 16 MAC array for MatMul and 2-D convolutions; a Reshape
is free (a view). It has no pooling, reduction, data-movement or
transcendental unit: a graph that needs them is refused by `glowsdk.compile(..., target="tinyvec")` with the list of
what is missing, and runs through the host runtime instead, where the
partitioner sends those nodes to the CPU (see host.py).
"""
from __future__ import annotations

from typing import Mapping

from glowsdk.compiler.backend import Backend, CompiledFunction, CompileOptions, DeviceInfo, Flag, FlagKind
from glowsdk.graph.function import Function
from glowsdk.graph.node import Node
from glowsdk.graph.types import ElemKind

from .program import TinyVecFunction

F32 = frozenset({ElemKind.FLOAT32})

PRIMITIVES: Mapping[str, frozenset[ElemKind]] = {
    # vector unit: element-wise, with numpy broadcasting
    **dict.fromkeys(("Add", "Sub", "Mul", "Div", "Max", "Min"), F32),
    # MAC array
    "MatMul": F32, "Conv": F32,
    # free: the IR optimiser turns a Reshape into a view of its operand's bytes
    "Reshape": F32,
}


class TinyVecBackend(Backend):
    """glowsdk's view of the TinyVec-1."""

    name = "tinyvec"
    primitives = PRIMITIVES
    options = {"clock_mhz": "the chip's clock in MHz, for the run times it reports (default 500)"}
    # `glowsdk run|compile MODEL --target tinyvec --clock-mhz 800` passes clock_mhz=800 to compile
    flags = (Flag("--clock-mhz", "clock_mhz", "the chip's clock in MHz, for the run times it reports (default 500)",
                  FlagKind.COUNT, "MHZ", commands=("run", "compile")),)

    def is_op_supported(self, node: Node) -> bool:
        # the MAC array convolves images only: a 1-D or 3-D Conv is refused, and goes to the CPU
        if node.kind == "Conv" and node.inputs[0].type.rank != 4:
            return False
        return super().is_op_supported(node)

    def device_info(self) -> DeviceInfo:
        return DeviceInfo(memory_bytes=64 << 20,
                          description="TinyVec-1 (imaginary): 16 float32 lanes, 16x16 MAC array, 64 MiB",
                          extra={"lanes": 16, "mac_array": (16, 16), "clock_mhz": 500})

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        info = self.device_info()  # the pipeline has refused options other than `options`' already
        clock_mhz = options.extra.get("clock_mhz", info.extra["clock_mhz"])
        return TinyVecFunction(function, options.ir_passes, clock_mhz * 1e6, info.extra["lanes"])
