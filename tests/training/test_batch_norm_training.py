"""BatchNorm in training mode: the forward pass and running statistics against onnx.reference
(training_mode=1), the composed gradient against finite differences, the running statistics
bound back by the trainer and frozen for inference (numpy and onnxruntime), and a short
training run of a small CNN with BatchNorm on interpreter and cpu."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from grad_util import check_against_finite_differences, check_lowered
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import glowsdk
from glowsdk.backends import get_backend
from glowsdk.compiler.pipeline import compile_function
from glowsdk.graph.function import Module
from glowsdk.graph.types import ElemKind, Type
from glowsdk.reference.evaluator import evaluate
from glowsdk.training import Batches, SGDConfig, Trainer, export_onnx
from glowsdk.training.batch_norm import batch_norm_training
from glowsdk.zoo.digits import load_digits_split


def _onnx_batch_norm(x, scale, bias, mean, var, epsilon: float, momentum: float) -> list[np.ndarray]:
    """Y, running_mean, running_var of ONNX BatchNormalization-15 with training_mode=1."""
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                            epsilon=epsilon, momentum=momentum, training_mode=1)
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "rm", "rv")]
    model = helper.make_model(helper.make_graph([node], "bn", [], outputs), opset_imports=[helper.make_opsetid("", 15)])
    return ReferenceEvaluator(model).run(None, {"x": x, "s": scale, "b": bias, "m": mean, "v": var})


@pytest.mark.parametrize("target", ["reference", "interpreter", "cpu"])
@pytest.mark.parametrize("shape", [(4, 3, 5, 2), (6, 3)])
def test_forward_and_running_statistics_match_onnx_training_mode(target, shape):
    rng = np.random.default_rng(1)
    channels = shape[1]
    feeds = {"x": (rng.standard_normal(shape) * 2 + 1).astype(np.float32),
             "s": rng.standard_normal(channels).astype(np.float32),
             "b": rng.standard_normal(channels).astype(np.float32),
             "m": rng.standard_normal(channels).astype(np.float32),
             "v": rng.uniform(0.5, 2, channels).astype(np.float32)}
    module = Module()
    fn = module.create_function()
    operands = [module.create_placeholder(n, Type(ElemKind.FLOAT32, feeds[n].shape)).result() for n in feeds]
    statistics: list = []
    fn.save(batch_norm_training(fn, "bn", operands, 1e-3, 0.8, statistics), "y")
    assert [(s.name, s.updated.name) for s in statistics] == [("m", "m__updated"), ("v", "v__updated")]
    got = evaluate(fn, feeds) if target == "reference" else compile_function(fn, get_backend(target)).execute(feeds)
    expected = _onnx_batch_norm(*feeds.values(), epsilon=1e-3, momentum=0.8)
    for name, value in zip(("y", "m__updated", "v__updated"), expected):
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-5, err_msg=name)


def _frozen_stats_bn(f, x, scale, bias):
    """Training-mode BatchNorm with Constant running statistics (not updated, and no gradient)."""
    channels = x.type.shape[1]
    mean = f.module.create_constant("mean", np.zeros(channels))
    var = f.module.create_constant("var", np.ones(channels))
    return batch_norm_training(f, "bn", [x, scale, bias, mean.result(), var.result()], 1e-5, 0.9, [])


@pytest.mark.parametrize("shapes", [[(2, 3, 2, 2), (3,), (3,)], [(5, 2), (2,), (2,)]])
def test_gradient_through_batch_statistics_matches_finite_differences(shapes):
    """float64: the gradient reaching x includes the paths through the batch mean and variance."""
    check_against_finite_differences(_frozen_stats_bn, shapes, seed=2)


@pytest.mark.parametrize("target", ["interpreter", "cpu"])
def test_lowered_batch_norm_gradient(target):
    check_lowered(_frozen_stats_bn, [(2, 3, 2, 2), (3,), (3,)], target, seed=3)


def _initializer(rng, name: str, shape, scale: float = 1.0, value: float | None = None) -> onnx.TensorProto:
    array = np.full(shape, value, np.float32) if value is not None else \
        (rng.standard_normal(shape) * scale).astype(np.float32)
    return numpy_helper.from_array(array, name)


def _model(nodes, inputs: tuple[str, tuple], outputs: tuple[str, tuple], initializers) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "net", [helper.make_tensor_value_info(inputs[0], TensorProto.FLOAT, inputs[1])],
                              [helper.make_tensor_value_info(outputs[0], TensorProto.FLOAT, outputs[1])],
                              initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)


def _bn_linear(batch: int) -> onnx.ModelProto:
    """image (N, 2, 3, 3) -> BatchNormalization -> Flatten -> Gemm -> logits (N, 3)."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("BatchNormalization", ["image", "bn_s", "bn_b", "bn_m", "bn_v"], ["normed"],
                              epsilon=1e-5, momentum=0.9),
             helper.make_node("Flatten", ["normed"], ["flat"]),
             helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1)]
    inits = [_initializer(rng, "bn_s", (2,), value=1.0), _initializer(rng, "bn_b", (2,), value=0.0),
             _initializer(rng, "bn_m", (2,), value=0.0), _initializer(rng, "bn_v", (2,), value=1.0),
             _initializer(rng, "fc_w", (3, 18), 0.3), _initializer(rng, "fc_b", (3,), value=0.0)]
    return _model(nodes, ("image", (batch, 2, 3, 3)), ("logits", (batch, 3)), inits)


def test_running_statistics_are_updated_and_frozen_for_inference():
    """After three steps the running statistics follow the momentum update of each batch's
    statistics, and the frozen inference function normalises with them (not the batch's)."""
    rng = np.random.default_rng(5)
    batch, momentum = 8, 0.75
    proto = _bn_linear(batch)
    network = glowsdk.load(proto)
    trainer = Trainer(network.function, "cross_entropy", SGDConfig(0.1), batch_norm_momentum=momentum)
    assert [s.name for s in trainer.graph.statistics] == ["bn_m", "bn_v"]
    assert "BatchNorm" not in trainer.graph.function.count_kinds()
    mean, var = np.zeros(2), np.ones(2)
    for _ in range(3):
        x = (rng.standard_normal((batch, 2, 3, 3)) * [[[[3.0]], [[0.5]]]] + [[[[2.0]], [[-1.0]]]]).astype(np.float32)
        trainer.step({"image": x}, rng.integers(0, 3, batch))
        mean = mean * momentum + x.mean(axis=(0, 2, 3)) * (1 - momentum)
        var = var * momentum + x.var(axis=(0, 2, 3)) * (1 - momentum)
        np.testing.assert_allclose(trainer.weights["bn_m"], mean, rtol=1e-5)
        np.testing.assert_allclose(trainer.weights["bn_v"], var, rtol=1e-5)
    weights = trainer.freeze()
    frozen = {c.name for c in network.function.module.constants.values()}
    assert {"bn_m__trained", "bn_v__trained"} <= frozen
    x = rng.standard_normal((batch, 2, 3, 3)).astype(np.float32)
    per_channel = (1, 2, 1, 1)
    normed = (x - mean.reshape(per_channel)) / np.sqrt(var.reshape(per_channel) + 1e-5) \
        * weights["bn_s"].reshape(per_channel) + weights["bn_b"].reshape(per_channel)
    expected = normed.reshape(batch, -1) @ weights["fc_w"].T + weights["fc_b"]
    got = glowsdk.compile(network, "cpu").run({"image": x})["logits"]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    session = ort.InferenceSession(export_onnx(proto, weights).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(["logits"], {"image": x})[0], expected, rtol=1e-4, atol=1e-4)


def _bn_cnn(batch: int) -> onnx.ModelProto:
    """digits (N, 1, 8, 8) -> Conv 4x3x3 -> BatchNormalization -> Relu -> MaxPool 2 -> Flatten -> Gemm 10."""
    rng = np.random.default_rng(6)
    nodes = [helper.make_node("Conv", ["image", "conv_w", "conv_b"], ["conv"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["conv", "bn_s", "bn_b", "bn_m", "bn_v"], ["normed"]),
             helper.make_node("Relu", ["normed"], ["relu"]),
             helper.make_node("MaxPool", ["relu"], ["pool"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["pool"], ["flat"]),
             helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1)]
    inits = [_initializer(rng, "conv_w", (4, 1, 3, 3), 0.3), _initializer(rng, "conv_b", (4,), value=0.0),
             _initializer(rng, "bn_s", (4,), value=1.0), _initializer(rng, "bn_b", (4,), value=0.0),
             _initializer(rng, "bn_m", (4,), value=0.0), _initializer(rng, "bn_v", (4,), value=1.0),
             _initializer(rng, "fc_w", (10, 64), 0.1), _initializer(rng, "fc_b", (10,), value=0.0)]
    return _model(nodes, ("image", (batch, 1, 8, 8)), ("logits", (batch, 10)), inits)


def test_small_bn_cnn_loss_falls_on_interpreter_and_cpu():
    batch = 16
    x_train, y_train = (a[:6 * batch] for a in load_digits_split()[:2])
    histories = {}
    for backend in ("interpreter", "cpu"):
        network = glowsdk.load(_bn_cnn(batch))
        trainer = Trainer(network.function, "cross_entropy", SGDConfig(0.05, momentum=0.9), backend=backend)
        batches = Batches({"image": x_train}, y_train, batch, seed=0)
        histories[backend] = [trainer.epoch(batches) for _ in range(3)]
    losses = histories["interpreter"]
    assert losses[0] > losses[1] > losses[2] and losses[2] < 0.75 * losses[0], losses
    np.testing.assert_allclose(histories["cpu"], losses, rtol=1e-4)


def test_training_some_weights_still_updates_the_running_statistics():
    network = glowsdk.load(_bn_linear(4))
    trainer = Trainer(network.function, "cross_entropy", SGDConfig(0.1), trainable=["fc_w"])
    assert [p.name for p in trainer.graph.parameters] == ["fc_w"]
    assert [s.name for s in trainer.graph.statistics] == ["bn_m", "bn_v"]
    x = np.arange(4 * 18, dtype=np.float32).reshape(4, 2, 3, 3)
    trainer.step({"image": x}, np.array([0, 1, 2, 0]))
    np.testing.assert_allclose(trainer.weights["bn_m"], 0.1 * x.mean(axis=(0, 2, 3)), rtol=1e-6)
