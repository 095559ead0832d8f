"""Lowering rules by family; importing this package registers them all."""
from . import elementwise, linalg, nn, reduce, resize, rnn, tensor, training  # noqa: F401  (registers the rules; every quant kind is a primitive)
