"""Converters of ONNX Resize (opsets 10..19 forms) and Upsample (opsets 7..9).

Every form becomes the static Resize node: output shape and per-axis scales
resolved from scales or sizes (with `axes` and `keep_aspect_ratio_policy`),
the crop box expanded to every axis, and the opset's defaults filled in.
Upsample and Resize-10 predate the coordinate attributes; they resample in
asymmetric coordinates, nearest rounding down when upsampling (and, Resize-10
only, up when downsampling), as onnxruntime does.
"""
from __future__ import annotations

import numpy as np

from ....graph.node import NodeValue
from ....graph.nodes.resize import COORDINATE_MODES, DEFAULT_CUBIC_COEFF_A, MODES, NEAREST_MODES, Resize
from ..context import OnnxNode
from ..registry import converter

_ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")


def _present(array: np.ndarray | None) -> np.ndarray | None:
    """An optional tensor input: None when absent or empty (ONNX's two ways to omit it)."""
    if array is None or np.asarray(array).size == 0:
        return None
    return np.asarray(array)


def _choice(node: OnnxNode, name: str, default: str, choices: tuple[str, ...]) -> str:
    value = node.attr(name, default)
    if value not in choices:
        raise node.unsupported(f"{name} '{value}' is not supported (expected one of {', '.join(choices)})")
    return value


def _axes(node: OnnxNode, rank: int) -> list[int]:
    given = node.attr("axes") if node.opset >= 18 else None
    if given is None:
        return list(range(rank))
    axes = []
    for axis in given:
        if not -rank <= axis < rank:
            raise node.error(f"axis {axis} is out of range for rank {rank}")
        axes.append(axis % rank)
    if len(set(axes)) != len(axes):
        raise node.error(f"axes {list(given)} repeat an axis")
    return axes


def _check_length(node: OnnxNode, what: str, values: np.ndarray, expected: int) -> None:
    if values.ndim != 1 or values.size != expected:
        raise node.error(f"{what} has shape {list(values.shape)}, expected [{expected}]")


def _shape_and_scales(node: OnnxNode, in_shape: tuple[int, ...], axes: list[int],
                      scales: np.ndarray | None, sizes: np.ndarray | None) -> tuple[list[int], list[float]]:
    """Output shape and per-axis scales, as the ONNX reference derives them."""
    shape, full_scales = list(in_shape), [1.0] * len(in_shape)
    if (scales is None) == (sizes is None):
        raise node.error("exactly one of 'scales' and 'sizes' must be given")
    if any(in_shape[a] == 0 for a in axes):
        raise node.unsupported(f"resizing an axis of size 0 (input shape {list(in_shape)})")
    if scales is not None:
        _check_length(node, "scales", scales, len(axes))
        if not np.all((scales > 0) & np.isfinite(scales)):
            raise node.error(f"scales {scales.tolist()} must be positive and finite")
        for axis, scale in zip(axes, scales.tolist()):
            full_scales[axis] = scale
            shape[axis] = int(scale * in_shape[axis])
        return shape, full_scales
    _check_length(node, "sizes", sizes, len(axes))
    ratios = [int(size) / in_shape[axis] for axis, size in zip(axes, sizes)]
    policy = _choice(node, "keep_aspect_ratio_policy", "stretch", _ASPECT_POLICIES)
    if policy == "stretch":
        for axis, size, ratio in zip(axes, sizes, ratios):
            shape[axis], full_scales[axis] = int(size), ratio
        return shape, full_scales
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    for axis in axes:
        shape[axis], full_scales[axis] = int(scale * in_shape[axis] + 0.5), scale
    return shape, full_scales


def _roi(node: OnnxNode, rank: int, axes: list[int]) -> list[float]:
    """The crop box over every axis (starts, then ends); axes not listed keep [0, 1]."""
    roi = _present(node.const(1, "Resize's roi"))
    if roi is None:
        raise node.error("tf_crop_and_resize needs the 'roi' input")
    _check_length(node, "roi", roi, 2 * len(axes))
    full = [0.0] * rank + [1.0] * rank
    for i, axis in enumerate(axes):
        full[axis], full[rank + axis] = float(roi[i]), float(roi[len(axes) + i])
    return full


@converter("Resize")
def _resize(node: OnnxNode) -> NodeValue:
    x = node.input(0)
    if node.opset < 11:
        return _legacy(node, x, node.const(1, "Resize's scales"), downsampling_ceil=True)
    rank = x.type.rank
    mode = _choice(node, "mode", "nearest", MODES)
    coordinate_mode = _choice(node, "coordinate_transformation_mode", "half_pixel", COORDINATE_MODES)
    axes = _axes(node, rank)
    scales = _present(node.const(2, "Resize's scales"))
    sizes = _present(node.const(3, "Resize's sizes"))
    shape, full_scales = _shape_and_scales(node, x.type.shape, axes, scales, sizes)
    crops = coordinate_mode == "tf_crop_and_resize"
    attrs = dict(shape=shape, scales=full_scales, mode=mode, coordinate_mode=coordinate_mode,
                 exclude_outside=bool(node.attr("exclude_outside", 0)),
                 roi=_roi(node, rank, axes) if crops else (),
                 extrapolation_value=float(node.attr("extrapolation_value", 0.0)) if crops else 0.0)
    if mode == "nearest":
        attrs["nearest_mode"] = _choice(node, "nearest_mode", "round_prefer_floor", NEAREST_MODES)
    else:
        # antialias only exists for the filtering modes; the spec gives it no effect on nearest.
        attrs["antialias"] = bool(node.attr("antialias", 0))
    if mode == "cubic":
        attrs["cubic_coeff_a"] = float(node.attr("cubic_coeff_a", DEFAULT_CUBIC_COEFF_A))
    return node.add(Resize, x, **attrs)


@converter("Upsample")
def _upsample(node: OnnxNode) -> NodeValue:
    scales = node.attr("scales") if node.opset < 9 else node.const(1, "Upsample's scales")
    if scales is None:
        raise node.error("Upsample needs scales")
    if np.any(np.asarray(scales) < 1):
        raise node.error(f"Upsample scales {np.asarray(scales).tolist()} must be >= 1")
    return _legacy(node, node.input(0), scales, downsampling_ceil=False)


def _legacy(node: OnnxNode, x: NodeValue, scales, downsampling_ceil: bool) -> NodeValue:
    """Upsample and Resize-10: asymmetric coordinates; nearest floors upward, ceils downward.

    Nearest rounding differs per axis when some axes grow and others shrink, so
    those resample in two nodes (resampling is separable, the result is the same).
    """
    mode = _choice(node, "mode", "nearest", ("nearest", "linear"))
    scales = np.asarray(scales, dtype=np.float32)
    rank = x.type.rank
    _check_length(node, "scales", scales, rank)
    if not np.all((scales > 0) & np.isfinite(scales)):
        raise node.error(f"scales {scales.tolist()} must be positive and finite")
    shrinking = [a for a in range(rank) if scales[a] < 1] if downsampling_ceil and mode == "nearest" else []
    groups = [("floor", [a for a in range(rank) if a not in shrinking]), ("ceil", shrinking)]
    groups = [(rounding, axes) for rounding, axes in groups if axes]
    for i, (rounding, axes) in enumerate(groups):
        shape, full_scales = _shape_and_scales(node, x.type.shape, axes, scales[axes], None)
        nearest = {"nearest_mode": rounding} if mode == "nearest" else {}
        x = node.add(Resize, x, suffix="" if i == len(groups) - 1 else rounding, shape=shape,
                     scales=full_scales, mode=mode, coordinate_mode="asymmetric", **nearest)
    return x
