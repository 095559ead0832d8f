"""Training end to end: SGD steps against a numpy formula, a short digits run whose loss falls
on interpreter and cpu alike, freezing, ONNX export checked in onnxruntime, and the CLI."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import glowsdk
from glowsdk.api import read_model
from glowsdk.backends import get_backend
from glowsdk.cli.main import main
from glowsdk.compiler.pipeline import compile_function
from glowsdk.graph.function import Module
from glowsdk.graph.nodes import linalg
from glowsdk.graph.types import ElemKind, Type
from glowsdk.training import Batches, SGDConfig, Trainer, export_onnx
from glowsdk.zoo import randomize_weights
from glowsdk.zoo.digits import digits_model_path, load_digits_split

BATCH = 16


@pytest.fixture(scope="module")
def digits():
    return load_digits_split()


def _fresh_digits(seed: int = 0):
    proto = randomize_weights(read_model(digits_model_path())[0], seed)
    return proto, glowsdk.load(proto, input_shapes={"image": [BATCH, 1, 8, 8]})


def test_regression_step_is_gradient_descent_on_squared_error():
    """One step of y = x @ w against a target: w' = w - lr * x^T (x w - t), from the definition."""
    rng = np.random.default_rng(0)
    x, w0, t = rng.standard_normal((4, 3)), rng.standard_normal((3, 2)), rng.standard_normal((4, 2))
    module = Module()
    fn = module.create_function()
    image = module.create_placeholder("x", Type(ElemKind.FLOAT64, (4, 3)))
    weight = module.create_constant("w", w0)
    fn.save(fn.add(linalg.MatMul, image.result(), weight.result()), "y")
    trainer = Trainer(fn, "regression", SGDConfig(0.1))
    loss = trainer.step({"x": x}, t)
    np.testing.assert_allclose(loss, 0.5 * np.sum((x @ w0 - t) ** 2))
    np.testing.assert_allclose(trainer.weights["w"], w0 - 0.1 * x.T @ (x @ w0 - t))


def _short_run(backend: str, digits) -> tuple[list[float], Trainer]:
    x_train, y_train = digits[0][:8 * BATCH], digits[1][:8 * BATCH]
    _, network = _fresh_digits()
    trainer = Trainer(network.function, "cross_entropy", SGDConfig(0.05, momentum=0.9), backend=backend)
    batches = Batches({"image": x_train}, y_train, BATCH, seed=0)
    return [trainer.epoch(batches) for _ in range(3)], trainer


def test_short_digits_run_lowers_the_loss_on_interpreter_and_cpu(digits):
    interpreter, _ = _short_run("interpreter", digits)
    cpu, trainer = _short_run("cpu", digits)
    assert interpreter[0] > interpreter[1] > interpreter[2] and interpreter[2] < 0.75 * interpreter[0], interpreter
    np.testing.assert_allclose(cpu, interpreter, rtol=1e-4)  # the same steps, compiled through LLVM
    lowered = {}
    compile_function(trainer.graph.function, get_backend("interpreter"),
                     on_stage=lambda stage, fn: lowered.setdefault(stage, set(fn.count_kinds())))
    assert lowered["lowered"].isdisjoint({"SGD", "MaxPoolGrad", "SoftmaxCrossEntropy", "ConvTranspose", "Gemm"})


def test_frozen_model_exports_to_onnxruntime(digits):
    proto, network = _fresh_digits()
    trainer = Trainer(network.function, "cross_entropy", SGDConfig(0.05, momentum=0.9))
    trainer.epoch(Batches({"image": digits[0]}, digits[1], BATCH, seed=1))
    x_test = digits[2][:BATCH]
    before = trainer.predict({"image": x_test})
    weights = trainer.freeze()
    function = network.function
    assert [p.name for p in function.input_placeholders()] == ["image"]
    assert "train" not in function.module.functions
    frozen = glowsdk.compile(network, "cpu").run({"image": x_test})["logits"]
    np.testing.assert_allclose(frozen, before, rtol=1e-5, atol=1e-5)
    trained = export_onnx(proto, weights)
    session = ort.InferenceSession(trained.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(["logits"], {"image": x_test})[0], before, rtol=1e-4, atol=1e-4)


def test_cli_train_writes_a_model_that_compiles_for_the_npu(tmp_path, digits, capsys):
    data = tmp_path / "data.npz"
    np.savez(data, image=digits[0][:64], target=digits[1][:64])
    out = tmp_path / "trained.onnx"
    assert main(["train", str(digits_model_path()), "--data", str(data), "--epochs", "2", "--batch", "16",
                 "--lr", "0.05", "--momentum", "0.9", "--random-weights", "3", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    losses = [float(line.split("mean loss ")[1].split()[0]) for line in text.splitlines() if "mean loss" in line]
    assert len(losses) == 2 and losses[1] < losses[0]
    trained = {t.name: numpy_helper.to_array(t) for t in onnx.load(out).graph.initializer}
    start = {t.name: numpy_helper.to_array(t)
             for t in randomize_weights(read_model(digits_model_path())[0], 3).graph.initializer}
    assert trained.keys() == start.keys() and all(not np.array_equal(trained[k], start[k]) for k in start)
    binary = tmp_path / "trained.npub"
    assert main(["compile", str(out), "--input-shape", "image=1x1x8x8", "--target", "npu",
                 "--calibration-random", "2", "-o", str(binary)]) == 0
    assert binary.stat().st_size > 0


def test_cli_train_refuses_data_without_target(tmp_path, capsys):
    data = tmp_path / "data.npz"
    np.savez(data, image=np.zeros((4, 1, 8, 8), np.float32))
    assert main(["train", str(digits_model_path()), "--data", str(data), "-o", str(tmp_path / "t.onnx")]) == 2
    assert "needs an array named 'target'" in capsys.readouterr().err
