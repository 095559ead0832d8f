"""ONNX converters by family; importing this package registers them all."""
from . import elementwise, nn, quant, reduce, resize, rnn, tensor  # noqa: F401  (registers the converters)
