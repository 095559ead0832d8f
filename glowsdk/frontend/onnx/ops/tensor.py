"""Converters of the ONNX data-movement ops (shape, layout, joining, cutting, gathering).

Inputs that decide shapes (Reshape's shape, Slice's starts, Pad's pads, ...)
become static attributes, normalised here (defaults, negative axes, clamping);
the node kinds in `graph/nodes/tensor.py` only ever see explicit values.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ....graph.node import Node, NodeValue
from ....graph.nodes import tensor as t
from ....graph.nodes.core import Splat
from ....graph.types import ElemKind, broadcast_shapes
from ..context import OnnxNode
from ..registry import converter


def ints_input(node: OnnxNode, index: int, what: str) -> list[int] | None:
    """A compile-time integer input (axes, pads, a shape...) as a list; None if absent."""
    value = node.const(index, what)
    if value is None:
        return None
    if value.dtype.kind not in "iu":
        raise node.error(f"{what} must be integers, got {value.dtype}")
    return [int(v) for v in value.reshape(-1)]


def scalar_input(node: OnnxNode, index: int, what: str) -> np.ndarray | None:
    """A compile-time one-element input as a 0-d array; None if absent or empty."""
    value = node.const(index, what)
    if value is None or value.size == 0:
        return None
    if value.size != 1:
        raise node.error(f"{what} must be a single value, got shape {list(value.shape)}")
    return value.reshape(())


def exact_float(node: OnnxNode, value: np.ndarray) -> float:
    """A scalar as the float a float attribute holds; unsupported if that would round it."""
    as_float = float(value)
    if value.dtype.kind in "iu" and int(as_float) != int(value):
        raise node.unsupported(f"value {value} is not exactly representable as a float attribute")
    return as_float


def normalise_axes(node: OnnxNode, axes: Sequence[int], rank: int) -> list[int]:
    """ONNX axes (negative counts from the end) mapped into [0, rank); repeats are an error."""
    out = []
    for axis in axes:
        if not -rank <= axis < rank:
            raise node.error(f"axis {axis} is out of range for rank {rank}")
        out.append(int(axis) % rank)
    if len(set(out)) != len(out):
        raise node.error(f"axes {list(axes)} name an axis twice")
    return out


@converter("Identity")
def _identity(node: OnnxNode):
    return node.input(0)


def _reshape_to(node: OnnxNode, shape: Sequence[int]) -> NodeValue:
    return node.add(t.Reshape, node.input(0), shape=tuple(shape))


@converter("Reshape")
def _reshape(node: OnnxNode):
    source = node.input(0).type.shape
    requested = ints_input(node, 1, "Reshape's target shape")
    allowzero = node.opset >= 14 and bool(node.attr("allowzero", 0))
    shape = []
    for i, dim in enumerate(requested):
        if dim == 0 and not allowzero:
            if i >= len(source):
                raise node.error(f"shape {requested} copies dim {i} (a 0), but the input shape "
                                 f"{list(source)} has no such dim")
            dim = source[i]
        elif dim < -1:
            raise node.error(f"shape {requested} has the invalid dim {dim}")
        shape.append(dim)
    if shape.count(-1) > 1:
        raise node.error(f"shape {requested} has more than one -1 dim")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        total = math.prod(source)
        if known == 0 or total % known:
            raise node.error(f"cannot infer the -1 dim of shape {requested} for an input of shape "
                             f"{list(source)}")
        shape[shape.index(-1)] = total // known
    if math.prod(shape) != math.prod(source):
        raise node.error(f"cannot reshape {list(source)} to {requested}")
    return _reshape_to(node, shape)


@converter("Flatten")
def _flatten(node: OnnxNode):
    source = node.input(0).type.shape
    axis = int(node.attr("axis", 1))
    if not -len(source) <= axis <= len(source):
        raise node.error(f"axis {axis} is out of range for rank {len(source)}")
    axis = axis + len(source) if axis < 0 else axis
    return _reshape_to(node, [math.prod(source[:axis]), math.prod(source[axis:])])


@converter("Squeeze")
def _squeeze(node: OnnxNode):
    source = node.input(0).type.shape
    given = node.attr("axes") if node.opset < 13 else ints_input(node, 1, "Squeeze's axes")
    if given is None:
        axes = [i for i, d in enumerate(source) if d == 1]
    else:
        axes = normalise_axes(node, given, len(source))
    for axis in axes:
        if source[axis] != 1:
            raise node.error(f"cannot squeeze axis {axis} of size {source[axis]} (shape {list(source)})")
    return _reshape_to(node, [d for i, d in enumerate(source) if i not in axes])


@converter("Unsqueeze")
def _unsqueeze(node: OnnxNode):
    source = node.input(0).type.shape
    given = node.attr("axes") if node.opset < 13 else ints_input(node, 1, "Unsqueeze's axes")
    if given is None:
        raise node.error("needs axes")
    axes = set(normalise_axes(node, given, len(source) + len(given)))
    rest = iter(source)
    return _reshape_to(node, [1 if i in axes else next(rest) for i in range(len(source) + len(axes))])


@converter("Transpose")
def _transpose(node: OnnxNode):
    rank = node.input(0).type.rank
    perm = node.attr("perm", list(reversed(range(rank))))
    return node.add(t.Transpose, node.input(0), perm=tuple(int(p) for p in perm))


@converter("Concat")
def _concat(node: OnnxNode):
    values = [v for v in node.inputs() if v is not None]
    if not values:
        raise node.error("needs at least one input")
    if node.attr("axis") is None:
        raise node.error("needs an axis")
    axis = normalise_axes(node, [int(node.attr("axis"))], values[0].type.rank)[0]
    return node.add(t.Concat, *values, axis=axis)


@converter("Split")
def _split(node: OnnxNode):
    source = node.input(0).type.shape
    axis = normalise_axes(node, [int(node.attr("axis", 0))], len(source))[0]
    dim = source[axis]
    count = len(node.output_names)
    sizes = node.attr("split") if node.opset < 13 else ints_input(node, 1, "Split's sizes")
    sizes = sizes or None  # an empty split list means no split given
    if sizes is not None and node.attr("num_outputs") is not None:
        raise node.error("takes either a split input or a num_outputs attribute, not both")
    if sizes is None and node.opset >= 18:
        parts = node.attr("num_outputs")
        if parts is None:
            raise node.error("needs either a split input or a num_outputs attribute")
        if parts != count:
            raise node.error(f"num_outputs is {parts}, but the node has {count} outputs")
        chunk = -(-dim // parts)
        sizes = [chunk] * (parts - 1) + [dim - chunk * (parts - 1)]
        if sizes[-1] < 0:
            raise node.error(f"cannot split a dim of {dim} into {parts} chunks of {chunk}")
    elif sizes is None:
        if dim % count:
            raise node.error(f"cannot split a dim of {dim} evenly into {count} outputs")
        sizes = [dim // count] * count
    sizes = [int(s) for s in sizes]
    if len(sizes) != count or sum(sizes) != dim or min(sizes) < 0:
        raise node.error(f"split sizes {sizes} do not cut dim {axis} ({dim}) into {count} outputs")
    return node.create(t.Split, [node.input(0)], axis=axis, sizes=sizes).results


def slice_bounds(dim: int, start: int, end: int, step: int) -> tuple[int, int]:
    """ONNX Slice's clamping of (start, end) for one axis into the normalised form of t.Slice."""
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return min(max(start, 0), dim), min(max(end, 0), dim)
    # The spec clamps start into [0, dim-1] here (numpy would clamp a too-negative start to -1).
    return max(min(start, dim - 1), 0) if dim else -1, min(max(end, -1), dim - 1)


@converter("Slice")
def _slice(node: OnnxNode):
    source = node.input(0).type.shape
    if node.opset < 10:
        starts, ends, axes, steps = (node.attr("starts"), node.attr("ends"), node.attr("axes"), None)
    else:
        starts = ints_input(node, 1, "Slice's starts")
        ends = ints_input(node, 2, "Slice's ends")
        axes = ints_input(node, 3, "Slice's axes")
        steps = ints_input(node, 4, "Slice's steps")
    if starts is None or ends is None:
        raise node.error("needs starts and ends")
    axes = normalise_axes(node, list(range(len(starts))) if axes is None else axes, len(source))
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise node.error(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in length")
    begin, stop, stride = [0] * len(source), list(source), [1] * len(source)
    for axis, start, end, step in zip(axes, starts, ends, steps):
        if step == 0:
            raise node.error(f"the step of axis {axis} is 0")
        begin[axis], stop[axis] = slice_bounds(source[axis], int(start), int(end), int(step))
        stride[axis] = int(step)
    return node.add(t.Slice, node.input(0), starts=begin, ends=stop, steps=stride)


_PAD_MODES = {"constant", "reflect", "edge", "wrap"}


@converter("Pad")
def _pad(node: OnnxNode):
    rank = node.input(0).type.rank
    mode = node.attr("mode", "constant")
    if mode not in _PAD_MODES:
        raise node.unsupported(f"pad mode '{mode}'")
    if node.opset < 11:
        pads, value, axes = list(node.attr("pads", [])), float(node.attr("value", 0.0)), None
    else:
        pads = ints_input(node, 1, "Pad's pads")
        value = scalar_input(node, 2, "Pad's constant value")
        value = 0.0 if value is None else exact_float(node, value)
        axes = ints_input(node, 3, "Pad's axes") if node.opset >= 18 else None
    axes = list(range(rank)) if axes is None else normalise_axes(node, axes, rank)
    if len(pads) != 2 * len(axes):
        raise node.error(f"pads {pads} needs two entries for each of the {len(axes)} padded axes")
    full = [0] * (2 * rank)
    for i, axis in enumerate(axes):
        full[axis], full[axis + rank] = int(pads[i]), int(pads[i + len(axes)])
    return node.add(t.Pad, node.input(0), mode=mode, pads=full, value=value)


@converter("Gather")
def _gather(node: OnnxNode):
    axis = normalise_axes(node, [int(node.attr("axis", 0))], node.input(0).type.rank)[0]
    return node.add(t.Gather, node.input(0), node.input(1), axis=axis)


@converter("GatherElements")
def _gather_elements(node: OnnxNode):
    axis = normalise_axes(node, [int(node.attr("axis", 0))], node.input(0).type.rank)[0]
    return node.add(t.GatherElements, node.input(0), node.input(1), axis=axis)


@converter("Tile")
def _tile(node: OnnxNode):
    return node.add(t.Tile, node.input(0), repeats=ints_input(node, 1, "Tile's repeats"))


@converter("Expand")
def _expand(node: OnnxNode):
    source = node.input(0).type.shape
    requested = ints_input(node, 1, "Expand's target shape")
    try:
        shape = broadcast_shapes(source, requested)
    except ValueError:
        raise node.error(f"input shape {list(source)} does not broadcast with {requested}") from None
    return node.add(t.Expand, node.input(0), shape=shape)


def _blocks(node: OnnxNode, kind: type[Node]) -> NodeValue:
    if node.attr("blocksize") is None:
        raise node.error("needs a blocksize")
    return node.add(kind, node.input(0), blocksize=int(node.attr("blocksize")), mode=node.attr("mode", "DCR"))


converter("DepthToSpace")(lambda node: _blocks(node, t.DepthToSpace))
converter("SpaceToDepth")(lambda node: _blocks(node, t.SpaceToDepth))


@converter("Trilu")
def _trilu(node: OnnxNode):
    k = scalar_input(node, 1, "Trilu's k")
    k = 0 if k is None else int(k)
    return node.add(t.Trilu, node.input(0), upper=bool(node.attr("upper", 1)), k=k)


# -- values known at import: they become Constants (or a Splat) -----------------------------------
def _new_constant(node: OnnxNode, array: np.ndarray, what: str) -> NodeValue:
    """A Constant named after the node and `what`; unsupported for element types glowsdk lacks."""
    try:
        ElemKind.from_dtype(array.dtype)
    except KeyError:
        raise node.unsupported(f"element type {array.dtype} is not supported by glowsdk") from None
    return node.constant(array, what)


@converter("Shape")
def _shape(node: OnnxNode):
    dims = node.input(0).type.shape
    start, end = int(node.attr("start", 0)), node.attr("end")
    # Python slicing clamps out-of-range and negative bounds exactly as ONNX Shape does.
    picked = dims[start:None if end is None else int(end)]
    return _new_constant(node, np.array(picked, dtype=np.int64), "shape")


@converter("Size")
def _size(node: OnnxNode):
    return _new_constant(node, np.array(node.input(0).type.size, dtype=np.int64), "size")


_LIST_ATTRS = {"value_float": np.float32, "value_floats": np.float32,
               "value_int": np.int64, "value_ints": np.int64}
"""Constant's attribute forms that hold a Python number or list, and the dtype each means."""


@converter("Constant")
def _constant(node: OnnxNode):
    if len(node.attrs) != 1:
        raise node.error(f"needs exactly one value attribute, got {sorted(node.attrs) or 'none'}")
    name, value = next(iter(node.attrs.items()))
    if name == "value":
        array = value
    elif name == "sparse_value":
        array = value  # made dense when the attribute was read
    elif name in _LIST_ATTRS:
        array = np.array(value, dtype=_LIST_ATTRS[name])
    elif name in ("value_string", "value_strings"):
        raise node.unsupported("string constants are not supported by glowsdk")
    else:
        raise node.error(f"unknown attribute '{name}'")
    return _new_constant(node, array, "value")


@converter("ConstantOfShape")
def _constant_of_shape(node: OnnxNode):
    shape = ints_input(node, 0, "ConstantOfShape's shape")
    if shape is None:
        raise node.error("needs a shape input")
    if any(d < 0 for d in shape):
        raise node.error(f"shape {shape} has a negative dim")
    value = node.attr("value")
    value = np.zeros(1, dtype=np.float32) if value is None else np.asarray(value)
    if value.size != 1:
        raise node.error(f"value must hold one element, got shape {list(value.shape)}")
    try:
        elem = ElemKind.from_dtype(value.dtype)
    except KeyError:
        raise node.unsupported(f"element type {value.dtype} is not supported by glowsdk") from None
    return node.add(Splat, shape=shape, value=exact_float(node, value.reshape(())), elem=elem)


@converter("Range")
def _range(node: OnnxNode):
    """Computed exactly (integers) or in float64, at least as precise as any stash_type asks."""
    start, limit, delta = (scalar_input(node, i, f"Range's {what}")
                           for i, what in enumerate(("start", "limit", "delta")))
    if start is None or limit is None or delta is None:
        raise node.error("needs start, limit and delta")
    if not start.dtype == limit.dtype == delta.dtype:
        raise node.error(f"start, limit and delta differ in type "
                         f"({start.dtype}, {limit.dtype}, {delta.dtype})")
    if delta == 0:
        raise node.error("delta is 0")
    if start.dtype.kind in "iu":
        first, step = int(start), int(delta)
        count = max(0, -((first - int(limit)) // step))
    else:
        first, step = float(start), float(delta)
        span = (float(limit) - first) / step
        if not math.isfinite(span):
            raise node.error(f"start {first}, limit {float(limit)} and delta {step} give no finite length")
        count = max(0, math.ceil(span))
    node.check_size([count], ElemKind.from_dtype(start.dtype))  # before arange allocates
    values = first + np.arange(count, dtype=np.int64 if start.dtype.kind in "iu" else np.float64) * step
    return _new_constant(node, values.astype(start.dtype), "range")
