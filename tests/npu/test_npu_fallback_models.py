"""The four PyTorch-exported models on the NPU with the host as fallback, and what makes that work.

Each model is quantized with a random profile and compiled for the NPU with the default fallback (the
cpu); the parts run end to end and give the reference evaluator's bytes on the same quantized graph.
Around them: an int8 Softmax the cost model returns to the host is lowered onto integer primitives
(bit-exact with its integer semantics), a constant holding -inf or NaN keeps its node float, and the
NPU names the device limit that keeps a node off it.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import glowsdk
from glowsdk.backends.npu.backend import NpuFunction
from glowsdk.backends.npu.tensors import DramTensor
from glowsdk.backends.registry import get_backend
from glowsdk.compiler.lowering.driver import lower_function
from glowsdk.compiler.pipeline import compile_function
from glowsdk.errors import UnsupportedOpsError
from glowsdk.graph.function import Module
from glowsdk.graph.nodes import nn
from glowsdk.graph.types import ElemKind, Type
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile
from glowsdk.quantization.convert import NON_FINITE
from glowsdk.reference.evaluator import evaluate
from sim.binding import run_binary

from npu_nets import NetBuilder

# tests/exported_models.py sits one folder up, which pytest puts on the path only for the tests there
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from exported_models import ENCODER_LAYER, EXPORTED_MODELS, exported_model, model_inputs  # noqa: E402


def _quantization(network) -> QuantizationConfig:
    # random integer inputs lie in [0, 10): valid token ids for the transformer's vocabulary of 100
    return QuantizationConfig(collect_profile(network, calibration_random(network, 4)))


@pytest.mark.parametrize("name", EXPORTED_MODELS)
def test_exported_model_runs_on_the_npu_with_fallback_bit_exact(name):
    network = glowsdk.load(exported_model(name))
    compiled = glowsdk.compile(network, "npu", quantization=_quantization(network))
    feeds = model_inputs(name, seed=1)
    want = evaluate(compiled.compiled.function, feeds)  # the reference evaluator on the same quantized graph
    got = compiled.run(feeds)
    assert want.keys() == got.keys()
    for output, value in want.items():
        np.testing.assert_array_equal(got[output], value)
    _every_binary_race_free(compiled.compiled)


def _every_binary_race_free(compiled) -> None:
    """Each NPU partition's binary, or the one binary of a model the NPU runs whole, once under checked simulation
    (a race raises)."""
    binaries = [compiled] if isinstance(compiled, NpuFunction) else [p.compiled for p in compiled.device_partitions()]
    for binary in binaries:
        run = run_binary(binary.binary, binary.config, {}, checked=True)
        assert run.result.checked


def test_a_transformer_encoder_layer_runs_in_at_most_three_npu_partitions():
    network = glowsdk.load(exported_model(ENCODER_LAYER))
    compiled = glowsdk.compile(network, "npu", quantization=_quantization(network))
    if hasattr(compiled.compiled, "partitions"):
        npu_parts = [p for p in compiled.compiled.partitions if p.backend == "npu"]
        assert 1 <= len(npu_parts) <= 3, compiled.compiled.describe()
        assert compiled.compiled.target_macs >= 0.8 * compiled.compiled.total_macs
    # else: since issue 23 (activation products, Gather, integer LayerNorm) the NPU runs the whole layer
    feeds = model_inputs(ENCODER_LAYER, seed=1)
    want = evaluate(compiled.compiled.function, feeds)
    np.testing.assert_array_equal(compiled.run(feeds)["logits"], want["logits"])
    _every_binary_race_free(compiled.compiled)


def _int8_softmax(shape: tuple[int, ...], axes: tuple[int, ...]):
    module = Module()
    fn = module.create_function("main")
    x = module.create_placeholder("x", Type(ElemKind.QINT8, shape, 0.0135717, 7)).result()
    fn.save(fn.add(nn.Softmax, x, axes=axes), "y")
    return fn


@pytest.mark.parametrize("shape,axes", [((1, 4, 16, 16), (3,)), ((2, 3, 5), (1, 2)), ((6, 300), (1,))])
def test_an_int8_softmax_lowers_for_the_host_onto_integer_primitives(shape, axes):
    fn = _int8_softmax(shape, axes)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.integers(-128, 128, shape).astype(np.int8)}
    feeds["x"].flat[:3] = (127, -128, 127)  # ties for the maximum, differences past the table's 255 steps
    want = evaluate(fn, feeds)["y"]
    lowered = fn.module.clone().functions["main"]
    lower_function(lowered, get_backend("cpu"))
    kinds = {n.kind for n in lowered.nodes}
    assert "Softmax" not in kinds and "Exp" not in kinds  # integers throughout: no float exponential
    assert not any(n.kind == "Cast" and n.type.elem.is_quantized for n in lowered.nodes)
    np.testing.assert_array_equal(evaluate(lowered, feeds)["y"], want)
    np.testing.assert_array_equal(compile_function(fn, get_backend("cpu")).execute(feeds)["y"], want)


def test_the_transformer_softmax_on_the_host_stays_int8():
    network = glowsdk.load(exported_model("transformer_encoder"))
    compiled = glowsdk.compile(network, "npu", quantization=_quantization(network))
    softmaxes = [n for n in compiled.compiled.function.nodes if n.kind == "Softmax"]
    assert len(softmaxes) == 2 and all(n.type.elem is ElemKind.QINT8 for n in softmaxes)


def _masked_attention(fill: float):
    """Scores + a causal mask (`fill` above the diagonal), Softmax, a projection."""
    b = NetBuilder((1, 4, 16, 16))
    b.weights.append(numpy_helper.from_array(np.triu(np.full((16, 16), fill, np.float32), 1), "mask"))
    probabilities = b.node("Softmax", [b.node("Add", ["x", "mask"])], axis=-1)
    return b.network(b.node("MatMul", [probabilities, b.weight((16, 8))]))


def test_a_constant_holding_nan_keeps_its_node_float():
    network = _masked_attention(np.nan)
    compiled = glowsdk.compile(network, "npu", quantization=_quantization(network))
    report = compiled.compiled.quantization_report
    assert report.kept[NON_FINITE]["Add"] == 1
    assert all(n.type.elem is ElemKind.FLOAT32 for n in compiled.compiled.function.nodes if n.kind == "Add")
    feeds = network.random_inputs(seed=1)
    want = evaluate(compiled.compiled.function, feeds)
    for output, value in compiled.run(feeds).items():
        np.testing.assert_allclose(value, want[output], rtol=1e-5, atol=1e-6, equal_nan=True)


def test_a_minus_infinity_mask_is_int8_saturated_minimum():
    """A causal mask of 0 and -inf is int8 (issue 23): Min with 127 / -128, and a masked Softmax."""
    network = _masked_attention(-np.inf)
    compiled = glowsdk.compile(network, "npu", quantization=_quantization(network))
    nodes = compiled.compiled.function.nodes
    assert "Add" not in {n.kind for n in nodes if any(t.elem is ElemKind.FLOAT32 for t in n.types)}
    assert any(n.kind == "Softmax" and n.masked for n in nodes)
    feeds = network.random_inputs(seed=1)
    want = evaluate(compiled.compiled.function, feeds)
    for output, value in compiled.run(feeds).items():
        np.testing.assert_array_equal(value, want[output])


def _conv1d(kernel: int, stride: int):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 1, kernel)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], strides=[stride], name="stem")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 1, 1600))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return glowsdk.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))


def test_the_refusal_names_the_device_limit_and_the_model_node():
    network = _conv1d(300, 256)
    with pytest.raises(UnsupportedOpsError, match=r"Conv 'stem': .*kernel 300 > 255, stride 256 > 255 on npu"):
        glowsdk.compile(network, "npu", quantization=_quantization(network), fallback=None)


def test_unsupported_reason_without_an_origin_names_the_node_and_none_within_the_limits():
    npu = get_backend("npu")
    fn = _int8_softmax((2, 3, 5), (1,))  # a middle axis: the groups are not dense rows
    softmax = next(n for n in fn.nodes if n.kind == "Softmax")
    assert npu.unsupported_reason(softmax) == \
        f"Softmax '{softmax.name}': axes [1] are not the trailing dims of [2, 3, 5] on npu"
    assert not npu.is_op_supported(softmax)
    assert npu.unsupported_reason(next(n for n in _int8_softmax((2, 3, 5), (2,)).nodes if n.kind == "Softmax")) \
        is None


def test_a_softmax_group_the_configuration_cannot_hold_is_not_claimed():
    npu = get_backend("npu")
    softmax = next(n for n in _int8_softmax((1, 20000), (1,)).nodes if n.kind == "Softmax")
    assert not npu.is_op_supported(softmax)
    assert "does not fit the 'default' configuration" in npu.unsupported_reason(softmax)


def test_flat_operands_whose_strides_differ_only_on_unit_dims_share_a_layout():
    # an NHWC 1x1x1x48 image and the same bytes row-major: the LSTM's gate Rescale met them
    nhwc = DramTensor("a", (1, 1, 1, 48), (48, 1, 48, 1), "activations", 0)
    dense = DramTensor("b", (1, 1, 1, 48), (48, 48, 48, 1), "activations", 64)
    assert nhwc.same_layout(dense)
    assert not nhwc.same_layout(DramTensor("c", (1, 1, 48, 1), (48, 48, 1, 1), "activations", 0))
