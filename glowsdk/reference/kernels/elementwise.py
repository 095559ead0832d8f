"""Reference kernels of the element-wise node kinds."""
from __future__ import annotations

import numpy as np

from ...graph.nodes import elementwise as ew
from ..registry import kernel
from . import convert
from .quant import offset_shifted, same_type_add, wrap_int32


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, |error| < 1.2e-7 (a Chebyshev fit of erfc), computed in float64.

    numpy has no erf and scipy is not a dependency; this precision is far below
    float32 rounding of the results it feeds.
    """
    z = np.abs(x.astype(np.float64))
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277))))))))
    erfc = t * np.exp(poly)
    return np.where(x >= 0, 1.0 - erfc, erfc - 1.0)


_UNARY = {
    ew.Neg: np.negative, ew.Abs: np.abs, ew.Sign: np.sign, ew.Sqrt: np.sqrt,
    ew.Reciprocal: np.reciprocal, ew.Exp: np.exp, ew.Log: np.log, ew.Floor: np.floor,
    ew.Ceil: np.ceil, ew.Round: np.round, ew.Sin: np.sin, ew.Cos: np.cos, ew.Tanh: np.tanh,
    ew.Erf: erf, ew.Not: np.logical_not, ew.IsNaN: np.isnan,
    ew.Relu: lambda x: np.maximum(x, 0).astype(x.dtype),
    ew.Sigmoid: lambda x: 1.0 / (1.0 + np.exp(-x.astype(np.float64))),
    ew.HardSwish: lambda x: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0),
    ew.Silu: lambda x: x / (1.0 + np.exp(-x.astype(np.float64))),
    ew.Softplus: lambda x: np.logaddexp(0.0, x.astype(np.float64)),
    ew.Softsign: lambda x: x / (1.0 + np.abs(x)),
    ew.Mish: lambda x: x * np.tanh(np.logaddexp(0.0, x.astype(np.float64))),
}
for _kind, _fn in _UNARY.items():
    kernel(_kind)(lambda node, x, _fn=_fn: _fn(x))

_BINARY = {
    ew.Max: np.maximum, ew.Min: np.minimum, ew.And: np.logical_and, ew.Or: np.logical_or, ew.Xor: np.logical_xor,
    ew.Equal: np.equal, ew.Less: np.less, ew.LessOrEqual: np.less_equal, ew.Greater: np.greater,
    ew.GreaterOrEqual: np.greater_equal,
}
for _kind, _fn in _BINARY.items():
    kernel(_kind)(lambda node, x, y, _fn=_fn: _fn(x, y))  # quantized Max/Min: the raw q of one type order alike


@kernel(ew.Add)
def _add(node, x, y):
    return same_type_add(x, y, node.type, 1) if node.type.elem.is_quantized else np.add(x, y)


@kernel(ew.Sub)
def _sub(node, x, y):
    return same_type_add(x, y, node.type, -1) if node.type.elem.is_quantized else np.subtract(x, y)


@kernel(ew.Mul)
def _mul(node, x, y):
    if node.type.elem.is_quantized:
        return wrap_int32(offset_shifted(x, node.lhs.type) * offset_shifted(y, node.rhs.type))
    return np.multiply(x, y)


@kernel(ew.Div)
def _div(node, x, y):
    if node.type.elem.is_integer:
        # Exact truncating division (C semantics) in the integers: floor, then step toward zero.
        safe = np.where(y == 0, 1, y).astype(x.dtype)
        quotient = np.floor_divide(x, safe)
        inexact = np.remainder(x, safe) != 0
        toward_zero = inexact & ((x < 0) != (safe < 0))
        return (quotient + toward_zero).astype(x.dtype)
    return np.true_divide(x, y)


@kernel(ew.Mod)
def _mod(node, x, y):
    return np.fmod(x, y) if node.fmod else np.mod(x, y)


@kernel(ew.Pow)
def _pow(node, base, exponent):
    if node.type.elem.is_integer:
        return np.power(base.astype(np.float64), exponent.astype(np.float64))
    return np.power(base, exponent.astype(base.dtype))


@kernel(ew.PRelu)
def _prelu(node, x, slope):
    return np.where(x < 0, x * slope, x)


@kernel(ew.Where)
def _where(node, cond, x, y):
    return np.where(cond, x, y)


@kernel(ew.IsInf)
def _isinf(node, x):
    return (np.isposinf(x) & node.detect_positive) | (np.isneginf(x) & node.detect_negative)


@kernel(ew.LeakyRelu)
def _leaky_relu(node, x):
    return np.where(x >= 0, x, node.alpha * x)


@kernel(ew.Elu)
def _elu(node, x):
    return np.where(x > 0, x, node.alpha * np.expm1(x))


@kernel(ew.Selu)
def _selu(node, x):
    return node.gamma * np.where(x > 0, x, node.alpha * np.expm1(x))


@kernel(ew.Celu)
def _celu(node, x):
    return np.maximum(x, 0) + np.minimum(0, node.alpha * np.expm1(x / node.alpha))


@kernel(ew.HardSigmoid)
def _hard_sigmoid(node, x):
    return np.clip(node.alpha * x + node.beta, 0.0, 1.0)


@kernel(ew.Gelu)
def _gelu(node, x):
    x64 = x.astype(np.float64)
    if node.approximate == "tanh":
        return 0.5 * x64 * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x64 + 0.044715 * x64 ** 3)))
    return 0.5 * x64 * (1.0 + erf(x64 / np.sqrt(2.0)))


@kernel(ew.ThresholdedRelu)
def _thresholded_relu(node, x):
    return np.where(x > node.alpha, x, 0)


@kernel(ew.Clip)
def _clip(node, x):
    out = x
    if node.min > -np.inf:
        out = np.maximum(out, np.asarray(node.min).astype(x.dtype))
    if node.max < np.inf:
        out = np.minimum(out, np.asarray(node.max).astype(x.dtype))
    return out


@kernel(ew.Cast)
def _cast(node, x):
    return convert.cast(x, node.to, node.saturate, node.round_mode)
