"""1x1 convolutions whose GEMM threads share by depth (kernels/split_depth.py) against onnxruntime,
on AVX-512 and AVX2 code.

Each case is a projection (more input channels than filters) of a small map, so on both ISAs
threads would share its row tiles, too few to pay for each reading the whole input: its GEMM
is shared by depth. The cases cover an edge row tile and an edge column tile (10 x 10, 9 x 9,
7 x 9 outputs; 45 and 29 filters; 3.7 to 10 input channels per filter), a filter packed at compile time or computed at run time (read
row-major), on 1 thread (the plain GEMM), 2 (one part each) and 3
(a thread's units straddle the two parts), with a residual Add and a Clip in the second phase's
store. The AVX2 code (8 lanes) is compiled in a child process (GLOWSDK_CPU_ISA is read once per
process).
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cpu_util import residual_model, run_on_avx2
from onnx import helper, numpy_helper

import glowsdk
from glowsdk.backends.cpu.kernels.gemm import Gemm
from glowsdk.backends.cpu.kernels.split_depth import splits_depth

TOLERANCE = 1e-5
"""Largest difference allowed, relative to the largest output magnitude (at most 300 products a sum)."""

CASES = [  # name, input shape (N, C, H, W), filters, filter computed at run time
    ("10x10-45", (1, 192, 10, 10), 45, False),
    ("10x10-45-shallow", (1, 168, 10, 10), 45, False),
    ("9x9-45", (1, 256, 9, 9), 45, False),
    ("7x9-29", (1, 300, 7, 9), 29, False),
    ("9x9-45-run-time-filter", (1, 256, 9, 9), 45, True),
]


def projection_model(image, filters, computed, seed=0):
    """1x1 Conv + bias -> Add of a second input -> Clip(0, 6) -> Tanh (a consumer, so the Add and
    the Clip work in place on the convolution's result); with `computed`, the filter is a constant
    times a third input "s" (one element), so the kernel reads it row-major instead of packed."""
    rng = np.random.default_rng(seed)
    out = [image[0], filters, image[2], image[3]]
    weights = [numpy_helper.from_array(rng.standard_normal((filters, image[1], 1, 1)).astype(np.float32), "w"),
               numpy_helper.from_array(rng.standard_normal(filters).astype(np.float32), "b"),
               numpy_helper.from_array(np.array(0.0, np.float32), "low"),
               numpy_helper.from_array(np.array(6.0, np.float32), "high")]
    nodes = [helper.make_node("Conv", ["x", "ws" if computed else "w", "b"], ["c"], kernel_shape=[1, 1]),
             helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Clip", ["s", "low", "high"], ["t"]),
             helper.make_node("Tanh", ["t"], ["y"])]
    if computed:
        nodes.insert(0, helper.make_node("Mul", ["w", "scale"], ["ws"]))
    model, feeds = residual_model("projection", nodes, image, out, weights, rng)
    if computed:
        model.graph.input.append(helper.make_tensor_value_info("scale", onnx.TensorProto.FLOAT, [1]))
        feeds["scale"] = np.array([0.7], np.float32)
    return model, feeds


def check_case(image, filters, computed, threads):
    """The case's GEMM is one shared by depth on this host's tiles, and its output on cpu is within
    TOLERANCE of onnxruntime's, the Add and Clip in the convolution's store."""
    assert splits_depth(Gemm(filters, image[2] * image[3], image[1]), 1)
    model, feeds = projection_model(image, filters, computed)
    compiled = glowsdk.compile(glowsdk.load(model), "cpu", threads=threads, split_min_us=0, cache=False)
    kinds = [(step.instrs[0].kind, [i.kind for i in step.epilogue or ()]) for step in compiled.compiled.steps]
    assert ("Conv", ["Add", "Max", "Min"]) in kinds
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    for _ in range(3):  # runs after the first start from the last run's partial products in scratch
        got = compiled.run(feeds)["y"]
        assert float(np.abs(got - want).max()) <= TOLERANCE * float(np.abs(want).max())


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("name, image, filters, computed", CASES, ids=[c[0] for c in CASES])
def test_split_depth_agrees_with_onnxruntime(name, image, filters, computed, threads):
    check_case(image, filters, computed, threads)


def test_avx2_code_agrees_too():
    """Every case on code compiled without AVX-512 (8 lanes, 16 registers), in a child process, on 2
    and 3 threads."""
    run_on_avx2(__file__, "for _, *case in t.CASES:\n"
                "    for threads in (2, 3):\n"
                "        t.check_case(*case, threads)\n")
