"""The bundled zoo: model lookup, reference cases, and the ONNX-level transforms.

The transforms are checked on small hand-built models shaped like the light
models (IR 3, opset 9, ConstantOfShape weights fed by shape initializers listed
as graph inputs), with onnxruntime as the runtime that must accept them.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from glowsdk.compiler.backend import TensorInfo
from glowsdk.errors import GlowError
from glowsdk.frontend.onnx.importer import import_model
from glowsdk.graph.types import ElemKind, Type
from glowsdk.zoo import BUNDLED, bundled_path, is_bundled, random_inputs, randomize_weights, rebatch, \
    reference_case

FILL = 0.02


def _fill(graph_parts: dict, name: str, shape: list[int]) -> str:
    """A light-model style weight: ConstantOfShape(0.02) over an int64 shape initializer."""
    shape_name = f"{name}_shape"
    graph_parts["inits"].append(numpy_helper.from_array(np.array(shape, np.int64), shape_name))
    value = helper.make_tensor("value", TensorProto.FLOAT, [1], [FILL])
    graph_parts["nodes"].append(helper.make_node("ConstantOfShape", [shape_name], [name], value=value))
    return name


def _init(graph_parts: dict, name: str, array: np.ndarray) -> str:
    graph_parts["inits"].append(numpy_helper.from_array(array, name))
    return name


def mini_net(shared_shape: bool = False) -> onnx.ModelProto:
    """Relu -> Conv -> BN -> Unsqueeze/Mul scale -> Relu -> Reshape(1, -1) -> Gemm(transB) -> Add -> Softmax.

    A bias weight is also reshaped to (1, -1), with its own shape initializer
    unless `shared_shape`.
    """
    p: dict = {"nodes": [], "inits": []}
    node = helper.make_node
    w = _fill(p, "conv_w", [16, 3, 3, 3])
    b = _init(p, "conv_b", np.full(16, FILL, np.float32))
    bn = [_init(p, f"bn_{k}", np.full(16, FILL, np.float32)) for k in ("scale", "bias", "mean")]
    bn.append(_fill(p, "bn_var", [16]))
    scale = _fill(p, "sc_w", [16])
    fc_w = _fill(p, "fc_w", [10, 16 * 6 * 6])
    fc_b = _fill(p, "fc_b", [10])
    half_bias = _init(p, "half_bias", np.full(10, FILL, np.float16))
    row_bias = _fill(p, "row_bias", [10])
    flat = _init(p, "flat_shape", np.array([1, -1], np.int64))
    row = flat if shared_shape else _init(p, "row_shape", np.array([1, -1], np.int64))
    p["nodes"] += [
        node("Relu", ["x"], ["x_relu"]),
        node("Conv", ["x_relu", w, b], ["c"], pads=[1, 1, 1, 1]),
        node("BatchNormalization", ["c", *bn], ["n"]),
        node("Unsqueeze", [scale], ["sc"], axes=[1, 2]),
        node("Mul", ["n", "sc"], ["m"]),
        node("Relu", ["m"], ["r"]),
        node("Reshape", ["r", flat], ["f"]),
        node("Gemm", ["f", fc_w, fc_b], ["g"], transB=1),
        node("Cast", [half_bias], ["hb"], to=TensorProto.FLOAT),
        node("Add", ["g", "hb"], ["g2"]),
        node("Reshape", [row_bias, row], ["rb"]),  # a weight-path Reshape starting with 1: not a batch
        node("Add", ["g2", "rb"], ["g3"]),
        node("Softmax", ["g3"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])
    inits = p["inits"]
    listed = [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits]
    graph = helper.make_graph(p["nodes"], "mini", [x, *listed], [y], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 3
    onnx.checker.check_model(model)
    return model


def _weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def _run_ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


FLOAT_WEIGHTS = {"conv_w", "conv_b", "bn_scale", "bn_bias", "bn_mean", "bn_var", "sc_w", "fc_w", "fc_b",
                 "half_bias", "row_bias"}


def test_randomize_weights_replaces_every_fill_by_an_initializer():
    model = mini_net()
    result = randomize_weights(model, seed=0)
    onnx.checker.check_model(result)
    assert not [n for n in result.graph.node if n.op_type == "ConstantOfShape"]
    weights = _weights(result)
    assert set(weights) == FLOAT_WEIGHTS | {"flat_shape", "row_shape"}
    assert {v.name for v in result.graph.input} == {"x"} | set(weights)  # IR 3: initializers listed
    assert weights["half_bias"].dtype == np.float16
    assert all(weights[n].dtype == np.float32 for n in FLOAT_WEIGHTS - {"half_bias"})
    assert weights["conv_w"].shape == (16, 3, 3, 3) and weights["fc_w"].shape == (10, 576)
    np.testing.assert_array_equal(weights["flat_shape"], [1, -1])
    np.testing.assert_array_equal(weights["row_shape"], [1, -1])
    for name in FLOAT_WEIGHTS:
        assert not np.any(weights[name] == np.float32(FILL).astype(weights[name].dtype)), name
    assert len(model.graph.node) == 13 + 6, "the input model is left alone"


def test_randomize_weights_is_deterministic_per_seed():
    model = mini_net()
    first, again, other = (_weights(randomize_weights(model, s)) for s in (0, 0, 1))
    for name in FLOAT_WEIGHTS:
        np.testing.assert_array_equal(first[name], again[name])
        assert not np.array_equal(first[name], other[name]), name


def test_randomize_weights_draws_by_role():
    weights = _weights(randomize_weights(mini_net(), seed=3))
    # Both after a Relu, so He normal: Conv over fan-in 3*3*3, Gemm with transB over K = 576.
    assert weights["conv_w"].std() == pytest.approx(np.sqrt(2 / 27), rel=0.1)
    assert weights["fc_w"].std() == pytest.approx(np.sqrt(2 / 576), rel=0.1)
    assert np.all(weights["bn_var"] >= 0.5) and np.all(weights["bn_var"] <= 1.5)
    assert np.all(weights["bn_scale"] > 0.5) and np.all(weights["bn_scale"] < 1.5)
    assert np.all(np.abs(weights["sc_w"] - 1) <= 0.2)
    for bias in ("conv_b", "fc_b", "half_bias"):
        assert np.abs(weights[bias].astype(np.float32)).max() < 0.1, bias


def test_a_residual_branch_scale_is_divided_by_the_branch_count():
    p: dict = {"nodes": [], "inits": []}
    bn = [_fill(p, f"bn_{k}", [4]) for k in ("scale", "bias", "mean", "var")]
    p["nodes"] += [helper.make_node("BatchNormalization", ["x", *bn], ["n"]),
                   helper.make_node("Sum", ["n", "x"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 2, 2])
    graph = helper.make_graph(p["nodes"], "residual", [x], [y], initializer=p["inits"])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    scale = _weights(randomize_weights(model, seed=0))["bn_scale"]
    assert np.all(scale >= 0.55 / 2) and np.all(scale <= 1.3 / 2)


def test_randomized_model_gives_a_peaked_softmax():
    x = np.random.default_rng(0).standard_normal((1, 3, 6, 6)).astype(np.float32)
    constant = _run_ort(mini_net(), x)
    randomized = _run_ort(randomize_weights(mini_net(), seed=0), x)
    assert np.ptp(constant) < 1e-6, "the constant fills score every class the same"
    assert np.all(np.isfinite(randomized)) and randomized.max() > 3 * randomized.min()


def test_rebatch_matches_stacked_single_runs():
    model = randomize_weights(mini_net(), seed=0)
    batched = rebatch(model, 4)
    onnx.checker.check_model(batched)
    dims = [d.dim_value for d in batched.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [4, 3, 6, 6]
    assert [d.dim_value for d in batched.graph.output[0].type.tensor_type.shape.dim] == [4, 10]
    np.testing.assert_array_equal(_weights(batched)["flat_shape"], [4, -1])
    np.testing.assert_array_equal(_weights(batched)["row_shape"], [1, -1])  # a weight, not a batch
    x = np.random.default_rng(1).standard_normal((4, 3, 6, 6)).astype(np.float32)
    stacked = np.concatenate([_run_ort(model, x[i:i + 1]) for i in range(4)])
    np.testing.assert_allclose(_run_ort(batched, x), stacked, rtol=1e-5, atol=1e-7)


def test_rebatch_refuses_a_shape_shared_with_a_weight_path():
    model = randomize_weights(mini_net(shared_shape=True), seed=0)
    with pytest.raises(GlowError, match="flat_shape.*also read"):
        rebatch(model, 2)  # flat_shape reshapes both the features and the row_bias weight


def test_rebatch_rejects_a_bad_batch():
    for bad in (0, -1, 2.0, True):
        with pytest.raises(GlowError, match="positive integer"):
            rebatch(mini_net(), bad)


def test_random_inputs_from_a_module_and_from_infos():
    module = import_model(mini_net())
    feeds = random_inputs(module, seed=5)
    assert list(feeds) == ["x"] and feeds["x"].dtype == np.float32 and feeds["x"].shape == (1, 3, 6, 6)
    np.testing.assert_array_equal(feeds["x"], random_inputs(module, seed=5)["x"])
    assert not np.array_equal(feeds["x"], random_inputs(module, seed=6)["x"])
    infos = [TensorInfo("f", Type(ElemKind.FLOAT32, (2000,))), TensorInfo("i", Type(ElemKind.INT64, (50,))),
             TensorInfo("b", Type(ElemKind.BOOL, (50,))), TensorInfo("q", Type(ElemKind.QINT8, (50,), 0.1, 0))]
    values = random_inputs(infos, seed=0)
    assert abs(values["f"].mean()) < 0.1 and values["f"].std() == pytest.approx(1, rel=0.1)
    assert values["i"].dtype == np.int64 and values["i"].min() >= 0 and values["i"].max() < 10
    assert values["b"].dtype == np.bool_ and values["q"].dtype == np.int8


def test_bundled_names_and_paths():
    assert len(BUNDLED) == 9 and is_bundled("resnet50") and not is_bundled("resnet18")
    for name in BUNDLED:
        assert bundled_path(name).is_file()
    with pytest.raises(GlowError, match="unknown bundled model 'resnet18'.*squeezenet"):
        bundled_path("resnet18")


def test_reference_case_rebuilds_the_runner_input():
    case = reference_case("squeezenet")
    (name, x), = case.inputs.items()
    assert name == "data_0" and x.shape == (1, 3, 224, 224) and x.dtype == np.float32
    assert x.flat[0] == 0 and x.flat[-1] == pytest.approx(1 - 1 / x.size)
    (out, y), = case.outputs.items()
    assert out == "softmaxout_1" and y.shape == (1, 1000, 1, 1)
    assert (case.rtol, case.atol) == (1e-3, 1e-7)
    assert reference_case("densenet121").rtol == 2e-3
