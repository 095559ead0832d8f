"""Converters of the ONNX quantization ops (opsets 10..28).

Two paths, both exact:
- typed: a compile-time, per-tensor, positive scale and zero point become a
  quantized type (paper 4.1). QuantizeLinear to int8/uint8 is a `Quantize`,
  DequantizeLinear from int8/uint8/int32 a `Dequantize` (after a `Reinterpret`
  attaches the scale and offset to plain integers), and a QLinear op whose
  scales are float32 requantizes its int32 accumulator with `Rescale`.
- element-wise: any other form (per-axis or blocked scales, 16-bit and narrow
  kinds, float16 QLinear scales, scales computed at run time) is spelled with
  Cast, Div, Mul, Sub, Add, Round and Clip, mirroring ONNX's formulas operation
  by operation; quantizing to a float8 kind or float4e2m1 ends in one rounding
  Cast (saturating unless the node says saturate=0). Per-axis and blocked
  scales must be known at compile time (they are expanded to broadcast against
  the input); per-tensor ones may be run-time values.
MatMulInteger and ConvInteger are `IntegerMatMul` and `IntegerConv`. QLinearConv
and QLinearMatMul with compile-time float32 scales (per tensor, or per output
channel for the weights when their zero points are 0) import onto the same
quantized IR that glowsdk's own quantizer produces: Conv or MatMul on quantized
operands, an int32 accumulator, and a `Rescale`; their other forms accumulate with
`IntegerConv` / `IntegerMatMul`.
"""
from __future__ import annotations

import math

import numpy as np

from ....graph.node import NodeValue
from ....graph.nodes import elementwise as ew
from ....graph.nodes import linalg, nn
from ....graph.nodes import quant as q
from ....graph.types import ElemKind, Type, broadcast_shapes
from ..context import OnnxNode, elem_of_onnx
from ..registry import converter
from .nn import window_attrs

_QUANTIZED = {ElemKind.INT8: ElemKind.QINT8, ElemKind.UINT8: ElemKind.QUINT8, ElemKind.INT32: ElemKind.QINT32}
_INTEGER_TARGETS = (ElemKind.INT8, ElemKind.UINT8, ElemKind.INT16, ElemKind.UINT16, ElemKind.INT4,
                    ElemKind.UINT4, ElemKind.INT2, ElemKind.UINT2)
_FLOAT_TARGETS = (ElemKind.FLOAT8E4M3FN, ElemKind.FLOAT8E4M3FNUZ, ElemKind.FLOAT8E5M2,
                  ElemKind.FLOAT8E5M2FNUZ, ElemKind.FLOAT4E2M1)
_QUANTIZE_TARGETS = (*_INTEGER_TARGETS, *_FLOAT_TARGETS)
_DEQUANTIZE_SOURCES = (*_QUANTIZE_TARGETS, ElemKind.INT32)

Operand = NodeValue | np.ndarray
"""A value for the element-wise path: a graph value, or a compile-time array."""


# -- helpers ----------------------------------------------------------------------------------
def plain(node: OnnxNode, value: NodeValue) -> NodeValue:
    """`value` as plain integers: quantized values lose their scale and offset."""
    if not value.type.elem.is_quantized:
        return value
    raw = Type(q.storage(value.type.elem), value.type.shape)
    return node.add(q.Reinterpret, value, suffix="raw", result_type=raw)


def _as_kind(node: OnnxNode, value: Operand, elem: ElemKind, suffix: str) -> NodeValue:
    """A graph value of kind `elem`: arrays become constants, other kinds get a Cast."""
    if isinstance(value, np.ndarray):
        return node.constant(value.astype(elem.dtype), suffix)
    if value.type.elem is elem:
        return value
    return node.add(ew.Cast, plain(node, value), suffix=f"{suffix}_{elem.value}", to=elem)


def _per_tensor(node: OnnxNode, scale_index: int, zero_index: int | None) -> tuple[float, int] | None:
    """(scale, zero point) if both are compile-time single values and the scale is positive."""
    zero_given = zero_index is not None and node.has_input(zero_index)
    if not node.is_const(scale_index) or (zero_given and not node.is_const(zero_index)):
        return None
    scale = node.const(scale_index, "the scale")
    zero = node.const(zero_index, "the zero point") if zero_given else np.zeros(1, np.int64)
    if scale.size != 1 or zero.size != 1:
        return None
    value = float(scale.reshape(()))
    if not (math.isfinite(value) and value > 0):
        return None
    return value, int(zero.reshape(()))


def _expand(node: OnnxNode, index: int, shape: tuple[int, ...], axis: int, block: int,
            what: str) -> Operand | None:
    """Input `index` (a scale or zero point) in a form that broadcasts against `shape`.

    Single values stay as they are (run-time values allowed); per-axis and
    blocked ones must be compile-time arrays and are expanded here, as ONNX's
    reference does (repeat each value `block` times along `axis`).
    """
    if not node.has_input(index):
        return None
    value = node.input(index)
    if value.type.size == 1 and value.type.rank <= len(shape):
        return value
    array = node.const(index, f"the per-axis {what}")
    if array.size == 1:
        return array.reshape(())
    if not -len(shape) <= axis < len(shape):
        raise node.error(f"axis {axis} is out of range for rank {len(shape)}")
    axis %= len(shape)
    if block <= 0:
        if array.ndim != 1 or array.shape[0] != shape[axis]:
            raise node.error(f"per-axis {what} has shape {list(array.shape)}, expected [{shape[axis]}] "
                             f"(axis {axis} of {list(shape)})")
        return array.reshape([shape[axis] if i == axis else 1 for i in range(len(shape))])
    blocks = array.shape[axis] if array.ndim == len(shape) else -1
    fits = array.ndim == len(shape) and all(a == s for i, (a, s) in enumerate(zip(array.shape, shape))
                                            if i != axis)
    if not fits or blocks * block < shape[axis] or (blocks - 1) * block >= shape[axis]:
        raise node.error(f"blocked {what} of shape {list(array.shape)} does not fit input {list(shape)} "
                         f"with block_size {block} on axis {axis}")
    return np.take(np.repeat(array, block, axis=axis), range(shape[axis]), axis=axis)


def _saturate_cast(node: OnnxNode, value: NodeValue, elem: ElemKind, rounded: bool = False) -> NodeValue:
    """Round half to even (unless already `rounded`), clamp into `elem`'s range, convert.

    `value` is float64, so the integer bounds of every kind are exact.
    """
    low, high = q.integer_range(elem)
    if not rounded:
        value = node.add(ew.Round, value, suffix="round")
    clamped = node.add(ew.Clip, value, suffix="saturate", min=float(low), max=float(high))
    return node.add(ew.Cast, clamped, to=elem)


def _axis_and_block(node: OnnxNode) -> tuple[int, int]:
    return int(node.attr("axis", 1)), int(node.attr("block_size", 0))


# -- QuantizeLinear / DequantizeLinear --------------------------------------------------------------
def _quantize_target(node: OnnxNode) -> ElemKind:
    """The result kind: output_dtype, else the zero point's kind, else uint8."""
    declared = node.attr("output_dtype", 0)
    target = elem_of_onnx(declared, f"node '{node.name}' output_dtype") if declared else None
    if node.has_input(2):
        zero = q.storage(node.input(2).type.elem)
        if target is not None and target is not zero:
            raise node.error(f"output_dtype {target.value} differs from the zero point's kind {zero.value}")
        target = zero
    target = target or ElemKind.UINT8
    if target not in _QUANTIZE_TARGETS:
        raise node.unsupported(f"quantizing to {target.value} (supported: "
                               f"{', '.join(k.value for k in _QUANTIZE_TARGETS)})")
    return target


def _precision(node: OnnxNode, x: Type, scale: Type) -> ElemKind:
    """The float kind the division x / scale is done in: the precision attribute, else numpy's
    promotion of x and the scale (a float8e8m0 scale, exact in float32, promotes as float32)."""
    declared = node.attr("precision", 0)
    if declared:
        precision = elem_of_onnx(declared, f"node '{node.name}' precision")
    else:
        scale_dtype = scale.dtype if scale.elem.is_float else np.dtype(np.float32)
        precision = ElemKind.from_dtype(np.result_type(x.dtype, scale_dtype))
    if not precision.is_float:
        raise node.error(f"precision must be a float kind, got {precision.value}")
    return precision


@converter("QuantizeLinear")
def _quantize_linear(node: OnnxNode):
    x, scale = node.input(0), node.input(1)
    if not (x.type.elem.is_float or x.type.elem is ElemKind.INT32):
        raise node.error(f"x must be float or int32, got {x.type}")
    target = _quantize_target(node)
    precision = _precision(node, x.type, scale.type)
    params = _per_tensor(node, 1, 2) if target in _QUANTIZED and x.type.elem.is_float else None
    if params is not None:
        result = Type(_QUANTIZED[target], x.type.shape, *params)
        return node.add(q.Quantize, x, result_type=result, precision=precision)
    axis, block = _axis_and_block(node)
    scale = _expand(node, 1, x.type.shape, axis, block, "scale")
    zero = _expand(node, 2, x.type.shape, axis, block, "zero point")
    ratio = node.add(ew.Div, _as_kind(node, x, precision, "x"), _as_kind(node, scale, precision, "scale"),
                     suffix="divide")
    if target in _FLOAT_TARGETS:
        if zero is not None:
            ratio = node.add(ew.Add, ratio, _as_kind(node, zero, precision, "zero_point"), suffix="shift")
        saturate = bool(node.attr("saturate", 1)) if target in ew.SATURATING else True
        return node.add(ew.Cast, ratio, to=target, saturate=saturate)
    rounded = node.add(ew.Round, ratio, suffix="round")
    shifted = _as_kind(node, rounded, ElemKind.FLOAT64, "rounded")
    if zero is not None:
        shifted = node.add(ew.Add, shifted, _as_kind(node, zero, ElemKind.FLOAT64, "zero_point"), suffix="shift")
    return _saturate_cast(node, shifted, target, rounded=True)


@converter("DequantizeLinear")
def _dequantize_linear(node: OnnxNode):
    x, scale = node.input(0), node.input(1)
    raw_kind = q.storage(x.type.elem)
    if raw_kind not in _DEQUANTIZE_SOURCES:
        raise node.unsupported(f"dequantizing {x.type} (supported: "
                               f"{', '.join(k.value for k in _DEQUANTIZE_SOURCES)})")
    if node.has_input(2) and q.storage(node.input(2).type.elem) is not raw_kind:
        raise node.error(f"the zero point {node.input(2).type} must have x's kind {raw_kind.value}")
    declared = node.attr("output_dtype", 0)
    out = elem_of_onnx(declared, f"node '{node.name}' output_dtype") if declared else scale.type.elem
    if not out.is_float:
        raise node.error(f"the result kind must be a float kind, got {out.value}")
    params = _per_tensor(node, 1, 2) if raw_kind in _QUANTIZED else None
    if params is not None:
        typed = Type(_QUANTIZED[raw_kind], x.type.shape, *params)
        if x.type != typed:
            typed_x = node.add(q.Reinterpret, x, suffix="typed", result_type=typed)
        else:
            typed_x = x
        return node.add(q.Dequantize, typed_x, elem=out)
    axis, block = _axis_and_block(node)
    scale = _expand(node, 1, x.type.shape, axis, block, "scale")
    zero = _expand(node, 2, x.type.shape, axis, block, "zero point")
    value = _as_kind(node, x, ElemKind.FLOAT32, "x")
    if zero is not None:
        value = node.add(ew.Sub, value, _as_kind(node, zero, ElemKind.FLOAT32, "zero_point"), suffix="shift")
    scaled = node.add(ew.Mul, value, _as_kind(node, scale, ElemKind.FLOAT32, "scale"),
                      suffix="" if out is ElemKind.FLOAT32 else "scaled")
    return scaled if out is ElemKind.FLOAT32 else node.add(ew.Cast, scaled, to=out)


# -- integer compute --------------------------------------------------------------------------
def _single_zero(node: OnnxNode, index: int, what: str) -> NodeValue | None:
    zero = node.input(index)
    if zero is not None and zero.type.size != 1:
        raise node.unsupported(f"{what} of shape {list(zero.type.shape)}: only a single zero point is supported")
    return None if zero is None else plain(node, zero)


def _integer_matmul(node: OnnxNode, a: int, a_zero: int, b: int, b_zero: int, suffix: str = "") -> NodeValue:
    rhs_zero = node.input(b_zero)
    return node.add(q.IntegerMatMul, plain(node, node.input(a)), plain(node, node.input(b)),
                    _single_zero(node, a_zero, "a_zero_point"),
                    None if rhs_zero is None else plain(node, rhs_zero), suffix=suffix)


def _integer_conv(node: OnnxNode, x: int, x_zero: int, w: int, w_zero: int, bias: int | None,
                  suffix: str = "") -> NodeValue:
    x_value, w_value = plain(node, node.input(x)), plain(node, node.input(w))
    filter_zero = node.input(w_zero)
    return node.add(q.IntegerConv, x_value, w_value, _single_zero(node, x_zero, "x_zero_point"),
                    None if filter_zero is None else plain(node, filter_zero),
                    None if bias is None else node.input(bias), suffix=suffix,
                    group=int(node.attr("group", 1)),
                    **window_attrs(node, x_value, node.attr("kernel_shape") or w_value.type.shape[2:]))


@converter("MatMulInteger")
def _matmul_integer(node: OnnxNode):
    return _integer_matmul(node, 0, 2, 1, 3)


@converter("ConvInteger")
def _conv_integer(node: OnnxNode):
    return _integer_conv(node, 0, 2, 1, 3, None)


# -- QLinear ops ------------------------------------------------------------------------------
def _requantize(node: OnnxNode, acc: NodeValue, scales: tuple[int, int, int], out_zero: int,
                channel_axis: int | None, fallback_kind: ElemKind) -> NodeValue:
    """The 8-bit output of an int32 accumulator whose scale is scales[0] * scales[1], for the output
    scale scales[2]: round(acc * (s0 * s1 / s2)) + zero, saturated, as onnx.reference computes it.

    A per-channel scales[1] (QLinearConv's w_scale) applies along `channel_axis` of the accumulator.
    """
    zero = node.input(out_zero)
    out = fallback_kind if zero is None else q.storage(zero.type.elem)
    first, second, third = scales
    lhs, rhs, result = _per_tensor(node, first, None), _per_tensor(node, second, None), \
        _per_tensor(node, third, out_zero)
    float32_scales = all(node.input(i).type.elem is ElemKind.FLOAT32 for i in scales)
    if lhs and rhs and result and float32_scales and out in _QUANTIZED:
        accumulated = float(np.float32(lhs[0]) * np.float32(rhs[0]))
        if math.isfinite(accumulated) and accumulated > 0:
            acc_q = node.add(q.Reinterpret, acc, suffix="accumulator",
                             result_type=Type(ElemKind.QINT32, acc.type.shape, accumulated, 0))
            return node.add(q.Rescale, acc_q, result_type=Type(_QUANTIZED[out], acc.type.shape, *result))
    second_value: Operand = node.input(second)
    if channel_axis is not None and second_value.type.size > 1:
        per_channel = node.const(second, "the per-channel w_scale")
        shape = [1] * acc.type.rank
        shape[channel_axis] = per_channel.size
        second_value = per_channel.reshape(shape)
    kind = node.input(first).type.elem
    product = node.add(ew.Mul, node.input(first), _as_kind(node, second_value, kind, "scale"),
                       suffix="scale_product")
    multiplier = node.add(ew.Div, product, node.input(third), suffix="multiplier")
    if broadcast_shapes(acc.type.shape, multiplier.type.shape) != acc.type.shape:
        raise node.error(f"the scales {multiplier.type} do not broadcast to the result {acc.type}")
    value = node.add(ew.Mul, _as_kind(node, acc, ElemKind.FLOAT64, "accumulator"),
                     _as_kind(node, multiplier, ElemKind.FLOAT64, "multiplier"), suffix="rescaled")
    if zero is not None:
        value = node.add(ew.Add, value, _as_kind(node, zero, ElemKind.FLOAT64, "y_zero_point"),
                         suffix="shifted")
    return _saturate_cast(node, value, out)


def _typed(node: OnnxNode, index: int, scale: int, zero: int, channel_axis: int | None = None) -> NodeValue | None:
    """Input `index` as a quantized value (float32 scale and zero point known at compile time), or None.

    A per-channel scale along `channel_axis` is accepted when every zero point is 0.
    """
    value = node.input(index)
    raw = q.storage(value.type.elem)
    if raw not in (ElemKind.INT8, ElemKind.UINT8) or node.input(scale).type.elem is not ElemKind.FLOAT32:
        return None
    params = _per_tensor(node, scale, zero)
    if params is not None:
        typed = Type(_QUANTIZED[raw], value.type.shape, *params)
    elif channel_axis is not None and node.is_const(scale) and (not node.has_input(zero) or node.is_const(zero)):
        scales = node.const(scale, "the per-channel scale").reshape(-1)
        zeros = node.const(zero, "the zero point").reshape(-1) if node.has_input(zero) else np.zeros(1)
        if scales.size != value.type.shape[channel_axis] or zeros.any() or not (scales > 0).all():
            return None
        typed = Type(_QUANTIZED[raw], value.type.shape, tuple(map(float, scales)), (0,) * scales.size, channel_axis)
    else:
        return None
    if value.type == typed:
        return value
    return node.add(q.Reinterpret, plain(node, value), suffix="typed", result_type=typed)


def _typed_output(node: OnnxNode, acc: NodeValue, scale: int, zero: int) -> NodeValue | None:
    """The Rescale of a typed accumulator to the y_scale / y_zero_point type, or None if those are not typed."""
    kind = q.storage(node.input(zero).type.elem) if node.has_input(zero) else q.storage(node.input(0).type.elem)
    params = _per_tensor(node, scale, zero)
    if params is None or kind not in (ElemKind.INT8, ElemKind.UINT8) or \
            node.input(scale).type.elem is not ElemKind.FLOAT32:
        return None
    return node.add(q.Rescale, acc, result_type=Type(_QUANTIZED[kind], acc.type.shape, *params))


@converter("QLinearMatMul")
def _qlinear_matmul(node: OnnxNode):
    a, b = _typed(node, 0, 1, 2), _typed(node, 3, 4, 5, channel_axis=node.input(3).type.rank - 1)
    if a is not None and b is not None and _per_tensor(node, 6, 7) is not None:
        typed = _typed_output(node, node.add(linalg.MatMul, a, b, suffix="accumulate"), 6, 7)
        if typed is not None:
            return typed
    acc = _integer_matmul(node, 0, 2, 3, 5, suffix="accumulate")
    return _requantize(node, acc, (1, 4, 6), 7, None, q.storage(node.input(0).type.elem))


@converter("QLinearConv")
def _qlinear_conv(node: OnnxNode):
    bias = 8 if node.has_input(8) else None
    x, w = _typed(node, 0, 1, 2), _typed(node, 3, 4, 5, channel_axis=0)
    if x is not None and w is not None and _per_tensor(node, 6, 7) is not None:
        attrs = dict(group=int(node.attr("group", 1)),
                     **window_attrs(node, x, node.attr("kernel_shape") or w.type.shape[2:]))
        typed_bias = None
        if bias is not None:
            typed_bias = node.add(q.Reinterpret, plain(node, node.input(bias)), suffix="bias",
                                  result_type=nn.quantized_bias_type(x.type, w.type))
        typed = _typed_output(node, node.add(nn.Conv, x, w, typed_bias, suffix="accumulate", **attrs), 6, 7)
        if typed is not None:
            return typed
    acc = _integer_conv(node, 0, 2, 3, 5, bias, suffix="accumulate")
    return _requantize(node, acc, (1, 4, 6), 7, 1, q.storage(node.input(0).type.elem))
