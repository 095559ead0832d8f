"""Squeeze-and-excitation blocks, whose 1x1 convolutions of 1 x 1 maps run as rows of a GEMM
(kernels/squeeze.py), against onnxruntime on AVX-512 and AVX2 code.

Each case is x -> GlobalAveragePool -> Conv 1x1 (+ bias) -> SiLU or ReLU -> Conv 1x1 (+ bias)
-> Sigmoid -> x * gate. The cases cover one image and two (two rows of C), filter counts
that leave a partial last vector and a narrower last panel, a convolution without a bias, and
1 and 2 threads; the epilogue (SiLU, ReLU, the sigmoid) runs in the store. The AVX2 code (8
lanes) is compiled in a child process.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cpu_util import run_on_avx2
from onnx import helper, numpy_helper

import glowsdk

CASES = [  # name, input shape, squeezed channels, SiLU (else ReLU), biases
    ("one-image", (1, 40, 6, 6), 10, True, True),
    ("two-images-edges", (2, 72, 5, 5), 18, True, True),
    ("wide-relu", (1, 200, 3, 3), 52, False, True),
    ("no-bias", (1, 24, 4, 4), 6, True, False),
    # as many images as a full register tile's rows (6 or 8) and more: the full tile's own inline
    # epilogue and its accumulators started from the bias, then an edge tile
    ("nine-images", (9, 48, 3, 3), 12, True, True),
    ("sixteen-images-relu", (16, 36, 2, 2), 20, False, True),
]


def se_model(image, squeezed, silu, biases, seed=0):
    """The block of the module doc, seeded weights and input."""
    rng = np.random.default_rng(seed)
    channels = image[1]
    weights = [numpy_helper.from_array((rng.standard_normal((squeezed, channels, 1, 1)) / np.sqrt(channels))
                                       .astype(np.float32), "w1"),
               numpy_helper.from_array((rng.standard_normal((channels, squeezed, 1, 1)) / np.sqrt(squeezed))
                                       .astype(np.float32), "w2")]
    if biases:
        weights += [numpy_helper.from_array(rng.standard_normal(squeezed).astype(np.float32), "b1"),
                    numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "b2")]
    bias = (lambda name: [name]) if biases else (lambda name: [])
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["p"]),
             helper.make_node("Conv", ["p", "w1", *bias("b1")], ["c1"], kernel_shape=[1, 1])]
    if silu:
        nodes += [helper.make_node("Sigmoid", ["c1"], ["s1"]), helper.make_node("Mul", ["c1", "s1"], ["h"])]
    else:
        nodes.append(helper.make_node("Relu", ["c1"], ["h"]))
    nodes += [helper.make_node("Conv", ["h", "w2", *bias("b2")], ["c2"], kernel_shape=[1, 1]),
              helper.make_node("Sigmoid", ["c2"], ["g"]), helper.make_node("Mul", ["x", "g"], ["y"])]
    graph = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(image))],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, list(image))], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return model, {"x": rng.standard_normal(image).astype(np.float32)}


def check_case(image, squeezed, silu, biases, threads):
    """Both convolutions read filters packed into column panels (the squeeze kernel's), with their
    element-wise tails in the store, and the output is within 1e-5 of onnxruntime's (relative to its
    largest magnitude)."""
    model, feeds = se_model(image, squeezed, silu, biases)
    compiled = glowsdk.compile(glowsdk.load(model), "cpu", threads=threads, split_min_us=0, cache=False)
    assert sum(name.endswith(".columns") for name in compiled.compiled.program.ir.weights) == 2
    convs = [step for step in compiled.compiled.steps if step.instrs[0].kind == "Conv"]
    assert len(convs) == 2 and all(step.epilogue for step in convs)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = compiled.run(feeds)["y"]
    assert float(np.abs(got - want).max()) <= 1e-5 * float(np.abs(want).max())


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name, image, squeezed, silu, biases", CASES, ids=[c[0] for c in CASES])
def test_squeeze_agrees_with_onnxruntime(name, image, squeezed, silu, biases, threads):
    check_case(image, squeezed, silu, biases, threads)


def test_avx2_code_agrees_too():
    """Every case on code compiled without AVX-512 (8 lanes, 16 registers), in a child process."""
    run_on_avx2(__file__, "for _, *case in t.CASES:\n"
                "    t.check_case(*case, 2)\n")
