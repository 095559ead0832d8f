"""Reference kernels by family; importing this package registers them all."""
from . import core, elementwise, nn, quant, reduce, resize, rnn, tensor, training  # noqa: F401  (registers the kernels)
