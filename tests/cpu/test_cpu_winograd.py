"""Winograd convolutions (kernels/winograd.py) against onnxruntime, on AVX-512 and AVX2 code.

onnxruntime computes these convolutions directly (MLAS has no Winograd path), so it
is an oracle we did not write for the transforms, the tiling of odd and padded
planes, the blocks threads share and the stacked residual Add + ReLU. The AVX2
code (8 lanes, 16 registers) is compiled in a child process (GLOWSDK_CPU_ISA is
read once per process).
"""
from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
from cpu_util import residual_model, run_on_avx2
from onnx import helper, numpy_helper

import glowsdk
from glowsdk.backends.cpu.kernels.winograd import TRANSFORMS

TOLERANCE = 1e-4
"""Largest difference allowed, relative to the largest output magnitude: float32 F(4 x 4) rounds
its transforms (entries up to 8 in A^T, 5 in B^T) on top of the accumulation order."""

CASES = [  # name, input shape, filters, pads (top, left, bottom, right), bias, tile size expected
    ("f4-same", (1, 16, 28, 28), 24, (1, 1, 1, 1), True, 4),
    ("f4-odd-plane-padded-unevenly", (1, 20, 30, 33), 17, (0, 1, 2, 0), False, 4),
    ("f2-batch", (2, 16, 14, 14), 16, (1, 1, 1, 1), True, 2),
    ("f2-valid", (1, 32, 18, 20), 40, (0, 0, 0, 0), True, 2),
]


def conv_model(image, filters, pads, bias, seed=0):
    """Conv (3x3, stride 1) -> Add of a second input -> Relu -> Tanh (a consumer, so the Add and
    Relu work in place on the Conv's result), seeded weights and inputs."""
    rng = np.random.default_rng(seed)
    channels = image[1]
    out = (image[0], filters, image[2] + pads[0] + pads[2] - 2, image[3] + pads[1] + pads[3] - 2)
    weights = [numpy_helper.from_array((rng.standard_normal((filters, channels, 3, 3)) /
                                        math.sqrt(9 * channels)).astype(np.float32), "w")]
    if bias:
        weights.append(numpy_helper.from_array(rng.standard_normal(filters).astype(np.float32), "b"))
    nodes = [helper.make_node("Conv", ["x", "w", *(["b"] if bias else [])], ["c"], kernel_shape=[3, 3],
                              pads=list(pads)),
             helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Relu", ["s"], ["t"]),
             helper.make_node("Tanh", ["t"], ["y"])]
    return residual_model("winograd", nodes, image, out, weights, rng)


def check_case(image, filters, pads, bias, m, threads):
    """The case's output on cpu within TOLERANCE of onnxruntime's, its filter transformed for tile
    size m (the (m + 2)^2 positions of U, each [filters padded to a row tile, channels])."""
    model, feeds = conv_model(image, filters, pads, bias)
    compiled = glowsdk.compile(glowsdk.load(model), "cpu", threads=threads, split_min_us=0, cache=False)
    weights = compiled.compiled.program.ir.weights
    (packed,) = [w for name, w in weights.items() if name.endswith(".winograd")]
    rows, rest = divmod(packed.type.size, (m + 2) ** 2 * image[1])
    assert rest == 0 and filters <= rows < filters + 8
    kinds = [(step.instrs[0].kind, [i.kind for i in step.epilogue or ()]) for step in compiled.compiled.steps]
    assert ("Conv", ["Add", "Max"]) in kinds
    got = compiled.run(feeds)["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert float(np.abs(got - want).max()) <= TOLERANCE * float(np.abs(want).max())


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name, image, filters, pads, bias, m", CASES, ids=[c[0] for c in CASES])
def test_winograd_agrees_with_onnxruntime(name, image, filters, pads, bias, m, threads):
    check_case(image, filters, pads, bias, m, threads)


def test_avx2_code_agrees_too():
    """Every case on code compiled without AVX-512 (8 lanes, 16 registers), in a child process."""
    run_on_avx2(__file__, "for _, image, filters, pads, bias, m in t.CASES:\n"
                "    t.check_case(image, filters, pads, bias, m, 2)\n")


@pytest.mark.parametrize("m", sorted(TRANSFORMS))
def test_transforms_compute_a_3_tap_correlation(m):
    b_t, g, a_t = TRANSFORMS[m]
    rng = np.random.default_rng(m)
    d, w = rng.standard_normal((m + 2, m + 2)), rng.standard_normal((3, 3))
    got = a_t @ ((g @ w @ g.T) * (b_t @ d @ b_t.T)) @ a_t.T
    want = [[float((w * d[i:i + 3, j:j + 3]).sum()) for j in range(m)] for i in range(m)]
    assert np.allclose(got, want, atol=1e-12)
