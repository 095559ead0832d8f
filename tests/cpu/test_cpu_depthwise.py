"""Depthwise convolutions (kernels/depthwise.py) against onnxruntime, on AVX-512 and AVX2 code.

The cases cover both of the kernel's paths: straight from the input rows, in blocks of
output rows with a shorter last block (stride 1: planes wider than a vector, with whole
vectors in a loop and masked edges; planes narrower than one, on narrower vectors down
to 4 lanes; dilation and uneven pads; a depth multiplier; column stride 2 with 3 and 5
taps; row stride 2 alone) and through the phase planes (stride 3). A residual Add and a Clip run in the convolution's store.
The AVX2 code (8 lanes) is compiled in a child process (GLOWSDK_CPU_ISA is read once
per process).
"""
from __future__ import annotations


import numpy as np
import onnxruntime as ort
import pytest
from cpu_util import residual_model, run_on_avx2
from onnx import helper, numpy_helper

import glowsdk

TOLERANCE = 1e-5
"""Largest difference allowed, relative to the largest output magnitude (at most 25 products a sum)."""

CASES = [  # name, input shape, kernel, strides, pads (top, left, bottom, right), dilations, multiplier
    ("wide-3x3", (1, 4, 9, 70), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ("narrow-5x5", (2, 6, 7, 7), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 1),
    ("dilated-uneven-pads", (1, 3, 12, 37), (3, 5), (1, 1), (2, 0, 1, 3), (2, 1), 1),
    ("multiplier", (1, 3, 10, 20), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2),
    ("stride-2", (1, 5, 15, 33), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1),
    ("stride-2-5x5", (1, 4, 17, 19), (5, 5), (2, 2), (2, 2, 2, 2), (1, 1), 1),
    ("row-stride-2", (1, 3, 11, 20), (3, 3), (2, 1), (1, 1, 1, 1), (1, 1), 1),
    ("rows-of-3-on-4-lanes", (1, 3, 6, 3), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ("stride-3-phase-planes", (1, 4, 17, 19), (5, 5), (3, 3), (2, 2, 2, 2), (1, 1), 1),
]


def depthwise_model(image, kernel, strides, pads, dilations, multiplier, seed=0):
    """Conv (one input channel per group) + bias -> Add of a second input -> Clip(0, 6) -> Tanh
    (a consumer, so the Add and the Clip work in place on the convolution's result)."""
    rng = np.random.default_rng(seed)
    channels = image[1]
    filters = channels * multiplier
    out = [image[0], filters]
    for i in range(2):
        span = dilations[i] * (kernel[i] - 1) + 1
        out.append((image[2 + i] + pads[i] + pads[2 + i] - span) // strides[i] + 1)
    weights = [numpy_helper.from_array(rng.standard_normal((filters, 1, *kernel)).astype(np.float32), "w"),
               numpy_helper.from_array(rng.standard_normal(filters).astype(np.float32), "b"),
               numpy_helper.from_array(np.array(0.0, np.float32), "low"),
               numpy_helper.from_array(np.array(6.0, np.float32), "high")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=list(kernel), strides=list(strides),
                              pads=list(pads), dilations=list(dilations), group=channels),
             helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Clip", ["s", "low", "high"], ["t"]),
             helper.make_node("Tanh", ["t"], ["y"])]
    return residual_model("depthwise", nodes, image, out, weights, rng)


def check_case(image, kernel, strides, pads, dilations, multiplier, threads):
    """The case's output on cpu within TOLERANCE of onnxruntime's, the Add and Clip in the
    convolution's store."""
    model, feeds = depthwise_model(image, kernel, strides, pads, dilations, multiplier)
    compiled = glowsdk.compile(glowsdk.load(model), "cpu", threads=threads, split_min_us=0, cache=False)
    kinds = [(step.instrs[0].kind, [i.kind for i in step.epilogue or ()]) for step in compiled.compiled.steps]
    assert ("Conv", ["Add", "Max", "Min"]) in kinds
    got = compiled.run(feeds)["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert float(np.abs(got - want).max()) <= TOLERANCE * float(np.abs(want).max())


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name, image, kernel, strides, pads, dilations, multiplier", CASES,
                         ids=[c[0] for c in CASES])
def test_depthwise_agrees_with_onnxruntime(name, image, kernel, strides, pads, dilations, multiplier, threads):
    check_case(image, kernel, strides, pads, dilations, multiplier, threads)


def test_avx2_code_agrees_too():
    """Every case on code compiled without AVX-512 (8 lanes, 16 registers), in a child process."""
    run_on_avx2(__file__, "for _, *case in t.CASES:\n"
                "    t.check_case(*case, 2)\n")
