"""Small ONNX networks for the NPU tests, built with onnx.helper from seeded random weights."""
from __future__ import annotations

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

import glowsdk


class NetBuilder:
    """Appends ONNX nodes with random float weights; `network()` imports the result."""

    def __init__(self, shape: tuple[int, ...], seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.weights: list = []
        self.shape = shape
        self.count = 0

    def _name(self, kind: str) -> str:
        self.count += 1
        return f"{kind.lower()}{self.count}"

    def node(self, kind: str, inputs: list[str], **attrs) -> str:
        out = self._name(kind)
        self.nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def weight(self, shape: tuple[int, ...]) -> str:
        name = self._name("w")
        self.weights.append(numpy_helper.from_array(self.rng.standard_normal(shape).astype(np.float32), name))
        return name

    def conv(self, x: str, c: int, oc: int, k: int = 3, pad: int = 1, stride: int = 1, relu: bool = True) -> str:
        out = self.node("Conv", [x, self.weight((oc, c, k, k)), self.weight((oc,))], pads=[pad] * 4,
                        strides=[stride] * 2)
        return self.node("Relu", [out]) if relu else out

    def model(self, out: str) -> ModelProto:
        graph = helper.make_graph(self.nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                    self.shape)],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], self.weights)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])

    def network(self, out: str) -> glowsdk.api.Network:
        return glowsdk.load(self.model(out))
