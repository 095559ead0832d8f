"""Lowering rules by family; importing this package registers them all."""
from . import conv_as_matmul, elementwise, linalg, nn, quant, reduce, resize, rnn, tensor, training  # noqa: F401  (registers the rules; every quant kind but TableLookup is a primitive)
