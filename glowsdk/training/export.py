"""Trained weights back into the ONNX model they were imported from.

The importer keeps initializer names for the Constants it creates, so the trained
model is the original one with those initializers replaced: every other detail
(symbolic batch dims, opset, node names) is kept, and onnxruntime runs the result.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import GlowError


def export_onnx(model: onnx.ModelProto, weights: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of `model` whose initializers named in `weights` hold the trained values."""
    trained = onnx.ModelProto()
    trained.CopyFrom(model)
    initializers = {init.name: init for init in trained.graph.initializer}
    missing = sorted(set(weights) - set(initializers))
    if missing:
        raise GlowError(f"weight(s) {', '.join(missing)} are not initializers of the model")
    for name, value in weights.items():
        old = numpy_helper.to_array(initializers[name])
        if old.shape != value.shape or old.dtype != value.dtype:
            raise GlowError(f"weight '{name}' is {value.dtype}{list(value.shape)}, the model's initializer "
                            f"{old.dtype}{list(old.shape)}")
        initializers[name].CopyFrom(numpy_helper.from_array(value, name))
    return trained
