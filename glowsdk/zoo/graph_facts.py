"""Facts about an ONNX graph the zoo transforms share: users of values, and activations."""
from __future__ import annotations

import onnx


def consumers(graph: onnx.GraphProto) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
    """For each value, the nodes reading it and at which input index, in graph order."""
    users: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for index, name in enumerate(node.input):
            if name:
                users.setdefault(name, []).append((node, index))
    return users


def activations(graph: onnx.GraphProto) -> set[str]:
    """The values that depend on a run-time graph input (not only on initializers)."""
    initializers = {t.name for t in graph.initializer}
    found = {v.name for v in graph.input if v.name not in initializers}
    for node in graph.node:  # graph order is topological in a valid model
        if any(name in found for name in node.input):
            found.update(node.output)
    return found
