"""Networks for the runtime tests: the digits CNN and a conv -> Sin -> conv net the NPU cannot run whole."""
from __future__ import annotations

from functools import cache

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

import glowsdk
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile


@cache
def digits() -> glowsdk.api.Network:
    return glowsdk.load(glowsdk.zoo.digits_model_path(), input_shapes={"image": (1, 1, 8, 8)})


def quantization(network: glowsdk.api.Network) -> QuantizationConfig:
    """A min-max profile of `network` on two seeded random calibration inputs."""
    return QuantizationConfig(collect_profile(network, calibration_random(network, 2)))


def sin_model() -> ModelProto:
    """conv -> relu -> Sin -> conv -> relu -> conv: the Sin (no NPU kernel) has to run on the host."""
    rng = np.random.default_rng(5)
    weights, nodes = [], []

    def conv(x: str, c: int, oc: int, out: str) -> str:
        w, b = f"{out}_w", f"{out}_b"
        weights.append(numpy_helper.from_array(rng.standard_normal((oc, c, 3, 3)).astype(np.float32) * 0.3, w))
        weights.append(numpy_helper.from_array(rng.standard_normal(oc).astype(np.float32) * 0.1, b))
        nodes.append(helper.make_node("Conv", [x, w, b], [out], pads=[1, 1, 1, 1]))
        return out

    nodes.append(helper.make_node("Relu", [conv("x", 2, 4, "c1")], ["r1"]))
    nodes.append(helper.make_node("Sin", ["r1"], ["s1"]))
    nodes.append(helper.make_node("Relu", [conv("s1", 4, 4, "c2")], ["r2"]))
    conv("r2", 4, 3, "y")
    graph = helper.make_graph(nodes, "sin_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 2, 6, 6))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@cache
def sin_net() -> glowsdk.api.Network:
    return glowsdk.load(sin_model())
