"""Optimisations of quantized graphs (paper 4.3), run by the QUANTIZATION pipeline.

The quantizer converts each node on its own, between a Quantize and a
Dequantize; these rules turn that into integer islands:
- merge-conversions: Quantize(Dequantize(q)) is q when the types agree, else one
  Rescale (one integer requantization instead of a float round trip);
- move-conversions: layout ops and max pooling commute exactly with both
  conversions (they move or pick values, and both conversions are monotone), so
  a Dequantize sinks below them and a Quantize rises above them, until the two
  meet and merge; the layout op then moves bytes, not floats. A Rescale, the
  only reader of a Concat, rises above it onto the parts (as many elements),
  where it can fold into each part's own conversion;
- fold-rescale: Rescale to the same type is nothing; Rescale(Rescale(q)) and
  Rescale(Quantize(x)) become one conversion with one rounding when the middle
  type clips nothing that the result keeps (a ReLU's clamp to its type's
  lowest value must survive a later widening Rescale); and a Max with
  the lowest value of its type (a ReLU whose output type starts at 0, so the
  requantization before it already clamps) is nothing.
- fold-qdq: a float Conv or MatMul whose operands are all dequantized 8-bit
  values (an imported QDQ model: DequantizeLinear -> Conv -> QuantizeLinear)
  becomes the quantized Conv or MatMul on those values, accumulating exactly in
  int32, its bias (a float Constant, or a dequantized int32) added at the
  accumulator's scale; the float result is a Dequantize of the accumulator, so a
  following Quantize merges into one Rescale. A quantized Add/Sub/Max/Min of
  dequantized values works on them rescaled to its result's type.
Same-scale operands for Add/Max/Concat and int32 biases are chosen by the
quantizer itself (glowsdk/quantization/convert.py).
"""
from __future__ import annotations

from ...graph.function import Function
from ...graph.node import Constant, Node, NodeValue
from ...graph.nodes import elementwise as ew
from ...graph.nodes import linalg, nn, quant, tensor
from ...graph.types import ElemKind, Type
from .manager import Pass, register_pass
from .rewrite import RuleSet, constant_array, emit, only_reader, producer

MERGE = RuleSet()
MOVE = RuleSet()
FOLD = RuleSet()
QDQ = RuleSet()

LAYOUT = (tensor.Reshape, tensor.Transpose, tensor.Slice, tensor.Expand, tensor.Concat, nn.MaxPool)
"""Ops that commute with quantization exactly: they only move or select values (MaxPool: the
largest, which a monotone conversion keeps the largest)."""


@MERGE.rule(quant.Quantize)
def _merge(node: Node) -> NodeValue | None:
    # Quantize(Dequantize(q)) -> q, or Rescale(q)
    inner = producer(node.input, quant.Dequantize)
    if inner is None:
        return None
    if inner.input.type == node.type:
        return inner.input
    return node.function.add(quant.Rescale, inner.input, name=f"{inner.input.node.name}/rescale",
                             result_type=node.type)


@MOVE.rule(*LAYOUT)
def _sink_dequantize(node: Node) -> NodeValue | None:
    # L(Dequantize(q), ..) -> Dequantize(L(q, ..)) when every operand is dequantized from one type
    inner = [producer(v, quant.Dequantize) for v in node.inputs]
    if any(d is None for d in inner) or len({(d.input.type.elem, d.input.type.scale, d.input.type.offset)
                                            for d in inner}) != 1 or len({d.elem for d in inner}) != 1:
        return None
    moved = emit(node, type(node), *(d.input for d in inner), **node.attrs)
    return emit(node, quant.Dequantize, moved, elem=inner[0].elem)


@MOVE.rule(quant.Quantize)
def _hoist_quantize(node: Node) -> NodeValue | None:
    # Quantize(L(x, ..)) -> L(Quantize(x), ..) when the Quantize is L's only reader
    layout = node.input.node
    if not isinstance(layout, LAYOUT) or not only_reader(node.input, node):
        return None
    if any(v.type.elem is not node.input.type.elem for v in layout.inputs):
        return None
    parts = [emit(node, quant.Quantize, v, result_type=node.type.with_shape(v.type.shape),
                  precision=node.precision) for v in layout.inputs]
    return emit(node, type(layout), *parts, **layout.attrs)


@MOVE.rule(quant.Rescale)
def _hoist_rescale(node: Node) -> NodeValue | None:
    # Rescale(Concat(a, b, ..)) -> Concat(Rescale(a), Rescale(b), ..) when the Rescale is the Concat's only reader:
    # as many elements rescaled, each part's Rescale next to what makes it (a ReLU after a Concat)
    concat = node.input.node
    if not isinstance(concat, tensor.Concat) or not only_reader(node.input, node) or node.type.per_channel:
        return None
    parts = [emit(node, quant.Rescale, v, result_type=node.type.with_shape(v.type.shape)) for v in concat.inputs]
    return emit(node, tensor.Concat, *parts, **concat.attrs)


def _holds(outer: Type, inner: Type) -> bool:
    """Whether the real range of per-tensor type `outer` holds that of `inner`, give or take one step of
    `inner` (two calibrated ranges ending at the same value, a Conv's and its ReLU's, differ by rounding)."""
    if outer.per_channel or inner.per_channel:
        return False
    (lo, hi), (inner_lo, inner_hi) = quant.real_range(outer), quant.real_range(inner)
    return lo <= inner_lo + inner.scale and hi >= inner_hi - inner.scale


@FOLD.rule(quant.Rescale)
def _fold_rescale(node: Node) -> NodeValue | None:
    # Rescale(q) to q's own type -> q; Rescale(Rescale(q)) -> Rescale(q); Rescale(Quantize(x)) -> Quantize(x),
    # when the middle type saturates nothing the result keeps: it holds the result's range (or the input's)
    if node.input.type == node.type:
        return node.input
    inner = node.input.node
    middle = node.input.type
    if isinstance(inner, quant.Rescale) and (_holds(middle, node.type) or _holds(middle, inner.input.type)):
        return emit(node, quant.Rescale, inner.input, result_type=node.type)
    if isinstance(inner, quant.Quantize) and _holds(middle, node.type):
        return emit(node, quant.Quantize, inner.input, result_type=node.type, precision=inner.precision)
    return None


@FOLD.rule(ew.Max)
def _saturated_max(node: Node) -> NodeValue | None:
    # Max(q, lowest) -> q for a quantized q whose type the result shares
    if not node.type.elem.is_quantized:
        return None
    low = quant.integer_range(node.type.elem)[0]
    for value, other in ((node.lhs, node.rhs), (node.rhs, node.lhs)):
        array = constant_array(other)
        if array is not None and value.type == node.type and (array == low).all():
            return value
    return None


def _dequantized_byte(value: NodeValue) -> NodeValue | None:
    """The 8-bit quantized value `value` dequantizes to float32, if it is one."""
    inner = producer(value, quant.Dequantize)
    if inner is None or inner.elem is not ElemKind.FLOAT32 or \
            inner.input.type.elem not in (ElemKind.QINT8, ElemKind.QUINT8):
        return None
    return inner.input


def _quantized_bias(node: Node, bias: NodeValue, want: Type) -> NodeValue | None:
    """`bias` as the int32 type `want`: a dequantized int32 (rescaled if its scale differs, as when
    onnxruntime multiplied the scales in float32), or a float Constant; else None."""
    inner = producer(bias, quant.Dequantize)
    if inner is not None:
        if inner.input.type.elem is not ElemKind.QINT32 or inner.input.type.shape != want.shape:
            return None
        if inner.input.type == want:
            return inner.input
        return node.function.add(quant.Rescale, inner.input, name=f"{bias.name}/rescale", result_type=want)
    if isinstance(bias.node, Constant) and bias.type.elem is ElemKind.FLOAT32:
        return node.function.add(quant.Quantize, bias, name=f"{bias.name}/int32q", result_type=want)
    return None


@QDQ.rule(nn.Conv)
def _fold_qdq_conv(node: Node) -> NodeValue | None:
    # Conv(Dequantize(x), Dequantize(w), b) -> Dequantize(Conv(x, w, int32 b))
    x, w = _dequantized_byte(node.input), _dequantized_byte(node.filter)
    if x is None or w is None or x.type.per_channel or (w.type.per_channel and w.type.axis != 0):
        return None
    if w.type.per_channel and any(w.type.offset):
        return None
    bias = None if node.bias is None else _quantized_bias(node, node.bias, nn.quantized_bias_type(x.type, w.type))
    if node.bias is not None and bias is None:
        return None
    return emit(node, quant.Dequantize, emit(node, nn.Conv, x, w, bias, **node.attrs), elem=ElemKind.FLOAT32)


@QDQ.rule(linalg.MatMul)
def _fold_qdq_matmul(node: Node) -> NodeValue | None:
    # MatMul(Dequantize(a), Dequantize(b)) -> Dequantize(MatMul(a, b))
    lhs, rhs = _dequantized_byte(node.lhs), _dequantized_byte(node.rhs)
    if lhs is None or rhs is None or lhs.type.per_channel:
        return None
    if rhs.type.per_channel and (rhs.type.axis != rhs.type.rank - 1 or any(rhs.type.offset)):
        return None
    return emit(node, quant.Dequantize, emit(node, linalg.MatMul, lhs, rhs), elem=ElemKind.FLOAT32)


@QDQ.rule(quant.Quantize)
def _fold_qdq_same_type(node: Node) -> NodeValue | None:
    # Quantize(Add(Dequantize(a), Dequantize(b)), t) -> Rescale(Add(Rescale(a, c), Rescale(b, c)), t), where
    # c holds the ranges of a, b and t (Max and Min: c = t, as clamping commutes with them); also Sub
    inner = node.input.node
    if not isinstance(inner, (ew.Add, ew.Sub, ew.Max, ew.Min)) or not only_reader(node.input, node):
        return None
    operands = [_dequantized_byte(v) for v in inner.inputs]
    if any(v is None or v.type.per_channel for v in operands) or node.type.per_channel or \
            node.type.elem not in (ElemKind.QINT8, ElemKind.QUINT8):
        return None
    common = node.type
    if isinstance(inner, (ew.Add, ew.Sub)):
        common = quant.covering_type([v.type for v in operands] + [node.type], node.type.shape)
    same = [v if v.type.same_elem(common) else emit(node, quant.Rescale, v, result_type=common.with_shape(
        v.type.shape)) for v in operands]
    result = emit(node, type(inner), *same)
    return result if common == node.type else emit(node, quant.Rescale, result, result_type=node.type)


@register_pass
class FoldQdq(Pass):
    """Float Conv/MatMul on dequantized 8-bit values -> the quantized op with an exact int32 accumulator."""

    name = "fold-qdq"

    def run(self, function: Function) -> bool:
        return QDQ.apply(function)


@register_pass
class MergeConversions(Pass):
    """Quantize(Dequantize(q)) -> q or one Rescale."""

    name = "merge-conversions"

    def run(self, function: Function) -> bool:
        return MERGE.apply(function)


@register_pass
class MoveConversions(Pass):
    """Dequantize sinks below, Quantize rises above, layout ops and max pooling."""

    name = "move-conversions"

    def run(self, function: Function) -> bool:
        return MOVE.apply(function)


@register_pass
class FoldRescale(Pass):
    """Rescale to the same type removed; chains of conversions fold into one; saturated ReLUs removed."""

    name = "fold-rescale"

    def run(self, function: Function) -> bool:
        return FOLD.apply(function)
