"""Converters of the ONNX element-wise ops (arithmetic, logic, math, activations, casts)."""
from __future__ import annotations

import numpy as np

from ....graph.nodes import elementwise as ew
from ....graph.types import ElemKind
from ..context import OnnxNode, elem_of_onnx
from ..registry import converter

_SAME_NAME = [
    ew.Add, ew.Sub, ew.Mul, ew.Div, ew.PRelu, ew.Equal, ew.Less, ew.LessOrEqual, ew.Greater,
    ew.GreaterOrEqual, ew.And, ew.Or, ew.Xor, ew.Not, ew.IsNaN, ew.Where, ew.Neg, ew.Abs, ew.Sign,
    ew.Sqrt, ew.Reciprocal, ew.Exp, ew.Log, ew.Floor, ew.Ceil, ew.Round, ew.Sin, ew.Cos, ew.Erf,
    ew.Tanh, ew.Sigmoid, ew.Relu, ew.HardSwish, ew.Softplus, ew.Softsign, ew.Mish, ew.Pow,
]
"""ONNX ops that map one-to-one onto the node kind of the same name, without attributes."""


def _direct(kind):
    return lambda node: node.add(kind, *node.inputs())


for _kind in _SAME_NAME:
    converter(_kind.spec.name)(_direct(_kind))

_WITH_FLOAT_ATTRS = {
    ew.LeakyRelu: ("alpha",), ew.Elu: ("alpha",), ew.Selu: ("alpha", "gamma"), ew.Celu: ("alpha",),
    ew.HardSigmoid: ("alpha", "beta"), ew.ThresholdedRelu: ("alpha",),
}
"""ONNX ops whose float attributes carry over by name (absent ones take the kind's default)."""


def _with_attrs(kind, names):
    def convert(node: OnnxNode):
        attrs = {n: float(node.attr(n)) for n in names if node.attr(n) is not None}
        return node.add(kind, node.input(0), **attrs)
    return convert


for _kind, _names in _WITH_FLOAT_ATTRS.items():
    converter(_kind.spec.name)(_with_attrs(_kind, _names))


@converter("Mod")
def _mod(node: OnnxNode):
    return node.add(ew.Mod, node.input(0), node.input(1), fmod=bool(node.attr("fmod", 0)))


@converter("IsInf")
def _isinf(node: OnnxNode):
    return node.add(ew.IsInf, node.input(0), detect_positive=bool(node.attr("detect_positive", 1)),
                    detect_negative=bool(node.attr("detect_negative", 1)))


@converter("Gelu")
def _gelu(node: OnnxNode):
    return node.add(ew.Gelu, node.input(0), approximate=node.attr("approximate", "none"))


@converter("Clip")
def _clip(node: OnnxNode):
    if node.opset < 11:
        low, high = node.attr("min", -np.inf), node.attr("max", np.inf)
    else:
        low = node.const(1, "Clip's min")
        high = node.const(2, "Clip's max")
        low = -np.inf if low is None else float(np.asarray(low).reshape(()))
        high = np.inf if high is None else float(np.asarray(high).reshape(()))
    return node.add(ew.Clip, node.input(0), min=low, max=high)


def _chain(node: OnnxNode, kind, last: str = ""):
    """Max/Min/Sum over any number of inputs as a chain of binary nodes; the last is named `last`."""
    values = node.inputs()
    result = values[0]
    for i, value in enumerate(values[1:]):
        result = node.add(kind, result, value, suffix=last if i == len(values) - 2 else f"step{i}")
    return result


converter("Max")(lambda node: _chain(node, ew.Max))
converter("Min")(lambda node: _chain(node, ew.Min))
converter("Sum")(lambda node: _chain(node, ew.Add))


@converter("Mean")
def _mean(node: OnnxNode):
    total = _chain(node, ew.Add, "sum")
    count = node.constant(np.array(len(node.input_names), dtype=total.type.dtype), "count")
    return node.add(ew.Div, total, count)


@converter("Cast")
def _cast(node: OnnxNode):
    to = elem_of_onnx(node.attr("to"), f"node '{node.name}' (Cast)")
    return _cast_to(node, to)


@converter("CastLike")
def _cast_like(node: OnnxNode):
    target = node.input(1).type.elem
    return _cast_to(node, target.quantized_storage if target.is_quantized else target)


def _cast_to(node: OnnxNode, to: ElemKind):
    """A Cast node with saturate (opset 19+) and round_mode (opset 24+) normalised away where they
    have no effect, so equal conversions are equal nodes."""
    value = node.input(0)
    saturate = bool(node.attr("saturate", 1)) if to in ew.SATURATING else True
    round_mode = node.attr("round_mode", "up") if to is ElemKind.FLOAT8E8M0 else "up"
    if value.type.elem == to and not (saturate and to is ElemKind.FLOAT8E5M2):  # that clamps infinities
        return value
    return node.add(ew.Cast, value, to=to, saturate=saturate, round_mode=round_mode)
