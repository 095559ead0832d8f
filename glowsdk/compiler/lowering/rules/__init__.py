"""Lowering rules by family; importing this package registers them all (every quant kind but TableLookup is a
primitive)."""
from . import conv_as_matmul, elementwise, linalg, nn, quant, reduce, resize, rnn, tensor, training  # noqa: F401
