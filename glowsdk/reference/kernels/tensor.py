"""Reference kernels of the data-movement node kinds.

They move raw elements only, so quantized tensors pass through as their stored
integers; the two kinds that create new elements (Pad's constant fill, Trilu's
zeros) write the stored code of the real value.
"""
from __future__ import annotations

import numpy as np

from ...errors import InputError
from ...graph.node import Node
from ...graph.nodes import tensor as t
from ...graph.types import Type
from ..registry import kernel


def stored_code(value: float, type_: Type) -> np.ndarray:
    """The element that represents the real `value` in `type_` (quantized: saturated code)."""
    if not type_.elem.is_quantized:
        return np.asarray(value).astype(type_.dtype)
    info = np.iinfo(type_.dtype)
    code = np.round(value / type_.scale) + type_.offset
    return np.asarray(np.clip(code, info.min, info.max)).astype(type_.dtype)


@kernel(t.Reshape)
def _reshape(node, x):
    return x.reshape(node.shape)


@kernel(t.Transpose)
def _transpose(node, x):
    return np.require(np.transpose(x, node.perm), requirements="C")


@kernel(t.Concat)
def _concat(node, xs):
    return np.concatenate(xs, axis=node.axis)


@kernel(t.Split)
def _split(node, x):
    cuts = np.cumsum(node.sizes)[:-1]
    return tuple(np.require(p, requirements="C") for p in np.split(x, cuts, axis=node.axis))


@kernel(t.Slice)
def _slice(node, x):
    index = []
    for start, size, step in zip(node.starts, node.type.shape, node.steps):
        stop = start + size * step
        index.append(slice(start, stop if stop >= 0 else None, step) if size else slice(0, 0))
    return np.require(x[tuple(index)], requirements="C")


@kernel(t.Pad)
def _pad(node, x):
    rank = x.ndim
    begins, ends = node.pads[:rank], node.pads[rank:]
    crop = tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(zip(begins, ends)))
    x = x[crop]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begins, ends)]
    if node.mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=stored_code(node.value, node.type))
    return np.pad(x, widths, mode=node.mode)


def _checked_indices(node: Node, indices: np.ndarray, dim: int) -> np.ndarray:
    """Indices mapped into [0, dim); InputError for any outside [-dim, dim)."""
    bad = (indices < -dim) | (indices >= dim)
    if bad.any():
        first = int(indices[bad].flat[0])
        raise InputError(f"node '{node.name}' ({node.kind}): index {first} is out of range for "
                         f"axis {node.axis} of size {dim}")
    return np.where(indices < 0, indices + dim, indices).astype(np.intp)


@kernel(t.Gather)
def _gather(node, data, indices):
    indices = _checked_indices(node, indices, data.shape[node.axis])
    return np.take(data, indices, axis=node.axis)


@kernel(t.GatherElements)
def _gather_elements(node, data, indices):
    indices = _checked_indices(node, indices, data.shape[node.axis])
    # ONNX lets indices be smaller than data on the other axes: gather from that corner of data.
    corner = tuple(slice(None) if a == node.axis else slice(0, n) for a, n in enumerate(indices.shape))
    return np.take_along_axis(data[corner], indices, axis=node.axis)


@kernel(t.Tile)
def _tile(node, x):
    return np.tile(x, node.repeats)


@kernel(t.Expand)
def _expand(node, x):
    return np.require(np.broadcast_to(x, node.shape), requirements="C")


@kernel(t.DepthToSpace)
def _depth_to_space(node, x):
    n, c, h, w = x.shape
    b = node.blocksize
    if node.mode == "DCR":
        blocks = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        blocks = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return blocks.reshape(node.type.shape)


@kernel(t.SpaceToDepth)
def _space_to_depth(node, x):
    n, c, h, w = x.shape
    b = node.blocksize
    blocks = x.reshape(n, c, h // b, b, w // b, b)
    order = (0, 3, 5, 1, 2, 4) if node.mode == "DCR" else (0, 1, 3, 5, 2, 4)
    return blocks.transpose(order).reshape(node.type.shape)


@kernel(t.Trilu)
def _trilu(node, x):
    rows, cols = x.shape[-2:]
    offset = np.arange(cols)[None, :] - np.arange(rows)[:, None]
    keep = offset >= node.k if node.upper else offset <= node.k
    return np.where(keep, x, stored_code(0.0, node.type))
