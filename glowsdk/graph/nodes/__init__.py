"""The node-kind registry: every high-level node kind, one declarative record each.

Families live in their own modules (import kinds from there in code that wants
static names); importing this package declares them all and exposes each kind
as `nodes.<Name>`. `NODE_KINDS` maps kind names to generated classes.
"""
from ..spec import NODE_KINDS
from . import core, elementwise, linalg, nn, quant, reduce, resize, rnn, tensor, training  # noqa: F401  (declares the kinds)

globals().update(NODE_KINDS)
__all__ = ["NODE_KINDS", *NODE_KINDS]
