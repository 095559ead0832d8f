"""Data-movement node kinds: reshaping, permuting, joining, cutting, padding, gathering.

None of these compute on element values, so every kind accepts every element
kind, quantized ones included: a quantized result keeps its operand's scale and
offset. Everything that decides a shape is a static, normalised attribute (no
negative axes, no defaults left to resolve), so the type rules are exact.
"""
from __future__ import annotations

import math

from ..kinds import define_node
from ..node import Node
from ..spec import bool_attr, float_attr, int_attr, ints_attr, str_attr
from ..types import Type, broadcast_shapes
from .rules import is_index, require_elem

FAMILY = "tensor"


def _check_axis(node: Node, axis: int, rank: int) -> None:
    """Axis attributes are stored normalised: 0 <= axis < rank."""
    if not 0 <= axis < rank:
        raise node.fail(f"axis {axis} is out of range for rank {rank}")


def _check_one_per_axis(node: Node, what: str, values: tuple, rank: int) -> None:
    if len(values) != rank:
        raise node.fail(f"{what} has {len(values)} entries for an operand of rank {rank}")


# -- reshaping --------------------------------------------------------------------------------
def _reshape_type(node: Node) -> Type:
    source = node.input.type
    if math.prod(node.shape) != source.size:
        raise node.fail(f"cannot reshape {source} ({source.size} elements) to shape {list(node.shape)}")
    return source.with_shape(node.shape)


Reshape = define_node(
    "Reshape", "input", attrs=[ints_attr("shape", doc="the result shape, every dim explicit")],
    infer=_reshape_type, family=FAMILY,
    doc="The same elements in row-major order under another shape of equal size. ONNX Reshape, "
        "Flatten, Squeeze and Unsqueeze all become this kind, with 0 and -1 dims already resolved.")


def _transpose_type(node: Node) -> Type:
    source = node.input.type
    if sorted(node.perm) != list(range(source.rank)):
        raise node.fail(f"perm {list(node.perm)} is not a permutation of the {source.rank} axes of {source}")
    return source.with_shape([source.shape[p] for p in node.perm])


Transpose = define_node(
    "Transpose", "input", attrs=[ints_attr("perm")], infer=_transpose_type, family=FAMILY,
    doc="Permute the axes: result dim i is input dim perm[i] (numpy.transpose).")


# -- joining and cutting ----------------------------------------------------------------------
def _concat_type(node: Node) -> Type:
    first = node.inputs[0].type
    _check_axis(node, node.axis, first.rank)
    total = 0
    for value in node.inputs:
        other = value.type
        if not first.same_elem(other):
            raise node.fail(f"operands must share one element kind, got {first} and {other}")
        if other.rank != first.rank or any(a != b for i, (a, b) in enumerate(zip(first.shape, other.shape))
                                           if i != node.axis):
            raise node.fail(f"cannot concatenate {first} and {other} along axis {node.axis}")
        total += other.shape[node.axis]
    shape = list(first.shape)
    shape[node.axis] = total
    return first.with_shape(shape)


Concat = define_node(
    "Concat", "parts*", attrs=[int_attr("axis")], infer=_concat_type, family=FAMILY,
    doc="Join one or more tensors along `axis`, in operand order; all other dims must agree.")


def _split_types(node: Node) -> list[Type]:
    source = node.input.type
    _check_axis(node, node.axis, source.rank)
    if any(s < 0 for s in node.sizes) or sum(node.sizes) != source.shape[node.axis]:
        raise node.fail(f"sizes {list(node.sizes)} do not add up to dim {node.axis} of {source}")
    types = []
    for size in node.sizes:
        shape = list(source.shape)
        shape[node.axis] = size
        types.append(source.with_shape(shape))
    return types


Split = define_node(
    "Split", "input", results="outputs*", attrs=[int_attr("axis"), ints_attr("sizes")],
    infer=_split_types, family=FAMILY,
    doc="Cut `input` along `axis` into consecutive pieces of `sizes` (which add up to that dim); "
        "one result per piece, in order.")


def _slice_type(node: Node) -> Type:
    source = node.input.type
    for what in ("starts", "ends", "steps"):
        _check_one_per_axis(node, what, node.attrs[what], source.rank)
    shape = []
    for axis, (dim, start, end, step) in enumerate(zip(source.shape, node.starts, node.ends, node.steps)):
        if step == 0:
            raise node.fail(f"step of axis {axis} is 0")
        low, high = (0, dim) if step > 0 else (-1, dim - 1)
        if not (low <= start <= high and low <= end <= high):
            raise node.fail(f"axis {axis}: start {start} and end {end} with step {step} are not "
                            f"normalised for dim {dim}")
        shape.append(max(0, -(-(end - start) // step)))
    return source.with_shape(shape)


Slice = define_node(
    "Slice", "input", attrs=[ints_attr("starts"), ints_attr("ends"), ints_attr("steps")],
    infer=_slice_type, family=FAMILY,
    doc="Strided slice with one (start, end, step) per axis: result dim i holds the input indices "
        "start, start+step, ... up to but excluding end. Bounds are normalised: for step > 0, "
        "0 <= start, end <= dim; for step < 0, -1 <= start, end <= dim-1, where end = -1 means "
        "'through index 0' (and start = -1 only occurs for dim = 0). "
        "Result dim = max(0, ceil((end - start) / step)).")


PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_type(node: Node) -> Type:
    source = node.input.type
    rank = source.rank
    if node.mode not in PAD_MODES:
        raise node.fail(f"unknown pad mode '{node.mode}' (expected one of {', '.join(PAD_MODES)})")
    if len(node.pads) != 2 * rank:
        raise node.fail(f"pads has {len(node.pads)} entries, expected {2 * rank} for {source}")
    shape = [dim + node.pads[i] + node.pads[i + rank] for i, dim in enumerate(source.shape)]
    if any(d < 0 for d in shape):
        raise node.fail(f"pads {list(node.pads)} remove more than all of {source}")
    if node.mode != "constant":
        for axis, dim in enumerate(source.shape):
            kept = dim + min(node.pads[axis], 0) + min(node.pads[axis + rank], 0)
            grow = max(node.pads[axis], 0) + max(node.pads[axis + rank], 0)
            if grow and (kept == 0 or (node.mode == "reflect" and kept < 2)):
                raise node.fail(f"{node.mode} padding of axis {axis} needs more elements than {kept}")
    return source.with_shape(shape)


Pad = define_node(
    "Pad", "input",
    attrs=[str_attr("mode", "constant"), ints_attr("pads"), float_attr("value", 0.0)],
    infer=_pad_type, family=FAMILY,
    doc="Pad every axis: pads = [begin_0..begin_{r-1}, end_0..end_{r-1}]. Negative pads first "
        "crop that many elements, then positive pads grow the cropped tensor: 'constant' fills "
        "with `value` (a real value; a quantized result stores round(value / scale) + offset, "
        "saturated), 'reflect' mirrors without repeating the edge, 'edge' repeats the edge, "
        "'wrap' continues cyclically from the other end (numpy.pad modes).")


# -- gathering --------------------------------------------------------------------------------
def _gather_type(node: Node) -> Type:
    data = node.data.type
    require_elem(node, node.indices.type, is_index, "indices")
    _check_axis(node, node.axis, data.rank)
    shape = data.shape[:node.axis] + node.indices.type.shape + data.shape[node.axis + 1:]
    return data.with_shape(shape)


Gather = define_node(
    "Gather", "data indices", attrs=[int_attr("axis", 0)], infer=_gather_type, family=FAMILY,
    doc="Pick slices of `data` along `axis` by `indices` (numpy.take): the result shape is "
        "data.shape[:axis] + indices.shape + data.shape[axis+1:]. Negative indices count from the "
        "end; an index outside [-dim, dim) is a run-time error.")


def _gather_elements_type(node: Node) -> Type:
    data, indices = node.data.type, node.indices.type
    require_elem(node, indices, is_index, "indices")
    _check_axis(node, node.axis, data.rank)
    if indices.rank != data.rank or any(i > d for a, (i, d) in enumerate(zip(indices.shape, data.shape))
                                        if a != node.axis):
        raise node.fail(f"indices {indices} do not fit data {data} along axis {node.axis}")
    return data.with_shape(indices.shape)


GatherElements = define_node(
    "GatherElements", "data indices", attrs=[int_attr("axis", 0)], infer=_gather_elements_type,
    family=FAMILY,
    doc="result[i..] = data[i.. with the `axis` coordinate replaced by indices[i..]] "
        "(numpy.take_along_axis); the result has the indices' shape. Negative indices count from "
        "the end; an index outside [-dim, dim) is a run-time error.")


# -- repeating --------------------------------------------------------------------------------
def _tile_type(node: Node) -> Type:
    source = node.input.type
    _check_one_per_axis(node, "repeats", node.repeats, source.rank)
    if any(r < 0 for r in node.repeats):
        raise node.fail(f"repeats {list(node.repeats)} must not be negative")
    return source.with_shape([d * r for d, r in zip(source.shape, node.repeats)])


Tile = define_node(
    "Tile", "input", attrs=[ints_attr("repeats")], infer=_tile_type, family=FAMILY,
    doc="Repeat the whole tensor repeats[i] times along each axis i (numpy.tile).")


def _expand_type(node: Node) -> Type:
    source = node.input.type
    try:
        fits = len(node.shape) >= source.rank and broadcast_shapes(source.shape, node.shape) == node.shape
    except ValueError:
        fits = False
    if not fits:
        raise node.fail(f"{source} does not broadcast to shape {list(node.shape)}")
    return source.with_shape(node.shape)


Expand = define_node(
    "Expand", "input", attrs=[ints_attr("shape", doc="the result shape")], infer=_expand_type,
    family=FAMILY,
    doc="Broadcast to the result `shape` (numpy.broadcast_to): trailing dims align, and each input "
        "dim is 1 or equal to the result's. ONNX Expand's two-way broadcast is resolved at import.")


# -- depth and space --------------------------------------------------------------------------
def _depth_to_space_type(node: Node) -> Type:
    source, b = node.input.type, node.blocksize
    if node.mode not in ("DCR", "CRD"):
        raise node.fail(f"mode must be DCR or CRD, got '{node.mode}'")
    if source.rank != 4 or b < 1 or source.shape[1] % (b * b):
        raise node.fail(f"needs an N x C x H x W operand with C divisible by {b}x{b}, got {source}")
    n, c, h, w = source.shape
    return source.with_shape([n, c // (b * b), h * b, w * b])


DepthToSpace = define_node(
    "DepthToSpace", "input", attrs=[int_attr("blocksize"), str_attr("mode", "DCR")],
    infer=_depth_to_space_type, family=FAMILY,
    doc="N x C x H x W -> N x C/b^2 x H*b x W*b with b = blocksize. DCR: channel index "
        "(i*b + j)*C/b^2 + c goes to channel c, row offset i, column offset j; CRD: channel "
        "c*b^2 + i*b + j does (ONNX DepthToSpace).")


def _space_to_depth_type(node: Node) -> Type:
    source, b = node.input.type, node.blocksize
    if node.mode not in ("DCR", "CRD"):
        raise node.fail(f"mode must be DCR or CRD, got '{node.mode}'")
    if source.rank != 4 or b < 1 or source.shape[2] % b or source.shape[3] % b:
        raise node.fail(f"needs an N x C x H x W operand with H and W divisible by {b}, got {source}")
    n, c, h, w = source.shape
    return source.with_shape([n, c * b * b, h // b, w // b])


SpaceToDepth = define_node(
    "SpaceToDepth", "input", attrs=[int_attr("blocksize"), str_attr("mode", "DCR")],
    infer=_space_to_depth_type, family=FAMILY,
    doc="N x C x H x W -> N x C*b^2 x H/b x W/b, the inverse of DepthToSpace in the same mode: "
        "DCR puts row offset i, column offset j of channel c at channel (i*b + j)*C + c; CRD at "
        "channel c*b^2 + i*b + j.")


# -- triangles --------------------------------------------------------------------------------
def _trilu_type(node: Node) -> Type:
    source = node.input.type
    if source.rank < 2:
        raise node.fail(f"needs an operand of rank 2 or more, got {source}")
    return source


Trilu = define_node(
    "Trilu", "input", attrs=[bool_attr("upper", True), int_attr("k", 0)], infer=_trilu_type,
    family=FAMILY,
    doc="Keep the upper (upper=True: column - row >= k) or lower (column - row <= k) triangle of "
        "each matrix in the last two dims and zero the rest (a quantized result stores its offset, "
        "the code of 0.0).")

