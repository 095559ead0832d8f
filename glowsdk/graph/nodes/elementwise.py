"""Element-wise node kinds: arithmetic, comparison, logic, math and activations.

Each family is declared once by a small factory; a new element-wise op is one line.
Binary kinds broadcast multidirectionally (numpy/ONNX rules).
"""
from __future__ import annotations

from typing import Callable, Sequence

from ..kinds import define_node
from ..node import Node
from ..spec import Attr, bool_attr, elem_attr, float_attr, str_attr
from ..types import ElemKind, Type, broadcast_shapes
from .rules import (accumulator_type, broadcast_to, is_bool, is_float, is_numeric, is_numeric_or_quantized,
                    require_elem, same_as)

FAMILY = "elementwise"


def _checked(allowed: Callable[[ElemKind], bool]) -> Callable[[Node], None]:
    def verify(node: Node) -> None:
        for value in node.present_inputs():
            require_elem(node, value.type, allowed, "operands")
    return verify


def unary(name: str, allowed: Callable[[ElemKind], bool], doc: str,
          attrs: Sequence[Attr] = ()) -> type[Node]:
    """y = f(x), same type as x."""
    return define_node(name, "input", attrs=attrs, infer=same_as(0), verify=_checked(allowed),
                       family=FAMILY, doc=doc)


def binary(name: str, allowed: Callable[[ElemKind], bool], doc: str,
           attrs: Sequence[Attr] = (), infer: Callable[[Node], Type] | None = None) -> type[Node]:
    """z = f(x, y) with broadcasting; x and y share an element kind (and quantized, one scale and offset)."""
    return define_node(name, "lhs rhs", attrs=attrs, infer=infer or broadcast_to(), verify=_checked(allowed),
                       family=FAMILY, doc=doc)


def _product_type(node: Node) -> Type:
    """x * y: the broadcast type, or for 8-bit quantized operands their exact int32 accumulator."""
    lhs, rhs = node.lhs.type, node.rhs.type
    if lhs.elem.is_quantized or rhs.elem.is_quantized:
        return accumulator_type(node, lhs, rhs, broadcast_shapes(lhs.shape, rhs.shape))
    return broadcast_to()(node)


def compare(name: str, allowed: Callable[[ElemKind], bool], doc: str) -> type[Node]:
    """b = x ? y with broadcasting; the result is bool."""
    return define_node(name, "lhs rhs", infer=broadcast_to(ElemKind.BOOL), verify=_checked(allowed),
                       family=FAMILY, doc=doc)


def predicate(name: str, doc: str, attrs: Sequence[Attr] = ()) -> type[Node]:
    """b = p(x) for a float x; the result is bool."""
    return define_node(name, "input", attrs=attrs,
                       infer=lambda node: node.input.type.with_elem(ElemKind.BOOL),
                       verify=_checked(is_float), family=FAMILY, doc=doc)


def _any(kind: ElemKind) -> bool:
    """any kind"""
    return True


def _signed(kind: ElemKind) -> bool:
    """a float or signed integer kind"""
    return kind.is_float or (kind.is_integer and kind.dtype.kind == "i")


# -- arithmetic ---------------------------------------------------------------------------
_SAME_TYPE_QUANTIZED = ("Quantized operands share one type [scale, offset] with the result and work "
                        "on the raw integers q: ")
Add = binary("Add", is_numeric_or_quantized, "x + y. " + _SAME_TYPE_QUANTIZED +
             "q = saturate(q_x + q_y - offset), exact (plain integers wrap).")
Sub = binary("Sub", is_numeric_or_quantized, "x - y. " + _SAME_TYPE_QUANTIZED +
             "q = saturate(q_x - q_y + offset), exact (plain integers wrap).")
Mul = binary("Mul", is_numeric_or_quantized, "x * y. 8-bit quantized operands give their exact int32 "
             "accumulator (q_x - offset_x) * (q_y - offset_y) of scale s_x * s_y, offset 0.",
             infer=_product_type)
Div = binary("Div", is_numeric, "x / y; integer division truncates toward zero (ONNX).")
Max = binary("Max", is_numeric_or_quantized, "Element-wise maximum; NaN propagates. " + _SAME_TYPE_QUANTIZED +
             "the larger q.")
Min = binary("Min", is_numeric_or_quantized, "Element-wise minimum; NaN propagates. " + _SAME_TYPE_QUANTIZED +
             "the smaller q.")
Mod = binary("Mod", is_numeric,
             "Remainder. fmod=False: sign of the divisor (Python %); fmod=True: sign of the dividend (C fmod).",
             attrs=[bool_attr("fmod", False)])
Pow = define_node(
    "Pow", "base exponent", family=FAMILY, verify=_checked(is_numeric),
    infer=lambda node: node.base.type.with_shape(broadcast_shapes(node.base.type.shape,
                                                                  node.exponent.type.shape)),
    doc="base ** exponent; the result has the base's element kind, the exponent may differ.")
PRelu = binary("PRelu", is_float, "x if x >= 0 else slope * x; slope broadcasts to x.")

# -- comparison and logic -----------------------------------------------------------------
Equal = compare("Equal", _any, "x == y.")
Less = compare("Less", is_numeric, "x < y.")
LessOrEqual = compare("LessOrEqual", is_numeric, "x <= y.")
Greater = compare("Greater", is_numeric, "x > y.")
GreaterOrEqual = compare("GreaterOrEqual", is_numeric, "x >= y.")
And = binary("And", is_bool, "Logical and.")
Or = binary("Or", is_bool, "Logical or.")
Xor = binary("Xor", is_bool, "Logical exclusive or.")
Not = unary("Not", is_bool, "Logical not.")
IsNaN = predicate("IsNaN", "True where x is NaN.")
IsInf = predicate("IsInf", "True where x is +inf (if detect_positive) or -inf (if detect_negative).",
                  attrs=[bool_attr("detect_positive", True), bool_attr("detect_negative", True)])


def _where_type(node: Node) -> Type:
    require_elem(node, node.cond.type, is_bool, "cond")
    if not node.lhs.type.same_elem(node.rhs.type):
        raise node.fail(f"branches must share one element kind, got {node.lhs.type} and {node.rhs.type}")
    shape = broadcast_shapes(*(v.type.shape for v in node.inputs))
    return node.lhs.type.with_shape(shape)


Where = define_node("Where", "cond lhs rhs", infer=_where_type, family=FAMILY,
                    doc="cond ? x : y, all three broadcast together (Glow's Select).")

# -- unary math -----------------------------------------------------------------------------
Neg = unary("Neg", _signed, "-x.")
Abs = unary("Abs", is_numeric, "|x|.")
Sign = unary("Sign", is_numeric, "-1, 0 or 1 by the sign of x (0 for NaN inputs stays NaN).")
Sqrt = unary("Sqrt", is_float, "Square root.")
Reciprocal = unary("Reciprocal", is_float, "1 / x.")
Exp = unary("Exp", is_float, "e ** x.")
Log = unary("Log", is_float, "Natural logarithm.")
Floor = unary("Floor", is_float, "Round toward -inf.")
Ceil = unary("Ceil", is_float, "Round toward +inf.")
Round = unary("Round", is_float, "Round half to even.")
Sin = unary("Sin", is_float, "Sine.")
Cos = unary("Cos", is_float, "Cosine.")
Erf = unary("Erf", is_float, "The Gauss error function.")
Tanh = unary("Tanh", is_float, "Hyperbolic tangent.")
Sigmoid = unary("Sigmoid", is_float, "1 / (1 + e ** -x).")

# -- activations ----------------------------------------------------------------------------
Relu = unary("Relu", _signed, "max(x, 0).")
LeakyRelu = unary("LeakyRelu", is_float, "x if x >= 0 else alpha * x.", [float_attr("alpha", 0.01)])
Elu = unary("Elu", is_float, "x if x > 0 else alpha * (e ** x - 1).", [float_attr("alpha", 1.0)])
Selu = unary("Selu", is_float, "gamma * (x if x > 0 else alpha * (e ** x - 1)).",
             [float_attr("alpha", 1.6732632423543772), float_attr("gamma", 1.0507009873554805)])
Celu = unary("Celu", is_float, "max(0, x) + min(0, alpha * (e ** (x / alpha) - 1)).",
             [float_attr("alpha", 1.0)])
HardSigmoid = unary("HardSigmoid", is_float, "clamp(alpha * x + beta, 0, 1).",
                    [float_attr("alpha", 0.2), float_attr("beta", 0.5)])
HardSwish = unary("HardSwish", is_float, "x * clamp(x / 6 + 1/2, 0, 1).")
Silu = unary("Silu", is_float, "x * sigmoid(x) (SiLU, or Swish with beta 1; PyTorch exports it as Sigmoid and Mul).")
Softplus = unary("Softplus", is_float, "log(1 + e ** x).")
Softsign = unary("Softsign", is_float, "x / (1 + |x|).")
Mish = unary("Mish", is_float, "x * tanh(softplus(x)).")
Gelu = unary("Gelu", is_float, "x * Phi(x); approximate='tanh' uses the tanh formula.",
             [str_attr("approximate", "none")])
ThresholdedRelu = unary("ThresholdedRelu", is_float, "x if x > alpha else 0.", [float_attr("alpha", 1.0)])
Clip = unary("Clip", is_numeric, "clamp(x, min, max); the bounds are in x's element kind.",
             [float_attr("min", float("-inf")), float_attr("max", float("inf"))])

# -- conversion -------------------------------------------------------------------------------
ROUND_MODES = ("up", "down", "nearest")
"""How a Cast to float8e8m0 rounds: to the next power of two away from zero, toward it, or the nearer."""

SATURATING = frozenset({ElemKind.FLOAT8E4M3FN, ElemKind.FLOAT8E4M3FNUZ, ElemKind.FLOAT8E5M2,
                        ElemKind.FLOAT8E5M2FNUZ, ElemKind.FLOAT8E8M0})
"""The target kinds Cast's `saturate` flag applies to (ONNX: the float8 kinds)."""


def _cast_type(node: Node) -> Type:
    if node.to.is_quantized:
        raise node.fail(f"cannot cast to the quantized kind {node.to.value}: use Quantize")
    if node.round_mode not in ROUND_MODES:
        raise node.fail(f"round_mode must be one of {', '.join(ROUND_MODES)}, got '{node.round_mode}'")
    return node.input.type.with_elem(node.to)


Cast = define_node(
    "Cast", "input",
    attrs=[elem_attr("to"), bool_attr("saturate", True, doc="float8 targets only (SATURATING)"),
           str_attr("round_mode", "up", doc="float8e8m0 targets only: up, down or nearest")],
    infer=_cast_type, family=FAMILY,
    doc="Convert to another plain element kind (a quantized operand converts its raw integers). "
        "Float to integer truncates toward zero (out of range: undefined, as in ONNX, except for the "
        "narrow integers below); to bool is x != 0. Narrow kinds: float8 (e4m3fn, e4m3fnuz, e5m2, "
        "e5m2fnuz) and float4e2m1 round half to even, once (float64 sources too). With saturate, "
        "float8 out-of-range values and infinities clamp to the largest finite value and NaN stays "
        "NaN; without it they become inf (e5m2) or NaN (the others). The fnuz kinds have no -0 "
        "(it becomes +0). float4e2m1 always saturates and maps NaN to -0 (as the ONNX reference "
        "does). float8e8m0 takes |x| to a power of two 2**k by round_mode (up: away from zero; down: "
        "toward it; nearest: ties, 1.5 * 2**k, round up) with k unbounded; a k beyond -127..127, inf "
        "and zero then saturate to 2**127 or 2**-127, or become NaN without saturate. "
        "int4/uint4/int2/uint2: floats truncate toward zero (NaN and "
        "inf give 0), then the higher bits are discarded (two's complement), as for every "
        "fixed-point narrowing.")
