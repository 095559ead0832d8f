"""The bundled model zoo: onnx's light ImageNet networks, their reference cases, and
ONNX-level transforms (random weights, another batch size) for conformance runs."""
from .batch import random_inputs, rebatch
from .bundled import BUNDLED, ReferenceCase, bundled_path, is_bundled, load_bundled, reference_case
from .weights import randomize_weights

__all__ = ["BUNDLED", "ReferenceCase", "bundled_path", "is_bundled", "load_bundled", "random_inputs",
           "randomize_weights", "rebatch", "reference_case"]
