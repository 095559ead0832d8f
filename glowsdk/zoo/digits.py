"""A small CNN trained on real data: scikit-learn's bundled 8x8 handwritten digits.

The light zoo models carry constant weights, so their outputs say nothing about
accuracy. Quantization is judged instead on this network, whose test-split
accuracy is a real figure. The data ships offline inside scikit-learn (1797
images, pixel values 0..16); the model is produced by
`scripts/train_digits_cnn.py` and shipped as package data next to a record of
how it was trained and what it scored.

The split is fixed here, once, so the training script, the tests and any
calibration run see the same images: a stratified 75/25 split with seed 0.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import GlowError

SPLIT_SEED = 0
TEST_SIZE = 0.25
MAX_PIXEL = 16.0  # the digits' brightest grey level; pixels are scaled by it to [0, 1]

_DATA = Path(__file__).resolve().parent / "data"


def load_digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test): float32 [N, 1, 8, 8] images in [0, 1], int64 labels."""
    try:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError as e:
        raise GlowError("the digits dataset needs the 'scikit-learn' package "
                        "(pip install scikit-learn, or glowsdk[test])") from e
    digits = load_digits()
    images = (digits.images / MAX_PIXEL).astype(np.float32)[:, None, :, :]
    labels = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=TEST_SIZE, random_state=SPLIT_SEED, stratify=labels)
    return x_train, y_train, x_test, y_test


def accuracy_percent(correct: int, total: int) -> float:
    """Accuracy as the record stores it, so a recomputed figure compares exactly."""
    return round(100.0 * correct / total, 4)


def digits_model_path() -> Path:
    """The trained digits CNN: input `image` [N, 1, 8, 8] float32, output `logits` [N, 10]."""
    return _DATA / "digits_cnn.onnx"


def digits_record_path() -> Path:
    """The JSON record written with the model: split, training settings, accuracies, sha256."""
    return _DATA / "digits_cnn.json"


def digits_record() -> dict[str, Any]:
    """The training record, so callers compare against the accuracy the model shipped with."""
    path = digits_record_path()
    if not path.is_file():
        raise GlowError(f"the digits model record is missing ({path}); run scripts/train_digits_cnn.py")
    return json.loads(path.read_text())
