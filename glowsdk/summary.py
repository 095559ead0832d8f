"""A model at a glance, in its own (ONNX) terms: inputs and outputs, parameters, MACs and activations
per layer and in total, the op histogram, and how much of it each installed target runs.

Layers are the model's nodes (`Node.origin`): each glowsdk node carries the ONNX node it came from
through lowering, so MACs counted on the lowered graph (Conv and MatMul primitives) are summed back
onto the ONNX node that asked for them.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .api import Network
from .backends.registry import get_backend
from .compiler.backend import Backend
from .compiler.lowering.driver import lower_function
from .compiler.partition.cost import node_macs
from .compiler.partition.placement import FALLBACK, compute_nodes, supported_sides
from .compiler.passes import PassManager
from .compiler.pipeline import prepare_function
from .graph.function import Function
from .graph.node import Origin, Storage
from .progress import Progress


@dataclass
class LayerSummary:
    """One ONNX node: its op type, multiply-adds, the elements and bytes of its outputs."""

    name: str
    op_type: str
    macs: int = 0
    activation_elements: int = 0
    activation_bytes: int = 0
    output_shape: tuple[int, ...] = ()


@dataclass
class TargetSupport:
    """How much of the model a target runs: ONNX nodes it runs and those it does not, by op type."""

    name: str
    nodes: int
    supported: int
    missing: dict[str, int] = field(default_factory=dict)
    how: str = ""


@dataclass
class ModelSummary:
    source: str
    inputs: list[tuple[str, str]]
    outputs: list[tuple[str, str]]
    parameters: int
    parameter_bytes: int
    layers: list[LayerSummary]
    histogram: dict[str, int]
    targets: list[TargetSupport] = field(default_factory=list)

    @property
    def macs(self) -> int:
        return sum(layer.macs for layer in self.layers)

    @property
    def activation_bytes(self) -> int:
        return sum(layer.activation_bytes for layer in self.layers)

    def to_json(self) -> dict:
        return {"model": self.source, "inputs": dict(self.inputs), "outputs": dict(self.outputs),
                "parameters": self.parameters, "parameter_bytes": self.parameter_bytes, "macs": self.macs,
                "activation_bytes": self.activation_bytes, "op_histogram": self.histogram,
                "layers": [vars(layer) | {"output_shape": list(layer.output_shape)} for layer in self.layers],
                "targets": [vars(t) for t in self.targets]}


def _weights(function: Function) -> tuple[int, int]:
    """Elements and bytes of the model's float weights: constants, and the constant fills (ONNX
    ConstantOfShape, a Splat node here) that bundled models make their weights with."""
    elements = nbytes = 0
    for node in function.module.constants.values():
        if node.users and node.type.elem.is_float:
            elements += int(np.prod(node.type.shape, dtype=np.int64))
            nbytes += node.type.nbytes
    for node in function.nodes:
        if node.kind == "Splat" and node.type.elem.is_float:
            elements += int(np.prod(node.type.shape, dtype=np.int64))
            nbytes += node.type.nbytes
    return elements, nbytes


def _origin(node) -> Origin:
    return node.origin if node.origin is not None else Origin(node.name, node.kind)


def summarize(network: Network, backends: dict[str, Backend],
              quantize: Callable[[Network], object] | None = None) -> ModelSummary:
    """The summary of `network`; `backends` are the targets to check support on, and `quantize` makes
    the QuantizationConfig a target that runs only int8 code needs (None: such targets are skipped)."""
    function = network.function
    parameters, parameter_bytes = _weights(function)
    layers: dict[Origin, LayerSummary] = {}
    for node in function.nodes:
        if isinstance(node, Storage) or node.kind in ("Save", "Splat"):
            continue
        origin = _origin(node)
        layer = layers.setdefault(origin, LayerSummary(origin.name, origin.op_type))
        result = node.types[0]  # the last node of an ONNX node's group is its output
        layer.activation_elements = int(np.prod(result.shape, dtype=np.int64))
        layer.activation_bytes = result.nbytes
        layer.output_shape = tuple(result.shape)
    with Progress("summarising", len(backends) + 1, "step") as bar:
        bar.label("counting MACs on the lowered graph")
        lowered = function.module.clone().functions[function.name]
        lower_function(lowered, _interpreter())  # not optimised: the MACs the model itself asks for
        for node in lowered.nodes:
            macs = node_macs(node)
            if macs:
                origin = _origin(node)
                layers.setdefault(origin, LayerSummary(origin.name, origin.op_type)).macs += macs
        histogram = dict(Counter(layer.op_type for layer in layers.values()).most_common())
        summary = ModelSummary(network.source, [(i.name, str(i.type)) for i in network.inputs],
                               [(o.name, str(o.type)) for o in network.outputs], parameters, parameter_bytes,
                               list(layers.values()), histogram)
        for done, (name, backend) in enumerate(backends.items(), start=1):
            bar(done, label=f"what {name} runs")
            if backend.requires_quantization and quantize is None:
                continue
            summary.targets.append(target_support(network, name, backend, quantize, set(layers)))
    return summary


def _interpreter() -> Backend:
    return get_backend("interpreter")


def target_support(network: Network, name: str, backend: Backend, quantize: Callable[[Network], object],
                   layers: set[Origin]) -> TargetSupport:
    """Which of the model's nodes `backend` runs, decided on the graph it would see (lowered, quantized)."""
    how = ""
    quantization = None
    if backend.requires_quantization:
        quantization = quantize(network)
        how = "on the int8 graph"
    graph, _ = prepare_function(network.function, backend, manager=PassManager(), hook=lambda stage, fn: None,
                                quantization=quantization, partial=True)
    sides = supported_sides(graph, backend)
    refused = {_origin(n) for n in compute_nodes(graph) if sides.get(id(n)) == FALLBACK}
    refused &= layers
    missing = dict(Counter(o.op_type for o in refused).most_common())
    return TargetSupport(name, len(layers), len(layers) - len(refused), missing, how)
