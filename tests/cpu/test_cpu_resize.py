"""Bilinear Resize of the last two dims kept whole by the CPU backend, one pass (kernels/resize.py).

Oracles: onnxruntime on the same ONNX model (within 1e-6 of the largest magnitude:
its own interpolation rounds differently) and the reference kernel, which the
kernel matches exactly (the same tables, the same roundings in the same order).
Upsampling and downsampling, several coordinate modes, one and two threads, AVX-512
here and AVX2 in a child process. Resizes the kernel does not take (nearest, cubic,
one axis only, a resized leading axis) are lowered as before.
"""
from __future__ import annotations

import numpy as np
import pytest
from cpu_util import run_on_avx2
from onnx import helper, numpy_helper

import glowsdk


def _model(shape, sizes, mode="linear", coordinates="half_pixel"):
    inits = [numpy_helper.from_array(np.array(sizes, np.int64), "sizes")]
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode=mode,
                            coordinate_transformation_mode=coordinates)
    graph = helper.make_graph([node], "resize", [helper.make_tensor_value_info("x", 1, list(shape))],
                              [helper.make_tensor_value_info("y", 1, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _check(shape, sizes, threads=1, seed=0, **attrs):
    """Outputs against onnxruntime and the reference kernel; the kinds of the cpu steps."""
    import onnxruntime as ort

    model = _model(shape, sizes, **attrs)
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    compiled = glowsdk.compile(glowsdk.load(model), "cpu", cache=False, threads=threads)
    got = compiled.run({"x": x})["y"]
    want = glowsdk.compile(glowsdk.load(model), "interpreter").run({"x": x})["y"]
    np.testing.assert_array_equal(got, want)
    peer = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, peer, rtol=0, atol=1e-6 * float(np.abs(peer).max()))
    return ["+".join(i.kind for i in step.instrs) for step in compiled.compiled.steps]


CASES = [((1, 21, 28, 28), (1, 21, 224, 224), "half_pixel"), ((2, 3, 5, 7), (2, 3, 10, 14), "pytorch_half_pixel"),
         ((1, 3, 5, 7), (1, 3, 9, 4), "align_corners"), ((1, 2, 16, 12), (1, 2, 5, 7), "asymmetric"),
         ((4, 6, 6), (4, 13, 11), "half_pixel")]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape, sizes, coordinates", CASES)
def test_bilinear_resize_is_one_kernel(shape, sizes, coordinates, threads):
    assert _check(shape, sizes, threads, coordinates=coordinates) == ["Resize"]


@pytest.mark.parametrize("shape, sizes, attrs", [
    ((1, 3, 5, 7), (1, 3, 10, 14), {"mode": "nearest"}), ((1, 3, 5, 7), (1, 3, 10, 14), {"mode": "cubic"}),
    ((1, 3, 5, 7), (1, 3, 5, 14), {}), ((4, 6, 6), (8, 13, 11), {})])
def test_other_resizes_are_lowered(shape, sizes, attrs):
    assert "Resize" not in _check(shape, sizes, **attrs)


def test_avx2_code_agrees():
    """The same kernel compiled without AVX-512, in a child process."""
    run_on_avx2(__file__, "for shape, sizes, coordinates in t.CASES:\n"
                "    assert t._check(shape, sizes, 2, coordinates=coordinates) == ['Resize']\n")
