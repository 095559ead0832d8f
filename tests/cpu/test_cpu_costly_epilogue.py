"""A polynomial epilogue (a SiLU's exp) in every convolution kernel that takes one, against onnxruntime.

Each kernel applies a costly epilogue through one subroutine of its own (epilogue.py's `_outlined`),
called over the rows each tile variant, row block or second phase has just stored, so the exp
polynomial is in the module twice per kernel (whole vectors, a masked rest), and in a GEMM once per
vector of its full tile, however many variants the kernel has. The cases
cover each path that stores through an epilogue: the depthwise rows (column stride 1 and 2; the
epilogue over each block of rows, or over all planes where a block is short), the
depthwise phase planes (stride 3), Winograd's output transform, the second phase of a GEMM
shared by depth (1 to 3 threads), and the GEMM's tiles (an edge row tile and a masked column
tail), each also with 2 or 3 images, grouped, and with 2 filters per depthwise channel. The epilogue also adds a residual read at each element's position (a masked tail reads
only its lanes). The AVX2 code (8 lanes) is compiled in a child process.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from cpu_util import residual_model, run_on_avx2
from onnx import helper, numpy_helper

import glowsdk
from glowsdk.backends.cpu.kernels.conv import conv_strategy
from glowsdk.backends.cpu.kernels.gemm import TILE_SHAPES

TOLERANCE = {"winograd": 1e-4}
"""Largest difference allowed, relative to the largest output magnitude: 1e-5, but for Winograd's
transforms' roundings (as tests/cpu/test_cpu_winograd.py allows)."""

CASES = [  # name, input shape, filters, group, kernel, stride, pads, threads, expected strategy
    ("depthwise-rows", (1, 16, 13, 13), 16, 16, 3, 1, 1, 1, "depthwise"),
    ("depthwise-row-blocks", (1, 8, 21, 21), 8, 8, 3, 1, 1, 2, "depthwise"),
    ("depthwise-rows-stride-2", (1, 24, 19, 19), 24, 24, 5, 2, 2, 2, "depthwise"),
    ("depthwise-phase-planes", (1, 8, 17, 17), 8, 8, 3, 3, 1, 1, "depthwise"),
    ("winograd", (1, 16, 28, 28), 24, 1, 3, 1, 1, 2, "winograd"),
    ("split-depth-1", (1, 192, 10, 10), 45, 1, 1, 1, 0, 1, "pointwise"),
    ("split-depth-2", (1, 192, 10, 10), 45, 1, 1, 1, 0, 2, "pointwise"),
    ("split-depth-3", (1, 192, 10, 10), 45, 1, 1, 1, 0, 3, "pointwise"),
    ("im2col-edges", (1, 13, 11, 11), 13, 1, 3, 1, 1, 1, "im2col"),
    # more than one image (the epilogue shifted to each image's C), a grouped convolution and a
    # depthwise one with two filters per channel
    ("depthwise-2-images", (2, 16, 13, 13), 16, 16, 3, 1, 1, 2, "depthwise"),
    ("depthwise-multiplier-2", (1, 8, 15, 15), 16, 8, 3, 1, 1, 2, "depthwise"),
    ("im2col-2-images", (2, 13, 11, 11), 13, 1, 3, 1, 1, 2, "im2col"),
    ("grouped-2", (1, 16, 12, 12), 24, 2, 3, 1, 1, 2, "im2col"),
    ("pointwise-3-images", (3, 40, 9, 9), 20, 1, 1, 1, 0, 2, "pointwise"),
    ("split-depth-2-images", (2, 192, 10, 10), 45, 1, 1, 1, 0, 2, "pointwise"),
]


def silu_model(image, filters, group, kernel, stride, pads, seed=0):
    """Conv + bias -> Add of a second input -> SiLU (x * Sigmoid x) -> Tanh (a consumer, so the Add
    and the SiLU work in place on the convolution's result)."""
    rng = np.random.default_rng(seed)
    size = [(image[d] + 2 * pads - kernel) // stride + 1 for d in (2, 3)]
    out = [image[0], filters, *size]
    weights = [numpy_helper.from_array((rng.standard_normal((filters, image[1] // group, kernel, kernel)) / 4)
                                       .astype(np.float32), "w"),
               numpy_helper.from_array(rng.standard_normal(filters).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[kernel, kernel], strides=[stride] * 2,
                              pads=[pads] * 4, group=group),
             helper.make_node("Add", ["c", "r"], ["s"]), helper.make_node("Sigmoid", ["s"], ["g"]),
             helper.make_node("Mul", ["s", "g"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])]
    return residual_model("silu", nodes, image, out, weights, rng)


def check_case(image, filters, group, kernel, stride, pads, threads, strategy):
    """The convolution takes `strategy` with the SiLU in its store, its exp in the subroutine alone, and
    its output on cpu is within TOLERANCE of onnxruntime's."""
    model, feeds = silu_model(image, filters, group, kernel, stride, pads)
    compiled = glowsdk.compile(glowsdk.load(model), "cpu", threads=threads, split_min_us=0, cache=False)
    steps = compiled.compiled.steps
    (conv,) = [step for step in steps if step.instrs[0].kind == "Conv"]
    if strategy == "winograd":  # its filter, transformed and packed, has left the instruction
        assert any(name.endswith(".winograd") for name in compiled.compiled.program.ir.weights)
    else:
        assert conv_strategy(conv.instrs[0]) == strategy
    assert [i.kind for i in conv.epilogue] == ["Add", "Mul", "Exp", "Add", "Div", "Mul"]
    # exp's declaration, its two calls in the subroutine (whole vectors, then the masked rest), and in a
    # GEMM one per vector of the full tile (the common variant keeps its epilogue inline, gemm.micro_kernel)
    widest = max(vectors for shapes in TILE_SHAPES.values() for _, vectors in shapes)
    inline = 0 if strategy in ("depthwise", "winograd") else widest
    assert compiled.compiled.llvm_ir.count("llvm.roundeven.v") <= 3 + inline
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    for _ in range(2):
        got = compiled.run(feeds)["y"]
        assert float(np.abs(got - want).max()) <= TOLERANCE.get(strategy, 1e-5) * float(np.abs(want).max())


@pytest.mark.parametrize("name, image, filters, group, kernel, stride, pads, threads, strategy", CASES,
                         ids=[c[0] for c in CASES])
def test_costly_epilogue_agrees_with_onnxruntime(name, image, filters, group, kernel, stride, pads, threads,
                                                  strategy):
    check_case(image, filters, group, kernel, stride, pads, threads, strategy)


def test_avx2_code_agrees_too():
    """Every case on code compiled without AVX-512 (8 lanes, 16 registers), in a child process."""
    run_on_avx2(__file__, "for _, *case in t.CASES:\n"
                "    t.check_case(*case)\n")
