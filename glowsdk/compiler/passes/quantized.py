"""Optimisations of quantized graphs (paper 4.3), run by the QUANTIZATION pipeline.

The quantizer converts each node on its own, between a Quantize and a
Dequantize; these rules turn that into integer islands:
- merge-conversions: Quantize(Dequantize(q)) is q when the types agree, else one
  Rescale (one integer requantization instead of a float round trip);
- move-conversions: layout ops and max pooling commute exactly with both
  conversions (they move or pick values, and both conversions are monotone), so
  a Dequantize sinks below them and a Quantize rises above them, until the two
  meet and merge; the layout op then moves bytes, not floats;
- fold-rescale: Rescale to the same type is nothing; Rescale(Rescale(q)) and
  Rescale(Quantize(x)) become one conversion with one rounding; and a Max with
  the lowest value of its type (a ReLU whose output type starts at 0, so the
  requantization before it already clamps) is nothing.
Same-scale operands for Add/Max/Concat and int32 biases are chosen by the
quantizer itself (glowsdk/quantization/convert.py).
"""
from __future__ import annotations

from ...graph.function import Function
from ...graph.node import Node, NodeValue
from ...graph.nodes import elementwise as ew
from ...graph.nodes import nn, quant, tensor
from .manager import Pass, register_pass
from .rewrite import RuleSet, constant_array, emit, only_reader, producer

MERGE = RuleSet()
MOVE = RuleSet()
FOLD = RuleSet()

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


@FOLD.rule(quant.Rescale)
def _fold_rescale(node: Node) -> NodeValue | None:
    # Rescale(q) to q's own type -> q; Rescale(Rescale(q)) -> Rescale(q); Rescale(Quantize(x)) -> Quantize(x)
    if node.input.type == node.type:
        return node.input
    inner = node.input.node
    if isinstance(inner, quant.Rescale):
        return emit(node, quant.Rescale, inner.input, result_type=node.type)
    if isinstance(inner, quant.Quantize):
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
