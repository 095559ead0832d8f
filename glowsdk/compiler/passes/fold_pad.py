"""Fold an explicit constant Pad of the spatial dims into the window op that reads it.

A Conv pads with zeros, an AveragePool with count_include_pad averages over
zeros in its pads, and a MaxPool pads with -inf (padding never wins): an
explicit Pad with the same fill in front of them is the same as growing their
own `pads`. The Pad must be constant mode, pad only the spatial dims (not N or
C), and not crop (no negative pads; window ops cannot crop). Pools must not use
ceil_mode (the extra end window would be counted against the padded size); a
MaxPoolWithIndices keeps its Pad (its indices count positions in the padded
tensor). Other readers of the Pad keep it.
"""
from __future__ import annotations

import math

from ...graph.function import Function
from ...graph.node import Node, NodeValue
from ...graph.nodes import nn, tensor
from .manager import Pass, register_pass
from .rewrite import RuleSet, emit, producer

RULES = RuleSet()


def _spatial_pads(value: NodeValue, fill: float) -> tuple[Node, tuple[int, ...]] | None:
    """The Pad producing `value` and its spatial pads, if it pads only the spatial dims with `fill`."""
    pad = producer(value, tensor.Pad)
    if pad is None or pad.mode != "constant" or pad.value != fill or any(p < 0 for p in pad.pads):
        return None
    rank = value.type.rank
    begins, ends = pad.pads[:rank], pad.pads[rank:]
    if begins[:2] != (0, 0) or ends[:2] != (0, 0):
        return None
    return pad, begins[2:] + ends[2:]


def _grown(pads: tuple[int, ...], extra: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(p + q for p, q in zip(pads, extra))


@RULES.rule(nn.Conv)
def _into_conv(conv: Node) -> NodeValue | None:
    # Conv(Pad(x, zeros)) -> Conv(x) with the pads added
    found = _spatial_pads(conv.input, 0.0)
    if found is None:
        return None
    pad, extra = found
    attrs = dict(conv.attrs, pads=_grown(conv.pads, extra))
    return emit(conv, nn.Conv, pad.input, conv.filter, conv.bias, **attrs)


@RULES.rule(nn.AveragePool)
def _into_average_pool(pool: Node) -> NodeValue | None:
    # AveragePool(Pad(x, zeros)) -> AveragePool(x) with the pads added, when pads count
    found = _spatial_pads(pool.input, 0.0)
    if found is None or not pool.count_include_pad or pool.ceil_mode:
        return None
    pad, extra = found
    return emit(pool, nn.AveragePool, pad.input, **dict(pool.attrs, pads=_grown(pool.pads, extra)))


@RULES.rule(nn.MaxPool)
def _into_max_pool(pool: Node) -> list[NodeValue | None] | None:
    # MaxPool(Pad(x, -inf)) -> MaxPool(x) with the pads added (MaxPoolWithIndices keeps its Pad:
    # its indices count positions in the padded input)
    found = _spatial_pads(pool.input, -math.inf)
    if found is None or pool.ceil_mode or not pool.input.type.elem.is_float:
        return None
    pad, extra = found
    return emit(pool, nn.MaxPool, pad.input, **dict(pool.attrs, pads=_grown(pool.pads, extra)))


@register_pass
class FoldPad(Pass):
    """Pad(zeros or -inf) on spatial dims feeding Conv / AveragePool / MaxPool -> the op's own pads."""

    name = "fold-pad"

    def run(self, function: Function) -> bool:
        return RULES.apply(function)
