"""Converters of the ONNX reductions, ArgMax/ArgMin, TopK and CumSum.

ONNX moved `axes` from an attribute to an input (ReduceSum at opset 13, the other
reductions at 18), together with `noop_with_empty_axes`; TopK's `k` became an
input at opset 10 and gained `largest`/`sorted` at 11. The converters resolve
every form to the static, normalised attributes of the node kinds.
"""
from __future__ import annotations

import numpy as np

from ....graph.nodes import reduce as rd
from ..context import OnnxNode
from ..registry import converter

_AXES_INPUT_SINCE = {
    rd.ReduceSum: 13, rd.ReduceMean: 18, rd.ReduceProd: 18, rd.ReduceMax: 18, rd.ReduceMin: 18,
    rd.ReduceL1: 18, rd.ReduceL2: 18, rd.ReduceSumSquare: 18, rd.ReduceLogSum: 18, rd.ReduceLogSumExp: 18,
}
"""The opset from which each reduction takes `axes` as its second input."""


def _normalised_axes(node: OnnxNode, axes, rank: int) -> tuple[int, ...]:
    """Negative axes counted from the end, sorted; duplicates and out-of-range axes are errors."""
    out = []
    for axis in (int(a) for a in np.asarray(axes).reshape(-1)):
        if not -rank <= axis < rank:
            raise node.error(f"axis {axis} is out of range for rank {rank}")
        out.append(axis % rank)
    if len(set(out)) != len(out):
        raise node.error(f"axes {list(np.asarray(axes).reshape(-1))} repeat an axis")
    return tuple(sorted(out))


def _reduction(kind):
    def convert(node: OnnxNode):
        x = node.input(0)
        rank = x.type.rank
        if node.opset >= _AXES_INPUT_SINCE[kind]:
            axes = node.const(1, "the reduction axes")
            noop = bool(node.attr("noop_with_empty_axes", 0))
        else:
            axes, noop = node.attr("axes"), False
        if axes is None or np.asarray(axes).size == 0:
            axes = () if noop else tuple(range(rank))
        if kind in (rd.ReduceLogSum, rd.ReduceLogSumExp) and not x.type.elem.is_float:
            raise node.unsupported(f"{node.op_type} of {x.type.elem.value} is not supported "
                                   f"(only floating-point inputs: it is defined through Log)")
        return node.add(kind, x, axes=_normalised_axes(node, axes, rank),
                        keepdims=bool(node.attr("keepdims", 1)))
    return convert


for _kind in _AXES_INPUT_SINCE:
    converter(_kind.spec.name)(_reduction(_kind))


def _single_axis(node: OnnxNode, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise node.error(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def _arg_reduction(kind):
    def convert(node: OnnxNode):
        x = node.input(0)
        return node.add(kind, x, axis=_single_axis(node, int(node.attr("axis", 0)), x.type.rank),
                        keepdims=bool(node.attr("keepdims", 1)),
                        select_last_index=bool(node.attr("select_last_index", 0)))
    return convert


converter("ArgMax")(_arg_reduction(rd.ArgMax))
converter("ArgMin")(_arg_reduction(rd.ArgMin))


@converter("TopK")
def _topk(node: OnnxNode):
    x = node.input(0)
    if node.opset >= 10:
        k = np.asarray(node.const(1, "TopK's k"))
        if k.size != 1:
            raise node.error(f"k must hold one value, got shape {list(k.shape)}")
        k = int(k.reshape(()))
    else:
        k = int(node.attr("k"))
    # sorted=0 leaves the order unspecified, so the always-sorted node kind implements it too.
    created = node.create(rd.TopK, [x], k=k, axis=_single_axis(node, int(node.attr("axis", -1)), x.type.rank),
                          largest=bool(node.attr("largest", 1)))
    return created.results


@converter("CumSum")
def _cumsum(node: OnnxNode):
    x = node.input(0)
    axis = np.asarray(node.const(1, "CumSum's axis"))
    if axis.size != 1:
        raise node.error(f"axis must hold one value, got shape {list(axis.shape)}")
    return node.add(rd.CumSum, x, axis=_single_axis(node, int(axis.reshape(())), x.type.rank),
                    exclusive=bool(node.attr("exclusive", 0)), reverse=bool(node.attr("reverse", 0)))
