"""Reference kernels of the quantization node kinds.

Quantized operands and results are raw integers; their scale and offset come
from the node's types. Integer products are accumulated in float64, which is
exact for 8-bit operands (|sum| stays far below 2**53) and runs on BLAS.
"""
from __future__ import annotations

import numpy as np


from ... import numerics
from ...graph.nodes import quant
from ...graph.nodes.layernorm_int8 import integer_layernorm
from ...graph.types import Type
from ..registry import kernel
from .windows import conv


def saturate(values: np.ndarray, type_: Type) -> np.ndarray:
    """Already-rounded float values clamped into `type_`'s integer range, as its raw dtype."""
    low, high = quant.integer_range(type_.elem)
    return np.clip(values, low, high).astype(type_.dtype)


@kernel(quant.Quantize)
def _quantize(node, x):
    out = node.type
    precision = node.precision.dtype
    scaled = np.rint(x.astype(precision) / out.scales.astype(precision))
    return saturate(scaled.astype(np.float64) + out.offsets, out)


@kernel(quant.Dequantize)
def _dequantize(node, q):
    source = node.input.type
    shifted = q.astype(np.float32) - source.offsets.astype(np.float32)
    return (shifted * source.scales.astype(np.float32)).astype(node.type.dtype)


@kernel(quant.Rescale)
def _rescale(node, q):
    source, out = node.input.type, node.type
    pairs = np.vectorize(quant.fixed_point_multiplier, otypes=[np.int64, np.int64])
    multiplier, shift = pairs(*np.broadcast_arrays(source.scales, out.scales))
    scaled = numerics.round_shift((q.astype(np.int64) - source.offsets) * multiplier, 31 + shift)
    return saturate(scaled + out.offsets, out)


@kernel(quant.TableLookup)
def _table_lookup(node, q, table):
    return table[q.astype(np.int64) + 128]


@kernel(quant.Reinterpret)
def _reinterpret(node, q):
    return q


def wrap_int32(exact: np.ndarray) -> np.ndarray:
    """Exact integer sums (held in int64 or float64) reduced modulo 2^32, as the NPU's accumulators do."""
    return exact.astype(np.int64).astype(np.int32)


def offset_shifted(values: np.ndarray, type_: Type) -> np.ndarray:
    """q - offset of a quantized operand, in float64 (exact for 8-bit kinds, and BLAS-fast)."""
    return values.astype(np.float64) - type_.offsets


def same_type_add(x: np.ndarray, y: np.ndarray, type_: Type, sign: int) -> np.ndarray:
    """Add (sign 1) or Sub (sign -1) of quantized operands sharing `type_`: saturate(q_x +- q_y -+ offset)."""
    exact = x.astype(np.int64) + sign * y.astype(np.int64) - sign * type_.offsets
    return saturate(exact, type_)


def _shifted(values: np.ndarray, zero: np.ndarray | None) -> np.ndarray:
    """values - zero in float64 (exact for 8-bit integers)."""
    out = values.astype(np.float64)
    return out if zero is None else out - zero.astype(np.float64)


@kernel(quant.IntegerMatMul)
def _integer_matmul(node, lhs, rhs, lhs_zero, rhs_zero):
    lhs_zero = None if lhs_zero is None else lhs_zero.reshape(())
    return np.matmul(_shifted(lhs, lhs_zero), _shifted(rhs, rhs_zero)).astype(np.int32)


@kernel(quant.IntegerConv)
def _integer_conv(node, x, w, x_zero, w_zero, bias):
    k = x.ndim - 2
    x_zero = None if x_zero is None else x_zero.reshape(())
    if w_zero is not None and w_zero.size > 1:
        w_zero = w_zero.reshape((-1,) + (1,) * (k + 1))
    acc = conv(_shifted(x, x_zero), _shifted(w, w_zero), strides=node.strides, pads=node.pads,
               dilations=node.dilations, group=node.group, acc_dtype=np.float64)
    if bias is not None:
        acc += bias.astype(np.float64).reshape((-1,) + (1,) * k)
    return acc.astype(np.int32)


@kernel(quant.IntegerLayerNorm)
def _integer_layer_norm(node, x, gamma, beta):
    return integer_layernorm(x, node.input.type.shape[-1], gamma, beta, node.epsilon, node.shift,
                             node.type.offset)
