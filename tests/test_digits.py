"""The digits CNN: the shipped model is the recorded one, and glowsdk runs it like onnxruntime.

This is the real-data network quantization is judged on, so its float figures
must hold exactly: the file matches the sha256 of the training record, and
onnxruntime still scores the recorded accuracy on the fixed test split.
"""
from __future__ import annotations

import builtins
import hashlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import glowsdk
from glowsdk.errors import GlowError
from glowsdk.zoo.digits import accuracy_percent, digits_model_path, digits_record, load_digits_split


@pytest.fixture(scope="module")
def split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    return load_digits_split()


@pytest.fixture(scope="module")
def ort_test_logits(split) -> np.ndarray:
    session = ort.InferenceSession(str(digits_model_path()), providers=["CPUExecutionProvider"])
    return session.run(["logits"], {"image": split[2]})[0]


def test_split_is_fixed_and_scaled(split) -> None:
    x_train, y_train, x_test, y_test = split
    record = digits_record()["split"]
    assert (len(x_train), len(x_test)) == (record["train_images"], record["test_images"]) == (1347, 450)
    assert x_train.dtype == x_test.dtype == np.float32 and y_train.dtype == y_test.dtype == np.int64
    assert x_test.shape[1:] == (1, 8, 8) and x_test.min() == 0.0 and x_test.max() == 1.0
    # stratified: every digit puts its share (within rounding) in the test split
    per_digit = np.bincount(y_train) + np.bincount(y_test)
    assert np.all(np.abs(np.bincount(y_test) - per_digit * record["test_size"]) <= 1)


def test_shipped_model_matches_record() -> None:
    data = digits_model_path().read_bytes()
    assert hashlib.sha256(data).hexdigest() == digits_record()["sha256"]
    model = onnx.load_from_string(data)
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == ["image"]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"


def test_onnxruntime_accuracy_is_the_recorded_one(split, ort_test_logits) -> None:
    y_test = split[3]
    record = digits_record()
    correct = int((ort_test_logits.argmax(axis=1) == y_test).sum())
    assert correct == record["test_correct"]
    assert accuracy_percent(correct, len(y_test)) == record["test_accuracy"] >= 95.0


def test_glowsdk_matches_onnxruntime_on_every_test_image(split, ort_test_logits) -> None:
    x_test = split[2]
    net = glowsdk.load(digits_model_path(), input_shapes={"image": x_test.shape})
    logits = glowsdk.compile(net, "interpreter").run({"image": x_test})["logits"]
    np.testing.assert_array_equal(logits.argmax(axis=1), ort_test_logits.argmax(axis=1))
    # relative to the logits' scale: near-zero logits make an element-wise ratio meaningless
    scale = float(np.abs(ort_test_logits).max())
    np.testing.assert_allclose(logits, ort_test_logits, rtol=1e-4, atol=1e-4 * scale)


def test_missing_scikit_learn_is_named(monkeypatch) -> None:
    real_import = builtins.__import__

    def no_sklearn(name: str, *args, **kwargs):
        if name.startswith("sklearn"):
            raise ImportError(f"No module named '{name}'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sklearn)
    with pytest.raises(GlowError, match="scikit-learn"):
        load_digits_split()
