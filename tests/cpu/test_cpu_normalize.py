"""LayerNorm and Softmax kept whole by the CPU backend, one kernel each (kernels/normalize.py).

The oracle is onnxruntime on the same ONNX model: LayerNormalization (opset 17) over
one and over two trailing dims, with and without bias, rows that are not whole
vectors, its Mean and InvStdDev outputs; Softmax over the last axis with large
magnitudes and -inf entries (an attention mask), and over the flattened trailing
dims of opset 11. A Softmax over a middle axis (channels of NCHW) and a float16
LayerNorm are lowered as before. One and two threads; AVX-512 here and AVX2 in a
child process. Tolerance: the sums run in another order than onnxruntime's
(rtol 1e-5, atol 1e-6 of the largest magnitude).
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from cpu_util import run_on_avx2
from onnx import helper, numpy_helper

import glowsdk


def _model(node, shape, outputs, opset, inits=(), elem=onnx.TensorProto.FLOAT):
    graph = helper.make_graph([node], "normalize", [helper.make_tensor_value_info("x", elem, list(shape))],
                              [helper.make_tensor_value_info(name, elem, None) for name in outputs], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _against_onnxruntime(model, x, threads=1):
    """Every output against onnxruntime's; the kinds of the cpu steps."""
    import onnxruntime as ort

    compiled = glowsdk.compile(glowsdk.load(model), "cpu", cache=False, threads=threads)
    got = compiled.run({"x": x})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for output, want in zip(session.get_outputs(), session.run(None, {"x": x})):
        finite = np.abs(want[np.isfinite(want)])
        np.testing.assert_allclose(got[output.name], want, rtol=1e-5, atol=1e-6 * float(finite.max(initial=1.0)))
    return ["+".join(i.kind for i in step.instrs) for step in compiled.compiled.steps]


def _layer_norm(shape, axis, bias=True, stats=False, seed=0):
    rng = np.random.default_rng(seed)
    normalised = shape[axis:]
    inits = [numpy_helper.from_array(rng.standard_normal(normalised).astype(np.float32), "scale")]
    inputs = ["x", "scale"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(normalised).astype(np.float32), "bias"))
        inputs.append("bias")
    outputs = ["y", "mean", "inv_std"] if stats else ["y"]
    node = helper.make_node("LayerNormalization", inputs, outputs, axis=axis, epsilon=1e-5)
    x = (3 * rng.standard_normal(shape) + 1).astype(np.float32)
    return _model(node, shape, outputs, 17, inits), x


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape, axis, bias", [((1, 7, 7, 96), 3, True), ((2, 37), 1, True),
                                               ((3, 5, 24), 1, False), ((1, 197, 192), 2, True)])
def test_layer_norm_is_one_kernel(shape, axis, bias, threads):
    steps = _against_onnxruntime(*_layer_norm(shape, axis, bias), threads=threads)
    assert steps == ["LayerNorm"], steps


def test_layer_norm_mean_and_inv_std_dev():
    steps = _against_onnxruntime(*_layer_norm((4, 6, 40), 2, stats=True))
    assert steps == ["LayerNorm"], steps


def _softmax(shape, axis, opset=13, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    x = (scale * rng.standard_normal(shape)).astype(np.float32)
    return _model(helper.make_node("Softmax", ["x"], ["y"], axis=axis), shape, ["y"], opset), x


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape, scale", [((1, 3, 197, 197), 1.0), ((2, 4, 33), 100.0), ((5, 16), 1.0)])
def test_softmax_over_the_last_axis_is_one_kernel(shape, scale, threads):
    steps = _against_onnxruntime(*_softmax(shape, -1, scale=scale), threads=threads)
    assert steps == ["Softmax"], steps


def test_softmax_with_masked_entries():
    """-inf entries (an attention mask) get probability 0; the rest sum to 1."""
    model, x = _softmax((2, 8, 21), -1)
    x[:, :, 5:9] = -np.inf
    assert _against_onnxruntime(model, x) == ["Softmax"]


def test_softmax_over_flattened_trailing_dims():
    """Opset 11 normalises the dims from `axis` on jointly: rows of 3 x 19."""
    assert _against_onnxruntime(*_softmax((2, 3, 19), 1, opset=11)) == ["Softmax"]


def test_softmax_over_a_middle_axis_is_lowered():
    steps = _against_onnxruntime(*_softmax((1, 6, 5, 5), 1))
    assert "Softmax" not in steps and any("Exp" in kinds for kinds in steps), steps


def test_float16_layer_norm_is_lowered():
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(16).astype(np.float16), name) for name in ("scale", "bias")]
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=-1)
    model = _model(node, (3, 16), ["y"], 17, inits, elem=onnx.TensorProto.FLOAT16)
    compiled = glowsdk.compile(glowsdk.load(model), "cpu", cache=False)
    assert "LayerNorm" not in [step.instrs[0].kind for step in compiled.compiled.steps]


def test_avx2_code_agrees():
    """The same kernels compiled without AVX-512 (8 lanes: other whole vectors and tails), in a child process."""
    run_on_avx2(__file__, "for shape, axis, bias in [((1, 7, 7, 96), 3, True), ((2, 37), 1, True),\n"
                "                             ((3, 5, 24), 1, False)]:\n"
                "    assert t._against_onnxruntime(*t._layer_norm(shape, axis, bias), threads=2) == ['LayerNorm']\n"
                "t.test_layer_norm_mean_and_inv_std_dev()\n"
                "for shape in [(1, 3, 197, 197), (2, 4, 33), (5, 16)]:\n"
                "    assert t._against_onnxruntime(*t._softmax(shape, -1), threads=2) == ['Softmax']\n"
                "t.test_softmax_with_masked_entries()\n")
