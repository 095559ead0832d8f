"""The partitioner's cost model: a node's multiply-adds and bytes, a device's time for them.

Estimates, not measurements: they only have to rank placements. A node's time on a device is
max(MACs / its MAC rate, bytes / its memory bandwidth) with the figures the backend declares in
`DeviceInfo`; a partition adds one launch and its border bytes over the device's link.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...graph.node import Node
from ..backend import DeviceInfo

MATRIX_KINDS = ("Conv", "MatMul", "IntegerConv", "IntegerMatMul")
"""The kinds whose multiply-adds are counted (everything else counts bytes only)."""


def node_macs(node: Node) -> int:
    """Multiply-adds of a lowered matrix node (0 for any other kind)."""
    if node.kind not in MATRIX_KINDS:
        return 0
    out = int(np.prod(node.types[0].shape, dtype=np.int64))
    if node.kind in ("Conv", "IntegerConv"):
        return out * int(np.prod(node.inputs[1].type.shape[1:], dtype=np.int64))
    return out * int(node.inputs[0].type.shape[-1])


def node_bytes(node: Node) -> int:
    """Bytes a node reads and writes (weights included): what an element-wise kernel streams."""
    values = [*(v.type for v in node.present_inputs()), *node.types]
    return sum(t.nbytes for t in values)


@dataclass(frozen=True)
class Work:
    """The MACs and bytes of a set of nodes."""

    macs: int = 0
    bytes: int = 0

    def __add__(self, other: Work) -> Work:
        return Work(self.macs + other.macs, self.bytes + other.bytes)

    def seconds(self, device: DeviceInfo) -> float:
        """The time `device` needs for this work, compute or memory bound."""
        return max(self.macs / device.macs_per_second, self.bytes / device.bytes_per_second)


def work_of(nodes: list[Node]) -> Work:
    total = Work()
    for node in nodes:
        total += Work(node_macs(node), node_bytes(node))
    return total


def transfer_seconds(device: DeviceInfo, border_bytes: int) -> float:
    """One run's launch plus moving `border_bytes` over the device's link."""
    return device.launch_seconds + border_bytes / device.link_bytes_per_second
