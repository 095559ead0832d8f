"""The roofline lower bound of a quantized network on an NPU configuration (issue 8's yardstick).

A layer is a node of the quantized graph that computes or moves data, with the chain of single-user
Rescale / ReLU-style Max/Min-by-a-constant after it fused in (a device applies them to the tile on
chip). Its bound is max(MACs / (R x C), minimal DRAM bytes / DRAM bytes per cycle), where the
minimal bytes read each operand and weight once (a bias in int32) and write the fused chain's
result once; the network's bound is the sum over layers. Reshapes are views (no layer), and the
input's Quantize and the output's Dequantize are the host binding's. Nothing here depends on how
the backend tiles, so the bound is the same for every compiler of the same quantized graph.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from isa.config import ArchConfig

from ...graph.function import Function
from ...graph.node import Constant, Node, NodeValue, Placeholder

FUSABLE = ("Rescale", "Max", "Min")
VIEWS = ("Reshape", "Quantize", "Dequantize", "Save")


@dataclass(frozen=True)
class LayerBound:
    name: str
    kind: str
    macs: int
    bytes: int
    compute_cycles: float
    memory_cycles: float

    @property
    def cycles(self) -> float:
        return max(self.compute_cycles, self.memory_cycles)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_cycles >= self.memory_cycles else "memory"


def _nbytes(value: NodeValue) -> int:
    return int(np.prod(value.type.shape, dtype=np.int64)) * value.type.dtype.itemsize


def _macs(node: Node) -> int:
    if node.kind == "Conv":
        w = node.filter.type.shape
        return int(np.prod(node.type.shape, dtype=np.int64)) * int(np.prod(w[1:], dtype=np.int64))
    if node.kind == "MatMul":
        return int(np.prod(node.type.shape, dtype=np.int64)) * node.lhs.type.shape[-1]
    return 0


def _fused_into(node: Node) -> bool:
    """Whether `node` is an element-wise step applied on chip to its producer's tiles."""
    if node.kind not in FUSABLE:
        return False
    source = node.inputs[0] if node.kind == "Rescale" else next(
        (v for v in node.inputs if not isinstance(v.node, Constant)), None)
    others = [v for v in node.inputs if v != source]
    return (source is not None and all(isinstance(v.node, Constant) for v in others)
            and len(source.node.users) == 1 and not isinstance(source.node, (Constant, Placeholder))
            and source.node.kind not in VIEWS)


def _chain_end(node: Node) -> NodeValue:
    value = node.result()
    while len(value.node.users) == 1:
        user = next(iter(value.node.users))
        if not _fused_into(user) and not (user.kind == "Add" and value.type.elem.value == "int32q"):
            break
        value = user.result()
    return value


def _operand_bytes(value: NodeValue) -> int:
    while value.node.kind == "Reshape":
        value = value.node.input
    return _nbytes(value)


def layer_bounds(function: Function, config: ArchConfig) -> list[LayerBound]:
    """One bound per layer, in graph order."""
    bounds = []
    for node in function.nodes:
        if isinstance(node, (Constant, Placeholder)) or node.kind in VIEWS or _fused_into(node):
            continue
        if node.kind == "Add" and node.type.elem.value == "int32q":
            continue  # a MatMul's bias: part of that layer
        end = _chain_end(node)
        operands = [v for v in node.inputs if v is not None]
        extra = [v for user_value in _fused_values(node, end) for v in user_value]
        moved = sum(_operand_bytes(v) for v in operands + extra) + _nbytes(end)
        macs = _macs(node)
        bounds.append(LayerBound(node.name, node.kind, macs, moved, macs / config.macs_per_cycle,
                                 moved / config.dram_bytes_per_cycle))
    return bounds


def _fused_values(node: Node, end: NodeValue) -> list[list[NodeValue]]:
    """The constant operands (a bias, a ReLU's bound) of the chain fused after `node`."""
    found = []
    value = node.result()
    while value != end:
        user = next(iter(value.node.users))
        found.append([v for v in user.inputs if v != value and v is not None])
        value = user.result()
    return found


def network_bound(function: Function, config: ArchConfig) -> float:
    """The roofline lower bound of the whole network, in cycles."""
    return sum(b.cycles for b in layer_bounds(function, config))
