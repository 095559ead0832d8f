"""The reference-NPU backend: quantized graph in, `.npub` binary out, run on the simulator.

The NPU computes int8 with int32 accumulators only, so it declares its primitives with quantized
element kinds; it also accepts their float forms, so that lowering keeps them for the shared
quantizer to convert (`is_op_supported`). What is still float after quantization, apart from the
input Quantize and output Dequantize that the host binding performs, cannot run here: compile names
those ops in one line. `CompiledFunction.execute` runs the binary on the SimPy simulator.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from isa.config import PRESETS, ArchConfig, resolve_config
from isa.container import write_npub
from isa.origins import ORIGINS_KEY
from sim.binding import run_binary

from ...compiler.backend import Backend, CompiledFunction, CompileOptions, DeviceInfo, Flag
from ...errors import UnsupportedError, UnsupportedOpsError
from ...graph.function import Function
from ...graph.inputs import check_inputs, declared_inputs
from ...graph.node import Constant, Node, Placeholder
from ...graph.types import ElemKind
from .binary import build_binary
from .layers import Layer, LayerBuilder
from .one_row import windows_as_rows
from .report import compile_report
from .support import PRIMITIVES, SUPPORT, device_limits, kept_unlowered, quantized_form_ok

OPTIONS = {
    "config": "architecture preset (edge, default, server) or configuration file (default: default)",
    "output": "write the .npub binary to this file",
}
"""The backend-specific CompileOptions.extra keys the NPU backend understands."""

FLAGS = (Flag("--config", "config", "the architecture (default: default)", metavar="PRESET|FILE",
              check=resolve_config),)
"""`glowsdk compile --target npu --config edge`: the option `config`, checked before the model loads."""

Q8, Q32, F32 = ElemKind.QINT8, ElemKind.QINT32, ElemKind.FLOAT32


def layer_origins(function: Function, layers: list[Layer]) -> dict[str, list[str]]:
    """The model node each layer comes from: its graph node's origin, or for a layer split from one node
    (a grouped convolution's `NAME/groups0-7`) that node's."""
    by_name = {node.name: node.origin for node in function.nodes if node.origin is not None}
    origins = {}
    for layer in layers:
        name = layer.name
        while name not in by_name and "/" in name:
            name = name.rpartition("/")[0]
        if name in by_name:
            origins[layer.name] = list(by_name[name])
    return origins


class NpuFunction(CompiledFunction):
    """A function compiled to one NPU binary for one architecture configuration."""

    def __init__(self, function: Function, config: ArchConfig, name: str) -> None:
        super().__init__(function)
        self.function = function  # the quantized graph the binary computes, for the reference evaluator
        self._wanted = function.input_placeholders()
        self._declared = declared_inputs(function)
        self.config = config
        builder = LayerBuilder(function, config)
        layers = builder.build()
        self.binary, self.layers = build_binary(builder, layers, config,
                                                {"model": name, "compiler": "glowsdk npu backend",
                                                 "config": config.name, ORIGINS_KEY: layer_origins(function, layers)})
        self.pass_through = {n.output.node.name: n.input.node.name for n in function.nodes
                             if n.kind == "Save" and isinstance(n.input.node, Placeholder)}
        """Output -> the input it is (an identity): the host copies it, exact, and the binary has no part in it."""

    def execute(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        checked = check_inputs(self._wanted, self._declared, inputs)
        bound = self.binary.bindings.inputs
        outputs = {}
        if self.binary.bindings.outputs:
            outputs = run_binary(self.binary, self.config, {k: v for k, v in checked.items() if k in bound}).outputs
        outputs.update({out: checked[source].copy() for out, source in self.pass_through.items()})
        return outputs

    def save(self, path: str) -> None:
        write_npub(path, self.binary)

    def report(self, page: bool, title: str) -> str:
        return compile_report(self, page, title)


class NpuBackend(Backend):
    """The glowsdk reference NPU (isa/, sim/): int8 convolutions, matrix products, pooling, element-wise,
    softmax, global average pooling, LRN (kept unlowered): what it runs is support.SUPPORT."""

    name = "npu"
    requires_quantization = True
    options = OPTIONS
    flags = FLAGS
    primitives = PRIMITIVES

    def is_op_supported(self, node: Node) -> bool:
        if node.kind == "Dequantize" and _wide_softmax_output(node):
            return True
        if device_limits(node, self._config()):
            return False
        unlowered = SUPPORT[node.kind].unlowered if node.kind in SUPPORT else None
        if unlowered is not None:  # the float form is for the quantizer to convert
            return unlowered(node) and (node.input.type.elem is F32 or quantized_form_ok(node))
        return super().is_op_supported(node) and (node.kind in ("Quantize", "Dequantize") or quantized_form_ok(node))

    def unsupported_reason(self, node: Node) -> str | None:
        """The limits of the device `node` exceeds (support.SUPPORT's limits), named after the model's node:
        `Conv 'stem': kernel 300 > 255, stride 256 > 255 on npu`."""
        problems = device_limits(node, self._config())
        if not problems:
            return None
        who = str(node.origin) if node.origin is not None else f"{node.kind} '{node.name}'"
        return f"{who}: {', '.join(problems)} on {self.name}"

    def _config(self) -> ArchConfig:
        """The architecture configuration of the compile under way (the `config` option)."""
        return resolve_config(self.compile_options.extra.get("config", "default"))

    def transform_post_lowering(self, function: Function) -> bool:
        """1-D convolutions and pools become 2-D ones over images of one row (one_row.py)."""
        return windows_as_rows(function)

    def should_lower(self, node: Node) -> bool:
        return not kept_unlowered(node)

    def device_info(self) -> DeviceInfo:
        config = PRESETS["default"]
        hz = config.clock_ghz * 1e9
        return DeviceInfo(memory_bytes=config.dram_bytes, description="glowsdk reference NPU (simulated)",
                          macs_per_second=config.macs_per_cycle * hz,
                          bytes_per_second=config.dram_bytes_per_cycle * hz)

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        unknown = set(options.extra) - set(OPTIONS)
        if unknown:
            raise UnsupportedError(f"the npu backend takes no option(s) {', '.join(sorted(unknown))}; "
                                   f"it takes {', '.join(OPTIONS)}")
        stuck = sorted({n.kind for n in function.nodes if not _runs_here(n)})
        if stuck:
            raise UnsupportedOpsError(stuck, "target 'npu' (int8 only; quantize with a profile, and ops still "
                                             "float need the host)")
        config = resolve_config(options.extra.get("config", "default"))
        compiled = NpuFunction(function, config, function.name)
        if options.extra.get("output"):
            write_npub(options.extra["output"], compiled.binary)
        return compiled


def _runs_here(node: Node) -> bool:
    """Storage and Save, the border conversions, and every op in its quantized form."""
    if isinstance(node, (Constant, Placeholder)) or node.kind == "Save":
        return True
    if node.kind == "Quantize":
        return isinstance(node.input.node, Placeholder) and node.type.elem is Q8
    if node.kind == "Dequantize":
        return all(u.kind == "Save" for u in node.users) and (node.input.type.elem is Q8
                                                              or _wide_softmax_output(node))
    return not any(t.elem is F32 for t in node.types) and quantized_form_ok(node)


def _wide_softmax_output(node: Node) -> bool:
    """A Dequantize of a wide Softmax's int32 probabilities at the network's output: the binding's to do."""
    return (node.input.node.kind == "Softmax" and node.input.type.elem is Q32
            and all(u.kind == "Save" for u in node.users))
