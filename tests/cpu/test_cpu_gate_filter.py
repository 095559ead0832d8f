"""A squeeze-and-excitation gate folded into the next 1x1 convolution's filter (cpu/gate_filter.py),
against onnxruntime: the folded graph has no Mul over the image, the unfolded cases keep it, and
the outputs agree either way (AVX-512 and AVX2 code)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from cpu_util import run_on_avx2
from onnx import TensorProto, helper, numpy_helper

import glowsdk

TOLERANCE = 1e-5
"""Largest difference allowed, relative to the largest output magnitude."""

CASES = [  # name, batch, channels, size, filters, another reader of the gated image, folded
    ("folded", 1, 24, 14, 40, False, True),
    ("filter-larger-than-image", 1, 24, 5, 40, False, False),
    ("batch-2", 2, 24, 14, 40, False, False),
    ("gated-image-read-twice", 1, 24, 14, 40, True, False),
]


def gate_model(batch: int, channels: int, size: int, filters: int, second_reader: bool, seed: int = 0):
    """x -> depthwise 3x3 -> ReLU -> squeeze-and-excitation (mean, 1x1 conv, ReLU, 1x1 conv, HardSigmoid)
    -> gate Mul -> 1x1 projection -> y; with `second_reader`, the gated image also goes to a second output."""
    rng = np.random.default_rng(seed)
    squeeze = max(channels // 4, 1)

    def weight(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
    weights = [weight("dw", channels, 1, 3, 3), weight("fc1", squeeze, channels, 1, 1), weight("fc1b", squeeze),
               weight("fc2", channels, squeeze, 1, 1), weight("fc2b", channels), weight("pw", filters, channels, 1, 1),
               weight("pwb", filters)]
    nodes = [helper.make_node("Conv", ["x", "dw"], ["d"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=channels),
             helper.make_node("Relu", ["d"], ["a"]),
             helper.make_node("GlobalAveragePool", ["a"], ["p"]),
             helper.make_node("Conv", ["p", "fc1", "fc1b"], ["f1"], kernel_shape=[1, 1]),
             helper.make_node("Relu", ["f1"], ["r1"]),
             helper.make_node("Conv", ["r1", "fc2", "fc2b"], ["f2"], kernel_shape=[1, 1]),
             helper.make_node("HardSigmoid", ["f2"], ["s"], alpha=1 / 6),
             helper.make_node("Mul", ["a", "s"], ["g"]),
             helper.make_node("Conv", ["g", "pw", "pwb"], ["y"], kernel_shape=[1, 1])]
    image = [batch, channels, size, size]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, filters, size, size])]
    if second_reader:
        outputs.append(helper.make_tensor_value_info("g", TensorProto.FLOAT, image))
    graph = helper.make_graph(nodes, "gate", [helper.make_tensor_value_info("x", TensorProto.FLOAT, image)],
                              outputs, weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return model, {"x": rng.standard_normal(image).astype(np.float32)}


def check_case(batch: int, channels: int, size: int, filters: int, second_reader: bool, folded: bool) -> None:
    """Outputs within TOLERANCE of onnxruntime's; the image-sized Mul gone exactly when `folded`."""
    model, feeds = gate_model(batch, channels, size, filters, second_reader)
    compiled = glowsdk.compile(glowsdk.load(model), "cpu", threads=1, cache=False)
    image_muls = [i for step in compiled.compiled.steps for i in (*step.instrs, *(step.epilogue or ()))
                  if i.kind == "Mul" and i.types[0].shape == (batch, channels, size, size)]
    assert bool(image_muls) is not folded
    got = compiled.run(feeds)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for name, want in zip([o.name for o in session.get_outputs()], session.run(None, feeds)):
        assert float(np.abs(got[name] - want).max()) <= TOLERANCE * float(np.abs(want).max()), name


@pytest.mark.parametrize("name, batch, channels, size, filters, second_reader, folded", CASES,
                         ids=[c[0] for c in CASES])
def test_gate_agrees_with_onnxruntime(name, batch, channels, size, filters, second_reader, folded):
    check_case(batch, channels, size, filters, second_reader, folded)


def test_avx2_code_agrees_too():
    """The folded case on code compiled without AVX-512, in a child process."""
    run_on_avx2(__file__, "t.check_case(*t.CASES[0][1:])\n")
