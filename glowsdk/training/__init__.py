"""Training: automatic differentiation, SGD and freezing, lowered to the same primitives (paper 3.2, 3.4).

`differentiate` adds a loss's gradient to a function; `build_training` makes a
module's training function; `Trainer` runs it on any backend; `train` is the
one-call form; `freeze` turns trained weights into Constants; `export_onnx`
writes them back into the ONNX model they came from.
"""
from .autodiff import differentiate
from .export import export_onnx
from .graph import LOSSES, SGDConfig, build_training, freeze, make_trainable
from .registry import GRADIENTS, gradient
from .trainer import Batches, DivergedError, Trainer, train

__all__ = ["Batches", "DivergedError", "GRADIENTS", "LOSSES", "SGDConfig", "Trainer", "build_training",
           "differentiate", "export_onnx", "freeze", "gradient", "make_trainable", "train"]
