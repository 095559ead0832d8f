"""Quantization node kinds (paper 4.1): converting between float and quantized
types, requantizing, and integer compute on 8-bit operands.

A quantized type carries one scale and one offset: value = (q - offset) * scale.
Rounding is always half to even and every conversion into an integer kind
saturates to that kind's range. Integer requantization uses a fixed-point
multiplier and shift (`fixed_point_multiplier`), the rule an integer-only device
implements (the NPU's REQUANT, glowsdk/numerics.py). Quantized values travel as their raw integers;
`Reinterpret` attaches or strips the scale and offset without touching them.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ... import numerics
from ..kinds import define_node
from ..node import Node, NodeValue
from ..spec import elem_attr, int_attr, ints_attr, type_attr
from ..types import ElemKind, Type, broadcast_shapes
from .nn import windowed_shape
from .rules import is_float, require_elem

FAMILY = "quant"


def is_quantized(kind: ElemKind) -> bool:
    """a quantized kind"""
    return kind.is_quantized


def is_byte(kind: ElemKind) -> bool:
    """int8 or uint8"""
    return kind in (ElemKind.INT8, ElemKind.UINT8)


def storage(kind: ElemKind) -> ElemKind:
    """The plain kind whose raw integers hold `kind`'s elements."""
    return kind.quantized_storage if kind.is_quantized else kind


def integer_range(kind: ElemKind) -> tuple[int, int]:
    """The saturation bounds of an integer, narrow integer or quantized kind."""
    info = ml_dtypes.iinfo(kind.dtype)
    return int(info.min), int(info.max)


def fixed_point_multiplier(source_scale: float, result_scale: float) -> tuple[int, int]:
    """(M, s) with M * 2^-(31 + s) equal to float32(source_scale) / float32(result_scale), computed in float32.

    The float32 ratio has a 24-bit mantissa and M keeps 31 bits, so the
    representation is exact (ratios between about 2^-31 and 2^31) and
    round_half_even(q * M / 2^(31 + s)) is exactly ONNX's float requantization
    round_half_even(q * ratio) for every int32 q below 2^29 in magnitude.
    """
    ratio = np.float32(source_scale) / np.float32(result_scale)
    return numerics.quantize_multiplier(float(ratio))


SOFTMAX_TABLE_SIZE = 256
SOFTMAX_SHIFT = 8
"""An int8 Softmax divides 2^8 * e by the sum: its result's scale is 1/256."""


def softmax_precision(length: int) -> int:
    """k, the fixed-point bits of an int8 Softmax's exponentials over `length` elements: the largest
    (at most 30) with length * 2^k < 2^31, so their int32 sum cannot overflow."""
    k = min(30, 31 - int(length).bit_length())
    if k < SOFTMAX_SHIFT:
        raise ValueError(f"an int8 Softmax over {length} elements leaves too few fixed-point bits ({k})")
    return k


def softmax_table(scale: float, length: int) -> np.ndarray:
    """T[j] = round_half_even(2^k * exp(-scale * j)) for j < 256, int64: the exponentials of an int8
    Softmax whose input has `scale`, as a difference of j steps below the group's maximum."""
    k = softmax_precision(length)
    steps = np.arange(SOFTMAX_TABLE_SIZE, dtype=np.float64)
    return np.rint(np.ldexp(np.exp(-np.float64(np.float32(scale)) * steps), k)).astype(np.int64)


TABLE_SIZE = 256
"""An int8 lookup table has one entry per int8 code."""


def code_values(type_: Type) -> np.ndarray:
    """The real values of the 256 codes of a per-tensor int8q type, in float64 from its float32 scale: entry i is
    (i - 128 - offset) * scale, the value of code i - 128."""
    codes = np.arange(-128, 128, dtype=np.float64)
    return (codes - type_.offset) * np.float64(np.float32(type_.scale))


def lookup_table(f, source: Type, result: Type) -> np.ndarray:
    """T[i] = clamp(round_half_even(f(x_i) / s_out) + z_out, -128, 127) for the codes' values x_i (`code_values`
    of `source`), with f evaluated in float64 and s_out the result's float32 scale as float64: int8, the table
    of TableLookup computing f from `source` to `result`. NaN results have no code: ValueError."""
    y = np.asarray(f(code_values(source)), dtype=np.float64)
    if not np.isfinite(y).all():
        raise ValueError("the function is not finite on every code of the input type")
    scaled = np.rint(y / np.float64(np.float32(result.scale)))
    return np.clip(scaled + result.offset, -128, 127).astype(np.int8)


def real_range(type_: Type) -> tuple[float, float]:
    """The smallest and largest real values a per-tensor quantized type represents."""
    low, high = integer_range(type_.elem)
    return (low - type_.offset) * type_.scale, (high - type_.offset) * type_.scale


def covering_type(types: list[Type], shape: tuple[int, ...]) -> Type:
    """A per-tensor int8q type whose range holds every range of `types` (the last one if it already does).

    A same-type Add or Sub saturates its operands to the shared type, so they
    meet in a type that holds the operands' ranges and the result's.
    """
    ranges = [real_range(t) for t in types]
    low, high = min(r[0] for r in ranges), max(r[1] for r in ranges)
    for t, r in zip(reversed(types), reversed(ranges)):
        if r[0] <= low and r[1] >= high and t.elem is ElemKind.QINT8:
            return t.with_shape(shape)
    scale = float(np.float32((high - low) / 255.0))
    return Type(ElemKind.QINT8, shape, scale, int(np.clip(round(-128 - low / scale), -128, 127)))


def _result_type(node: Node) -> Type:
    """The `result_type` attribute, which must keep the operand's shape."""
    if node.result_type.shape != node.input.type.shape:
        raise node.fail(f"result_type {node.result_type} must have the operand's shape "
                        f"{list(node.input.type.shape)}")
    return node.result_type


def _quantize_type(node: Node) -> Type:
    require_elem(node, node.input.type, is_float, "input")
    require_elem(node, node.result_type, is_quantized, "result_type")
    if not node.precision.is_float:
        raise node.fail(f"precision must be a float kind, got {node.precision.value}")
    return _result_type(node)


def _dequantize_type(node: Node) -> Type:
    require_elem(node, node.input.type, is_quantized, "input")
    if not node.elem.is_float:
        raise node.fail(f"elem must be a float kind, got {node.elem.value}")
    return node.input.type.with_elem(node.elem)


def _rescale_type(node: Node) -> Type:
    require_elem(node, node.input.type, is_quantized, "input")
    require_elem(node, node.result_type, is_quantized, "result_type")
    return _result_type(node)


def _reinterpret_type(node: Node) -> Type:
    source, target = node.input.type, node.result_type
    if storage(source.elem) is not storage(target.elem) or not (source.elem.is_quantized
                                                                 or target.elem.is_quantized):
        raise node.fail(f"cannot reinterpret {source} as {target}: one side must be quantized "
                        f"and both must be stored as the same integers")
    return _result_type(node)


Quantize = define_node(
    "Quantize", "input", attrs=[type_attr("result_type"), elem_attr("precision", ElemKind.FLOAT32)],
    infer=_quantize_type, family=FAMILY,
    doc="Float to quantized: q = saturate(round_half_even(x / scale) + offset), with the scale and "
        "offset of `result_type`. x and the scale are first rounded to the float kind `precision`, "
        "and the division is done in it (ONNX: the kind of y_scale, or the precision attribute).")

Dequantize = define_node(
    "Dequantize", "input", attrs=[elem_attr("elem")], infer=_dequantize_type, family=FAMILY,
    doc="Quantized to float: y = (float32(q) - float32(offset)) * float32(scale), computed in "
        "float32 and rounded once to the float kind `elem` (as ONNX DequantizeLinear does).")

Rescale = define_node(
    "Rescale", "input", attrs=[type_attr("result_type")], infer=_rescale_type, family=FAMILY,
    doc="Requantize to another scale and offset in integers only: with the fixed-point multiplier "
        "(M, s) of m = float32(scale) / float32(scale') (M < 2^31, M * 2^-(31+s) = m exactly), "
        "q' = saturate(round_half_even((q - offset) * M / 2^(31+s)) + offset'), computed in int64. "
        "This is how an int32 accumulator of scale s_a * s_b becomes an 8-bit output (the NPU's "
        "REQUANT), bit-exact with onnx.reference's float QLinear requantization for accumulators "
        "below 2^29.")

Reinterpret = define_node(
    "Reinterpret", "input", attrs=[type_attr("result_type")], infer=_reinterpret_type, family=FAMILY,
    doc="The same raw integers under another type: attach a scale and offset to plain integers, "
        "strip them, or swap them, between kinds stored alike (uint8 and uint8q, int8 and int8q, "
        "int32 and int32q). No data changes.")


def _check_zero(node: Node, operand: Type, zero: NodeValue | None, what: str) -> None:
    if zero is not None and zero.type.elem is not operand.elem:
        raise node.fail(f"{what} zero point is {zero.type}, expected element kind {operand.elem.value}")


def _matmul_type(node: Node) -> Type:
    lhs, rhs = node.lhs.type, node.rhs.type
    for value, what in ((lhs, "lhs"), (rhs, "rhs")):
        require_elem(node, value, is_byte, what)
        if value.rank < 2:
            raise node.fail(f"{what} must have rank >= 2, got {value}")
    if lhs.shape[-1] != rhs.shape[-2]:
        raise node.fail(f"cannot multiply {lhs} by {rhs}: inner dims differ")
    _check_zero(node, lhs, node.lhs_zero, "lhs")
    _check_zero(node, rhs, node.rhs_zero, "rhs")
    if node.lhs_zero is not None and node.lhs_zero.type.size != 1:
        raise node.fail(f"lhs zero point must be a single value, got {node.lhs_zero.type}")
    if node.rhs_zero is not None:
        zero = node.rhs_zero.type.shape
        if broadcast_shapes(rhs.shape, zero) != rhs.shape or (len(zero) >= 2 and zero[-2] != 1):
            raise node.fail(f"rhs zero point {node.rhs_zero.type} must be one value or one per "
                            f"column of {rhs}")
    batch = broadcast_shapes(lhs.shape[:-2], rhs.shape[:-2])
    return Type(ElemKind.INT32, (*batch, lhs.shape[-2], rhs.shape[-1]))


IntegerMatMul = define_node(
    "IntegerMatMul", "lhs rhs lhs_zero? rhs_zero?", infer=_matmul_type, family=FAMILY,
    doc="int32 = (lhs - lhs_zero) @ (rhs - rhs_zero) on int8/uint8 operands (ONNX MatMulInteger), "
        "numpy matmul broadcasting over leading dims. lhs_zero is one value; rhs_zero is one value or "
        "one per column (broadcasting against rhs). The sum is exact; results outside int32 are "
        "undefined, as in ONNX.")


def _conv_type(node: Node) -> Type:
    x, w = node.input.type, node.filter.type
    require_elem(node, x, is_byte, "input")
    require_elem(node, w, is_byte, "filter")
    if x.rank < 3 or w.rank != x.rank:
        raise node.fail(f"input {x} and filter {w} must have the same rank >= 3")
    if tuple(node.kernel) != w.shape[2:]:
        raise node.fail(f"kernel {list(node.kernel)} differs from the filter's spatial shape {list(w.shape[2:])}")
    group, filters = node.group, w.shape[0]
    if group < 1 or x.shape[1] % group or filters % group or w.shape[1] * group != x.shape[1]:
        raise node.fail(f"filter {w} does not fit input {x} with group={group}")
    _check_zero(node, x, node.input_zero, "input")
    _check_zero(node, w, node.filter_zero, "filter")
    if node.input_zero is not None and node.input_zero.type.size != 1:
        raise node.fail(f"input zero point must be a single value, got {node.input_zero.type}")
    if node.filter_zero is not None and node.filter_zero.type.shape not in ((), (1,), (filters,)):
        raise node.fail(f"filter zero point {node.filter_zero.type} must be one value or one per filter")
    if node.bias is not None and node.bias.type != Type(ElemKind.INT32, (filters,)):
        raise node.fail(f"bias must be int32<{filters}>, got {node.bias.type}")
    return Type(ElemKind.INT32, (x.shape[0], filters) + windowed_shape(node, x.shape[2:]))


IntegerConv = define_node(
    "IntegerConv", "input filter input_zero? filter_zero? bias?",
    attrs=[ints_attr("kernel"), ints_attr("strides"), ints_attr("pads", doc="[begin.., end..] per spatial axis"),
           ints_attr("dilations"), int_attr("group", 1)],
    infer=_conv_type, family=FAMILY,
    doc="int32 = conv(input - input_zero, filter - filter_zero) + bias: grouped N-d cross-correlation "
        "(NCHW input, M x C/group x K.. filter, explicit zero padding of the shifted input) on "
        "int8/uint8 operands, as ONNX ConvInteger and the accumulator of QLinearConv. input_zero is "
        "one value; filter_zero is one value or one per output channel; bias is int32 per output "
        "channel. The sum is exact; results outside int32 are undefined, as in ONNX.")


def _table_lookup_type(node: Node) -> Type:
    x, table = node.input.type, node.table.type
    for value, what in ((x, "input"), (table, "table")):
        if value.elem is not ElemKind.QINT8 or value.per_channel:
            raise node.fail(f"{what} must be per-tensor int8q, got {value}")
    if table.shape != (TABLE_SIZE,):
        raise node.fail(f"table must hold {TABLE_SIZE} entries, got {table}")
    return table.with_shape(x.shape)


TableLookup = define_node(
    "TableLookup", "input table", infer=_table_lookup_type, family=FAMILY,
    doc="A unary function of an int8 tensor as a table of its 256 codes: q' = table[q + 128]. The result has "
        "the table's type (its scale and offset) at the input's shape. The quantizer builds the table of a float "
        "unary node (Sigmoid, Tanh, Gelu...) with `lookup_table`; the NPU runs it as LUT, a host as a Gather.")


def _integer_layer_norm_type(node: Node) -> Type:
    x, out = node.input.type, node.result_type
    for value, what in ((x, "input"), (out, "result_type")):
        if value.elem is not ElemKind.QINT8 or value.per_channel:
            raise node.fail(f"{what} must be per-tensor int8q, got {value}")
    length = x.shape[-1] if x.shape else 0
    for value, what in ((node.gamma, "gamma"), (node.beta, "beta")):
        if value.type != Type(ElemKind.INT32, (length,)):
            raise node.fail(f"{what} must be int32<{length}> (one value per element of the last dim), "
                            f"got {value.type}")
    if not 1 <= node.shift <= 32:
        raise node.fail(f"shift {node.shift} outside 1..32")
    return out.with_shape(x.shape)


IntegerLayerNorm = define_node(
    "IntegerLayerNorm", "input gamma beta", attrs=[int_attr("epsilon"), int_attr("shift"), type_attr("result_type")],
    infer=_integer_layer_norm_type, family=FAMILY,
    doc="LayerNormalization over the last dim of an int8 tensor in integers only (layernorm_int8.py; "
        "vendor_guide/quantization.md): the mean and variance of the codes, an integer square root by Newton "
        "steps, the normalised value with 12 fraction bits times gamma, plus beta (int32, the result's scale "
        "times 2^-shift), rounded to the result type. The quantizer makes it from a LayerNorm a backend keeps "
        "unlowered (the NPU runs it on the vector engine).")
