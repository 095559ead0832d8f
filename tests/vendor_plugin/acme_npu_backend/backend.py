"""The Acme NPU-1 backend: what the chip runs, what it keeps, how it compiles.

The chip has a matrix engine (Conv, MatMul), a vector unit (element-wise
arithmetic, compares, selects, pooling, reductions) and a DMA engine (data
movement), all float32 only. It runs Relu as a fused kernel of its own, so it
asks glowsdk to keep Relu instead of lowering it to Max(x, 0), and recovers
Relu where lowering or the exporter spelled it as Max(x, 0).
"""
from __future__ import annotations

from typing import Mapping

from glowsdk.compiler.backend import Backend, CompiledFunction, CompileOptions, DeviceInfo
from glowsdk.errors import UnsupportedError
from glowsdk.graph.function import Function
from glowsdk.graph.node import Node
from glowsdk.graph.types import ElemKind

from .program import AcmeFunction
from .relu import recover_relus

F32 = frozenset({ElemKind.FLOAT32})
MASK = F32 | {ElemKind.BOOL}
INDEX = F32 | {ElemKind.INT32, ElemKind.INT64}

# The kernel library, primitive -> element kinds of its operands and results.
# Every operand and result counts: Equal's bool result, Where's bool condition
# and Gather's integer indices need those kinds listed.
PRIMITIVES: Mapping[str, frozenset[ElemKind]] = {
    # matrix engine
    "Conv": F32, "MatMul": F32,
    # vector unit
    **dict.fromkeys(("Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"), F32),
    **dict.fromkeys(("Exp", "Log", "Sqrt", "Tanh", "Erf", "Floor", "Round"), F32),
    **dict.fromkeys(("Equal", "Less", "Where"), MASK),
    "MaxPool": F32, "AveragePool": F32,
    **dict.fromkeys(("ReduceSum", "ReduceMax", "ReduceMin"), F32),
    **dict.fromkeys(("ArgMax", "ArgMin"), INDEX),
    # DMA engine
    **dict.fromkeys(("Reshape", "Transpose", "Slice", "Concat", "Expand", "Splat"), F32),
    "Gather": INDEX,
}

NATIVE: Mapping[str, frozenset[ElemKind]] = {"Relu": F32}
"""High-level kinds the chip runs as they are, with the element kinds it runs them on."""

OPTIONS = {"fuse": "fuse each Conv with the Relu that follows it (default True)"}


class AcmeBackend(Backend):
    """glowsdk's view of the Acme NPU-1."""

    name = "acme"
    primitives = PRIMITIVES

    def is_op_supported(self, node: Node) -> bool:
        native = NATIVE.get(node.kind)
        if native is None:
            return super().is_op_supported(node)
        kinds = [t.elem for t in node.types] + [v.type.elem for v in node.present_inputs()]
        return all(kind in native for kind in kinds)

    def should_lower(self, node: Node) -> bool:
        # keep what the chip runs natively; a float16 Relu still lowers (and is then refused)
        return not (node.kind in NATIVE and self.is_op_supported(node))

    def transform_post_lowering(self, function: Function) -> bool:
        return recover_relus(function) > 0

    def device_info(self) -> DeviceInfo:
        return DeviceInfo(memory_bytes=64 << 20,
                          description="Acme NPU-1 (imaginary): 4 cores, 2 MiB SRAM each, 64 MiB DRAM",
                          extra={"cores": 4, "sram_bytes": 2 << 20, "clock_mhz": 800})

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        unknown = sorted(set(options.extra) - set(OPTIONS))
        if unknown:
            known = "; ".join(f"{k}: {v}" for k, v in OPTIONS.items())
            raise UnsupportedError(f"target 'acme': unknown option(s) {', '.join(unknown)} ({known})")
        return AcmeFunction(function, fuse=bool(options.extra.get("fuse", True)))
