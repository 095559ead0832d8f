"""Lowering rules of the resize node kinds.

Resize is separable: each axis the reference kernel resamples becomes a few
Gathers along that axis with compile-time index tables, each scaled by a
compile-time weight vector and summed (nearest: one Gather, no arithmetic).
The tables come from the reference kernel's own coordinate and filter helpers,
and the arithmetic follows it step by step (the same working kind, the same
tap order, the same final rounding and saturation), so the lowered graph
computes the kernel's function; the only difference is that the kernel starts
its sum from +0.0, so a sum of negative zeros is -0.0 here and +0.0 there.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ....graph.node import Node, NodeValue
from ....graph.nodes import elementwise as ew
from ....graph.nodes import tensor as t
from ....graph.nodes.resize import Resize
from ....graph.types import ElemKind
from ....reference.kernels.resize import clamped_taps, is_identity, nearest_index, saturate, source_coordinates
from ..registry import Lowerer, lowers
from .common import cast_to


def _working_kind(node: Node) -> ElemKind:
    """The kind the reference kernel computes in: the input's own for nearest, float64 for
    float64 and integer inputs, float32 for the other floats."""
    elem = node.input.type.elem
    if node.mode == "nearest":
        return elem
    return ElemKind.FLOAT64 if elem is ElemKind.FLOAT64 or not elem.is_float else ElemKind.FLOAT32


def _along(axis: int, rank: int, values: np.ndarray) -> np.ndarray:
    """A per-output-index table shaped to broadcast along `axis`."""
    return values.reshape((1,) * axis + (-1,) + (1,) * (rank - axis - 1))


def _gather(b: Lowerer, x: NodeValue, index: np.ndarray, axis: int) -> NodeValue:
    """x taken at `index` along `axis`; nothing when the table is the identity."""
    if np.array_equal(index, np.arange(x.type.shape[axis])):
        return x
    return b.add(t.Gather, x, b.constant(index.astype(np.int64), "resize_index"), axis=axis)


def _masked(b: Lowerer, x: NodeValue, mask: np.ndarray, axis: int, fill: np.ndarray) -> NodeValue:
    """`fill` at the output indices of `axis` where `mask` is set."""
    if not mask.any():
        return x
    cond = b.constant(_along(axis, x.type.rank, mask), "resize_mask")
    return b.add(ew.Where, cond, b.constant(fill, "resize_fill"), x)


def _resize_axis(b: Lowerer, node: Node, x: NodeValue, axis: int) -> NodeValue:
    """One axis, as the reference kernel's per-axis step."""
    rank, in_size, out_size = x.type.rank, x.type.shape[axis], node.shape[axis]
    scale = node.scales[axis]
    roi = (node.roi[axis], node.roi[rank + axis]) if node.roi else None
    coords, extrapolated = source_coordinates(node.coordinate_mode, out_size, in_size, scale, roi)
    work = x.type.dtype
    if node.mode == "nearest":
        index = nearest_index(coords, node.nearest_mode)
        x = _gather(b, x, np.clip(index, 0, in_size - 1), axis)
        if node.exclude_outside:
            x = _masked(b, x, (index < 0) | (index >= in_size), axis, np.zeros((), work))
    else:
        index, weights = clamped_taps(node, coords, scale, in_size)
        weights = weights.astype(work)
        total = None
        for tap in range(index.shape[1]):
            term = b.add(ew.Mul, _gather(b, x, index[:, tap], axis),
                         b.constant(_along(axis, rank, weights[:, tap]), "resize_weight"))
            total = term if total is None else b.add(ew.Add, total, term)
        x = total
    if extrapolated is not None:
        x = _masked(b, x, extrapolated, axis, saturate(np.asarray(node.extrapolation_value), work))
    return x


def _saturated(b: Lowerer, x: NodeValue, elem: ElemKind) -> NodeValue:
    """The working result in the output kind, as the kernel's `saturate`: integers round half
    to even and clamp to their range; narrower floats clamp to their finite range."""
    if x.type.elem is elem:
        return x
    work = x.type.elem
    if elem.is_integer:
        x = b.add(ew.Round, x)
        low, high = np.iinfo(elem.dtype).min, np.iinfo(elem.dtype).max
    else:
        high = float(ml_dtypes.finfo(elem.dtype).max)
        low = -high
    x = b.add(ew.Max, x, b.scalar(low, work))
    x = b.add(ew.Min, x, b.scalar(high, work))
    return b.add(ew.Cast, x, to=elem)


# Resize -> per resampled axis: Gather (nearest), or sum over taps of Gather * weight; Where for
# extrapolation and excluded outside samples; Cast in and out of the working kind
@lowers(Resize)
def _resize(b: Lowerer, node: Node) -> NodeValue:
    source = node.input.type
    if node.type.size == 0:
        return b.splat(0.0, node.shape, source.elem)
    work = _working_kind(node)
    x = node.input
    for axis in range(source.rank):
        if is_identity(node, axis, x.type.shape[axis]):
            continue
        x = cast_to(b, x, work)  # the kernel converts at its first resampled axis
        x = _resize_axis(b, node, x, axis)
    return _saturated(b, x, source.elem)
