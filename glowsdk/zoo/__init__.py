"""The bundled model zoo: onnx's light ImageNet networks, their reference cases, and
ONNX-level transforms (random weights, another batch size) for conformance runs;
and the digits CNN, a small network trained on real data for accuracy checks."""
from .batch import rebatch
from .inputs import random_inputs
from .bundled import BUNDLED, ReferenceCase, bundled_path, is_bundled, load_bundled, reference_case
from .digits import accuracy_percent, digits_model_path, digits_record, load_digits_split
from .weights import randomize_weights

__all__ = ["BUNDLED", "ReferenceCase", "accuracy_percent", "bundled_path", "digits_model_path",
           "digits_record", "is_bundled", "load_bundled", "load_digits_split", "random_inputs",
           "randomize_weights", "rebatch", "reference_case"]
