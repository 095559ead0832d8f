"""Lowering rules of the element-wise node kinds.

Most rules are exact: they compute the reference kernel's function with the same
roundings, the same NaN and infinity behaviour and, for integers, the same
two's-complement wrapping. The transcendental compositions (Sigmoid, Softplus,
Mish, Gelu, and e**x - 1 inside Elu, Selu and Celu) cannot be: the reference
rounds once from float64 (or from numpy's expm1), the lowering composes float
primitives. They compute half kinds in float32 as the reference does, and each
rule's docstring states how far its result can be from the reference.

Arithmetic with a float attribute follows the reference's numpy promotion: in
x's kind, except that bfloat16 promotes to float32 and rounds once at the end
(`_scalar_elem`).
"""
from __future__ import annotations

import math

import numpy as np

from ....graph.node import Node, NodeValue
from ....graph.nodes import elementwise as ew
from ....graph.nodes.core import Splat
from ....graph.types import ElemKind
from ..registry import Lowerer, lowers
from .common import cast_to, compute_elem


def _scalar(b: Lowerer, value: float, like: NodeValue) -> NodeValue:
    """A rank-0 constant of `like`'s element kind."""
    return b.scalar(value, like.type.elem)


def _scalar_elem(x: NodeValue) -> ElemKind:
    """The kind the reference kernels evaluate `x op python_float` in: x's own, except bfloat16,
    which numpy promotes to float32 (Python floats are weak only against numpy's own kinds)."""
    return ElemKind.FLOAT32 if x.type.elem == ElemKind.BFLOAT16 else x.type.elem


def _is_unsigned(elem: ElemKind) -> bool:
    return elem.is_integer and elem.dtype.kind == "u"


def _negate(b: Lowerer, x: NodeValue) -> NodeValue:
    return b.add(ew.Mul, x, _scalar(b, -1, x))


def _clamp01(b: Lowerer, x: NodeValue) -> NodeValue:
    """min(max(x, 0), 1), as np.clip(x, 0, 1) computes it (NaN propagates)."""
    return b.add(ew.Min, b.add(ew.Max, x, _scalar(b, 0, x)), _scalar(b, 1, x))


# -- arithmetic -----------------------------------------------------------------------------------
@lowers(ew.Neg)
def _neg(b: Lowerer, node: Node) -> NodeValue:
    """x * -1 keeps the sign of zero (-(+0) = -0) and wraps INT_MIN to itself, as numpy does."""
    # neg(x) -> x * -1
    return _negate(b, node.input)


@lowers(ew.Abs)
def _abs(b: Lowerer, node: Node) -> NodeValue:
    """0 - x makes +0 of -0 (x * -1 would not); INT_MIN wraps to itself, as np.abs gives."""
    # abs(x) -> where(0 < x, x, 0 - x); unsigned: x
    x = node.input
    if _is_unsigned(x.type.elem):
        return x
    zero = _scalar(b, 0, x)
    return b.add(ew.Where, b.add(ew.Less, zero, x), x, b.add(ew.Sub, zero, x))


@lowers(ew.Sign)
def _sign(b: Lowerer, node: Node) -> NodeValue:
    """For floats the last branch is x - x: +0 for either zero and NaN for NaN, as np.sign gives."""
    # sign(x) -> where(0 < x, 1, where(x < 0, -1, x - x)); unsigned: where(0 < x, 1, 0)
    x = node.input
    rest = b.add(ew.Sub, x, x) if x.type.elem.is_float else _scalar(b, 0, x)
    if not _is_unsigned(x.type.elem):
        rest = b.add(ew.Where, b.add(ew.Less, x, _scalar(b, 0, x)), _scalar(b, -1, x), rest)
    return b.add(ew.Where, b.add(ew.Less, _scalar(b, 0, x), x), _scalar(b, 1, x), rest)


@lowers(ew.Reciprocal)
def _reciprocal(b: Lowerer, node: Node) -> NodeValue:
    # reciprocal(x) -> 1 / x
    return b.add(ew.Div, _scalar(b, 1, node.input), node.input)


@lowers(ew.Ceil)
def _ceil(b: Lowerer, node: Node) -> NodeValue:
    """Exact, signed zeros included: ceil(-0.5) = -floor(0.5) = -0."""
    # ceil(x) -> floor(x * -1) * -1
    return _negate(b, b.add(ew.Floor, _negate(b, node.input)))


# -- comparison and logic -------------------------------------------------------------------------
@lowers(ew.Greater)
def _greater(b: Lowerer, node: Node) -> NodeValue:
    # x > y -> y < x
    return b.add(ew.Less, node.rhs, node.lhs)


@lowers(ew.GreaterOrEqual)
def _greater_or_equal(b: Lowerer, node: Node) -> NodeValue:
    """Not not(x < y), which would be True where either operand is NaN."""
    # x >= y -> (y < x) or (x == y)
    return b.add(ew.Or, b.add(ew.Less, node.rhs, node.lhs), b.add(ew.Equal, node.lhs, node.rhs))


@lowers(ew.LessOrEqual)
def _less_or_equal(b: Lowerer, node: Node) -> NodeValue:
    """Not not(y < x), which would be True where either operand is NaN."""
    # x <= y -> (x < y) or (x == y)
    return b.add(ew.Or, b.add(ew.Less, node.lhs, node.rhs), b.add(ew.Equal, node.lhs, node.rhs))


@lowers(ew.Xor)
def _xor(b: Lowerer, node: Node) -> NodeValue:
    # xor(x, y) -> not(x == y)
    return b.add(ew.Not, b.add(ew.Equal, node.lhs, node.rhs))


@lowers(ew.IsNaN)
def _is_nan(b: Lowerer, node: Node) -> NodeValue:
    # isnan(x) -> not(x == x)
    return b.add(ew.Not, b.add(ew.Equal, node.input, node.input))


@lowers(ew.IsInf)
def _is_inf(b: Lowerer, node: Node) -> NodeValue:
    # isinf(x) -> (x == inf) or (x == -inf), keeping the detected signs; neither: splat(false)
    x = node.input
    tests = [b.add(ew.Equal, x, _scalar(b, value, x))
             for value, wanted in ((np.inf, node.detect_positive), (-np.inf, node.detect_negative)) if wanted]
    if not tests:
        return b.add(Splat, shape=node.type.shape, value=0.0, elem=ElemKind.BOOL)
    return tests[0] if len(tests) == 1 else b.add(ew.Or, *tests)


# -- piecewise-linear activations -----------------------------------------------------------------
@lowers(ew.Relu)
def _relu(b: Lowerer, node: Node) -> NodeValue:
    # relu(x) -> max(x, 0)
    return b.add(ew.Max, node.input, _scalar(b, 0, node.input))


@lowers(ew.LeakyRelu)
def _leaky_relu(b: Lowerer, node: Node) -> NodeValue:
    # leakyrelu(x) -> where(x < 0, x * alpha, x)
    x = node.input
    w = cast_to(b, x, _scalar_elem(x))
    scaled = b.add(ew.Mul, w, _scalar(b, node.alpha, w))
    return cast_to(b, b.add(ew.Where, b.add(ew.Less, w, _scalar(b, 0, w)), scaled, w), x.type.elem)


@lowers(ew.PRelu)
def _prelu(b: Lowerer, node: Node) -> NodeValue:
    # prelu(x, slope) -> where(x < 0, x * slope, x)
    x = node.lhs
    scaled = b.add(ew.Mul, x, node.rhs)
    return b.add(ew.Where, b.add(ew.Less, x, _scalar(b, 0, x)), scaled, x)


@lowers(ew.ThresholdedRelu)
def _thresholded_relu(b: Lowerer, node: Node) -> NodeValue:
    """alpha is rounded to the kind numpy compares x with a Python float in (`_scalar_elem`)."""
    # thresholdedrelu(x) -> where(alpha < x, x, 0)
    x = node.input
    w = cast_to(b, x, _scalar_elem(x))
    return b.add(ew.Where, b.add(ew.Less, _scalar(b, node.alpha, w), w), x, _scalar(b, 0, x))


@lowers(ew.HardSigmoid)
def _hard_sigmoid(b: Lowerer, node: Node) -> NodeValue:
    # hardsigmoid(x) -> min(max(x * alpha + beta, 0), 1)
    x = node.input
    w = cast_to(b, x, _scalar_elem(x))
    line = b.add(ew.Add, b.add(ew.Mul, w, _scalar(b, node.alpha, w)), _scalar(b, node.beta, w))
    return cast_to(b, _clamp01(b, line), x.type.elem)


@lowers(ew.HardSwish)
def _hard_swish(b: Lowerer, node: Node) -> NodeValue:
    # hardswish(x) -> x * min(max(x / 6 + 0.5, 0), 1)
    x = node.input
    w = cast_to(b, x, _scalar_elem(x))
    line = b.add(ew.Add, b.add(ew.Div, w, _scalar(b, 6, w)), _scalar(b, 0.5, w))
    return cast_to(b, b.add(ew.Mul, w, _clamp01(b, line)), x.type.elem)


@lowers(ew.Softsign)
def _softsign(b: Lowerer, node: Node) -> NodeValue:
    # softsign(x) -> x / (1 + abs(x))
    x = node.input
    w = cast_to(b, x, _scalar_elem(x))
    return cast_to(b, b.add(ew.Div, w, b.add(ew.Add, _scalar(b, 1, w), b.add(ew.Abs, w))), x.type.elem)


@lowers(ew.Clip)
def _clip(b: Lowerer, node: Node) -> NodeValue:
    """The bounds convert to x's kind at compile time exactly as the reference kernel converts them
    (so an integer bound of 2.7 is 2); an infinite bound is no bound."""
    # clip(x) -> min(max(x, lo), hi), either side left out when unbounded
    out = node.input
    dtype = node.type.dtype
    if node.min > -np.inf:
        out = b.add(ew.Max, out, b.constant(np.asarray(node.min).astype(dtype), "min"))
    if node.max < np.inf:
        out = b.add(ew.Min, out, b.constant(np.asarray(node.max).astype(dtype), "max"))
    return out


# -- exponential activations ----------------------------------------------------------------------
def _expm1(b: Lowerer, x: NodeValue) -> NodeValue:
    """e**x - 1 without the cancellation of exp(x) - 1 near 0, in x's kind.

    Kahan's formula (u - 1) * x / log(u) with u = e**x, used for |x| < 1 (where the
    errors of u in u - 1 and log(u) cancel) with x itself where u rounds to 1; beyond,
    u - 1 loses nothing. Half kinds compute in float32 and round once, as numpy's
    expm1 does. Error: a few units in the last place of the compute kind.
    """
    w = cast_to(b, x, compute_elem(x))
    u = b.add(ew.Exp, w)
    u_minus_1 = b.add(ew.Sub, u, _scalar(b, 1, w))
    kahan = b.add(ew.Div, b.add(ew.Mul, u_minus_1, w), b.add(ew.Log, u))
    near_zero = b.add(ew.Where, b.add(ew.Equal, u, _scalar(b, 1, w)), w, kahan)
    small = b.add(ew.Less, b.add(ew.Mul, w, w), _scalar(b, 1, w))
    return cast_to(b, b.add(ew.Where, small, near_zero, u_minus_1), x.type.elem)


@lowers(ew.Elu)
def _elu(b: Lowerer, node: Node) -> NodeValue:
    """Error: that of expm1 (a few units in the last place), then the reference's own roundings
    (expm1 rounded to x's kind, the rest in `_scalar_elem`)."""
    # elu(x) -> where(0 < x, x, expm1(x) * alpha)
    x = node.input
    w = cast_to(b, x, _scalar_elem(x))
    negative = b.add(ew.Mul, cast_to(b, _expm1(b, x), w.type.elem), _scalar(b, node.alpha, w))
    elu = b.add(ew.Where, b.add(ew.Less, _scalar(b, 0, w), w), w, negative)
    return cast_to(b, elu, x.type.elem)


@lowers(ew.Selu)
def _selu(b: Lowerer, node: Node) -> NodeValue:
    """Error: that of expm1 (a few units in the last place), then the reference's own roundings
    (expm1 rounded to x's kind, the rest in `_scalar_elem`)."""
    # selu(x) -> where(0 < x, x, expm1(x) * alpha) * gamma
    x = node.input
    w = cast_to(b, x, _scalar_elem(x))
    negative = b.add(ew.Mul, cast_to(b, _expm1(b, x), w.type.elem), _scalar(b, node.alpha, w))
    elu = b.add(ew.Where, b.add(ew.Less, _scalar(b, 0, w), w), w, negative)
    return cast_to(b, b.add(ew.Mul, elu, _scalar(b, node.gamma, w)), x.type.elem)


@lowers(ew.Celu)
def _celu(b: Lowerer, node: Node) -> NodeValue:
    """Error: that of expm1 (a few units in the last place), then the reference's own roundings."""
    # celu(x) -> max(x, 0) + min(0, expm1(x / alpha) * alpha)
    x = node.input
    w = cast_to(b, x, _scalar_elem(x))
    alpha = _scalar(b, node.alpha, w)
    negative = b.add(ew.Mul, _expm1(b, b.add(ew.Div, w, alpha)), alpha)
    celu = b.add(ew.Add, b.add(ew.Max, w, _scalar(b, 0, w)), b.add(ew.Min, _scalar(b, 0, w), negative))
    return cast_to(b, celu, x.type.elem)


def _softplus(b: Lowerer, w: NodeValue) -> NodeValue:
    """log(1 + e**w) = max(w, 0) + log1p(e**-|w|), which neither overflows nor cancels.

    log1p(t) for t in [0, 1] is Kahan's log(u) * t / (u - 1) with u = 1 + t (u - 1 is
    exact there), or t where u rounds to 1. Error: a few units in the last place.
    """
    t = b.add(ew.Exp, b.add(ew.Min, w, _negate(b, w)))
    u = b.add(ew.Add, _scalar(b, 1, w), t)
    kahan = b.add(ew.Div, b.add(ew.Mul, b.add(ew.Log, u), t), b.add(ew.Sub, u, _scalar(b, 1, w)))
    log1p = b.add(ew.Where, b.add(ew.Equal, u, _scalar(b, 1, w)), t, kahan)
    return b.add(ew.Add, b.add(ew.Max, w, _scalar(b, 0, w)), log1p)


@lowers(ew.Softplus)
def _softplus_rule(b: Lowerer, node: Node) -> NodeValue:
    """Computed in float32 for half kinds (the reference: float64, rounded once); error: a few
    units in the last place of the compute kind."""
    # softplus(x) -> max(x, 0) + log1p(exp(min(x, -x)))
    x = node.input
    return cast_to(b, _softplus(b, cast_to(b, x, compute_elem(x))), x.type.elem)


@lowers(ew.Mish)
def _mish(b: Lowerer, node: Node) -> NodeValue:
    """Computed in float32 for half kinds (the reference: float64, rounded once); error: a few
    units in the last place of the compute kind."""
    # mish(x) -> x * tanh(softplus(x))
    x = node.input
    w = cast_to(b, x, compute_elem(x))
    return cast_to(b, b.add(ew.Mul, w, b.add(ew.Tanh, _softplus(b, w))), x.type.elem)


@lowers(ew.Sigmoid)
def _sigmoid(b: Lowerer, node: Node) -> NodeValue:
    """1 / (1 + e**-x) cannot overflow (e**-x = inf gives 0) nor cancel. Computed in float32
    for half kinds (the reference: float64, rounded once); error: at most 3 units in the last
    place of the compute kind, except that results below its smallest normal number (x < -87
    in float32) lose their precision or flush to 0."""
    # sigmoid(x) -> 1 / (1 + exp(x * -1))
    x = node.input
    w = cast_to(b, x, compute_elem(x))
    one = _scalar(b, 1, w)
    return cast_to(b, b.add(ew.Div, one, b.add(ew.Add, one, b.add(ew.Exp, _negate(b, w)))), x.type.elem)


@lowers(ew.Silu)
def _silu(b: Lowerer, node: Node) -> NodeValue:
    """x times the lowered Sigmoid of x: that rule's error, then one rounding of the product."""
    # silu(x) -> x * sigmoid(x)
    x = node.input
    return b.add(ew.Mul, x, b.add(ew.Sigmoid, x))


@lowers(ew.Gelu)
def _gelu(b: Lowerer, node: Node) -> NodeValue:
    """Computed in float32 for half kinds (the reference: float64, rounded once).

    The tanh form uses 1 + tanh(z) = 2 / (1 + e**(-2z)), which does not cancel where tanh
    nears -1: relative error about |2z| + 3 units of roundoff of the compute kind (the
    rounding of z, amplified by exp), and for x below about -3 the reference's own
    cancellation error (at most about |x| * 2**-53, absolute) on top. The exact form scales x
    by the rounded 1 / sqrt(2), a multiply (a divide by sqrt(2) would cost a backend's divider
    per element), within an ulp of x / sqrt(2): a relative error erf keeps. It has no identity
    like the tanh form's among the primitives: where erf nears -1 (x below about -3), 1 + erf
    cancels and the absolute error is about |x| * 2**-p (p: the compute kind's precision,
    24 for float32), as in any implementation of this formula; elsewhere a few units in the
    last place.
    """
    # gelu(x) -> x * 0.5 * (1 + erf(x * (1 / sqrt(2))))
    # gelu(x, tanh) -> x / (1 + exp((x + 0.044715 * x * x * x) * -2 * sqrt(2 / pi)))
    x = node.input
    w = cast_to(b, x, compute_elem(x))
    one = _scalar(b, 1, w)
    if node.approximate == "tanh":
        cube = b.add(ew.Mul, b.add(ew.Mul, w, w), w)
        inner = b.add(ew.Add, w, b.add(ew.Mul, cube, _scalar(b, 0.044715, w)))
        exp = b.add(ew.Exp, b.add(ew.Mul, inner, _scalar(b, -2 * math.sqrt(2 / math.pi), w)))
        gelu = b.add(ew.Div, w, b.add(ew.Add, one, exp))
    else:
        curve = b.add(ew.Erf, b.add(ew.Mul, w, _scalar(b, 1 / math.sqrt(2), w)))
        gelu = b.add(ew.Mul, b.add(ew.Mul, w, _scalar(b, 0.5, w)), b.add(ew.Add, one, curve))
    return cast_to(b, gelu, x.type.elem)
