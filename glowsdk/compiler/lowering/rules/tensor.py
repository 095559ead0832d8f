"""Lowering rules of the tensor node kinds.

Data movement lowers onto the primitive movers (Reshape, Transpose, Slice,
Concat, Gather, Expand, Splat). Every table a rule needs (pad index maps, flat
gather offsets, triangle masks) is computed at compile time from the static
shapes, so the lowered graph does no index arithmetic it could have avoided.
Quantized tensors move as they are; the two kinds that create elements (Pad's
constant fill, Trilu's zeros) write the stored code of the real value.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ....graph.node import Node, NodeValue
from ....graph.nodes import quant
from ....graph.nodes import tensor as t
from ....graph.nodes.elementwise import Add, Where
from ....graph.types import Type
from ....reference.kernels.tensor import stored_code
from ..registry import Lowerer, lowers
from .common import constant_array


def _slice_axis(b: Lowerer, x: NodeValue, axis: int, start: int, end: int) -> NodeValue:
    """x[..., start:end, ...] along `axis`."""
    shape = x.type.shape
    starts, ends = [0] * len(shape), list(shape)
    starts[axis], ends[axis] = start, end
    return b.add(t.Slice, x, starts=starts, ends=ends, steps=[1] * len(shape))


def _filled(b: Lowerer, value: float, shape: Sequence[int], type_: Type) -> NodeValue:
    """A tensor of `shape` whose elements stand for the real `value` in `type_`.

    Splat cannot carry a scale and offset, so a quantized fill splats the stored
    code into the plain storage kind and reinterprets it.
    """
    if not type_.elem.is_quantized:
        return b.splat(value, shape, type_.elem)
    code = b.splat(float(stored_code(value, type_)), shape, type_.elem.quantized_storage)
    return b.add(quant.Reinterpret, code, result_type=type_.with_shape(shape))


# Split -> one Slice per piece
@lowers(t.Split)
def _split(b: Lowerer, node: Node) -> list[NodeValue]:
    pieces, start = [], 0
    for size in node.sizes:
        pieces.append(_slice_axis(b, node.input, node.axis, start, start + size))
        start += size
    return pieces


# Pad -> Slice (negative pads), then per grown axis Concat(Splat, x, Splat) or Gather(x, index table)
@lowers(t.Pad)
def _pad(b: Lowerer, node: Node) -> NodeValue:
    """Negative pads crop first; each axis then grows on its own, as numpy.pad does.

    For reflect, edge and wrap the source index of every result position along an
    axis is numpy.pad applied to arange(dim), so one Gather per axis moves the data.
    """
    x, rank = node.input, node.input.type.rank
    begins, ends = node.pads[:rank], node.pads[rank:]
    if any(p < 0 for p in node.pads):
        shape = x.type.shape
        x = b.add(t.Slice, x, starts=[max(-p, 0) for p in begins],
                  ends=[dim - max(-p, 0) for dim, p in zip(shape, ends)], steps=[1] * rank)
    for axis, (before, after) in enumerate(zip(begins, ends)):
        before, after = max(before, 0), max(after, 0)
        if not before and not after:
            continue
        if node.mode == "constant":
            parts = []
            for width in (before, after):
                block = list(x.type.shape)
                block[axis] = width
                parts.append(_filled(b, node.value, block, node.type) if width else None)
            x = b.add(t.Concat, *[p for p in (parts[0], x, parts[1]) if p is not None], axis=axis)
        else:
            table = np.pad(np.arange(x.type.shape[axis], dtype=np.int64), (before, after), mode=node.mode)
            x = b.add(t.Gather, x, b.constant(table, "pad_index"), axis=axis)
    return x


def _strides(shape: Sequence[int]) -> np.ndarray:
    """Row-major element strides of `shape`."""
    return np.cumprod((1,) + tuple(shape[:0:-1]), dtype=np.int64)[::-1]


# GatherElements -> Gather(Reshape(data, [size]), flat indices)
@lowers(t.GatherElements)
def _gather_elements(b: Lowerer, node: Node) -> NodeValue:
    """The flat index of result position p is sum_a p_a * stride_a over the other axes plus
    indices[p] * stride_axis: the first part is a compile-time table; the second part is a
    Gather from arange(dim) * stride_axis, which also maps negative indices into range and
    raises the Gather kernel's InputError for an index outside [-dim, dim) (naming the
    lowered Gather, axis 0 of its table). Constant in-range indices fold entirely.
    """
    data, indices = node.data.type, node.indices.type
    dim = data.shape[node.axis]
    strides = _strides(data.shape)
    axis_stride = int(strides[node.axis])
    grid = np.indices(indices.shape, dtype=np.int64)
    base = sum((grid[a] * strides[a] for a in range(data.rank) if a != node.axis),
               np.zeros(indices.shape, np.int64))
    flat_data = b.add(t.Reshape, node.data, shape=[data.size])
    known = constant_array(node.indices)
    if known is not None:
        known = known.astype(np.int64)
        if np.all((known >= -dim) & (known < dim)):
            flat = base + np.where(known < 0, known + dim, known) * axis_stride
            return b.add(t.Gather, flat_data, b.constant(flat, "flat_index"), axis=0)
    table = b.constant(np.arange(dim, dtype=np.int64) * axis_stride, "axis_offset")
    flat = b.add(t.Gather, table, node.indices, axis=0)
    if base.any():
        flat = b.add(Add, flat, b.constant(base, "flat_base"))
    return b.add(t.Gather, flat_data, flat, axis=0)


# Tile -> Reshape (a unit axis before each repeated one), Expand, Reshape
@lowers(t.Tile)
def _tile(b: Lowerer, node: Node) -> NodeValue:
    if all(r == 1 for r in node.repeats):
        return node.input
    spread, expanded = [], []
    for dim, repeat in zip(node.input.type.shape, node.repeats):
        if repeat != 1:
            spread.append(1)
            expanded.append(repeat)
        spread.append(dim)
        expanded.append(dim)
    x = b.add(t.Reshape, node.input, shape=spread)
    x = b.add(t.Expand, x, shape=expanded)
    return b.add(t.Reshape, x, shape=node.type.shape)


# DepthToSpace -> Reshape [N, b, b, C', H, W] (DCR) or [N, C', b, b, H, W] (CRD), Transpose, Reshape
@lowers(t.DepthToSpace)
def _depth_to_space(b: Lowerer, node: Node) -> NodeValue:
    n, c, h, w = node.input.type.shape
    k = node.blocksize
    if node.mode == "DCR":
        blocks, order = [n, k, k, c // (k * k), h, w], [0, 3, 4, 1, 5, 2]
    else:
        blocks, order = [n, c // (k * k), k, k, h, w], [0, 1, 4, 2, 5, 3]
    x = b.add(t.Reshape, node.input, shape=blocks)
    x = b.add(t.Transpose, x, perm=order)
    return b.add(t.Reshape, x, shape=node.type.shape)


# SpaceToDepth -> Reshape [N, C, H/b, b, W/b, b], Transpose, Reshape
@lowers(t.SpaceToDepth)
def _space_to_depth(b: Lowerer, node: Node) -> NodeValue:
    n, c, h, w = node.input.type.shape
    k = node.blocksize
    x = b.add(t.Reshape, node.input, shape=[n, c, h // k, k, w // k, k])
    x = b.add(t.Transpose, x, perm=[0, 3, 5, 1, 2, 4] if node.mode == "DCR" else [0, 1, 3, 5, 2, 4])
    return b.add(t.Reshape, x, shape=node.type.shape)


# Trilu -> Where(constant triangle mask, x, 0)
@lowers(t.Trilu)
def _trilu(b: Lowerer, node: Node) -> NodeValue:
    rows, cols = node.input.type.shape[-2:]
    offset = np.arange(cols)[None, :] - np.arange(rows)[:, None]
    keep = offset >= node.k if node.upper else offset <= node.k
    if keep.all():
        return node.input
    zero = _filled(b, 0.0, (), node.type)
    return b.add(Where, b.constant(keep, "triangle"), node.input, zero)
