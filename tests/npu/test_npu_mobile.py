"""Mobile networks on the NPU: one layout for the whole graph, activations in the producing layer.

An inverted residual block (MobileNetV2: 1x1 expansion, ReLU6, depthwise 3x3, ReLU6, 1x1 projection,
residual Add) must compile into convolution layers only: the ReLU6's Min and the residual Add run in
the epilogue of the (grouped) convolution that produces them, and no layout Copy appears between
layers that all read and write channels-innermost images. Each case runs in checked mode and must
give the reference evaluator's bytes on the quantized graph.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact


def _relu6(b: NetBuilder, x: str) -> str:
    if not any(w.name == "six" for w in b.weights):
        b.weights += [numpy_helper.from_array(np.float32(0), "zero"), numpy_helper.from_array(np.float32(6), "six")]
    return b.node("Clip", [x, "zero", "six"])


def inverted_residual(c: int = 16, expand: int = 4, hw: int = 14, stride: int = 1):
    b = NetBuilder((1, c, hw, hw))
    stem = b.conv("x", c, c, 1, 0)
    wide = c * expand
    up = _relu6(b, b.conv(stem, c, wide, 1, 0, relu=False))
    dw = b.node("Conv", [up, b.weight((wide, 1, 3, 3)), b.weight((wide,))], group=wide, pads=[1] * 4,
                strides=[stride] * 2)
    down = b.conv(_relu6(b, dw), wide, c, 1, 0, relu=False)
    out = b.node("Add", [down, stem]) if stride == 1 else down
    return b.network(b.conv(out, c, 8, 1, 0, relu=False))


@pytest.mark.parametrize("config,stride", [("default", 1), ("edge", 2)])
def test_inverted_residual_runs_as_convolution_layers_only(config, stride):
    npu = assert_bit_exact(inverted_residual(stride=stride), config=config)
    assert "Min" in {n.kind for n in npu.compiled.function.nodes}  # the quantized graph clamps at 6 ...
    layers = npu.compiled.layers
    copies = [layer.name for layer in layers if layer.kind == "Copy"]
    assert {layer.kind for layer in layers} == {"Conv", "Copy"}  # ... inside the convolution layers
    assert copies == list(npu.compiled.binary.bindings.outputs)  # only the output, written for the host
