"""Reference kernel of Resize: separable resampling, one axis at a time.

Every output index of an axis maps to an input coordinate x; nearest mode
gathers one element per output index, linear and cubic a few taps with a
weight table of shape (output size, taps) built once per axis. The semantics
follow the ONNX reference implementation (onnx.reference), coordinate formulas
and edge rules included.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from ...graph.nodes.resize import Resize
from ..registry import kernel


def source_coordinates(mode: str, out_size: int, in_size: int, scale: float,
                       roi: tuple[float, float] | None) -> tuple[np.ndarray, np.ndarray | None]:
    """The input coordinate of each output index, and for tf_crop_and_resize which fall outside."""
    y = np.arange(out_size, dtype=np.float64)
    width = scale * in_size  # the output size before rounding
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5, None
    if mode == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / width)
        return offset + (y + 0.5) / scale - 0.5, None
    if mode == "pytorch_half_pixel":
        return (np.full(out_size, -0.5) if width == 1 else (y + 0.5) / scale - 0.5), None
    if mode == "align_corners":
        return (np.zeros(out_size) if width == 1 else y * (in_size - 1) / (width - 1)), None
    if mode == "asymmetric":
        return y / scale, None
    if mode == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale, None
    start, end = roi
    if width == 1:
        x = np.full(out_size, (end - start) * (in_size - 1) / 2)
    else:
        x = y * (end - start) * (in_size - 1) / (width - 1)
    x = x + start * (in_size - 1)
    return x, (x < 0) | (x > in_size - 1)


def nearest_index(x: np.ndarray, nearest_mode: str) -> np.ndarray:
    """The index nearest each coordinate; an integral coordinate is its own index."""
    below = np.floor(x)
    ratio = x - below
    if nearest_mode == "round_prefer_floor":
        up = ratio > 0.5
    elif nearest_mode == "round_prefer_ceil":
        up = ratio >= 0.5
    else:
        up = np.full(x.shape, nearest_mode == "ceil")
    return np.where(ratio == 0, x, below + up).astype(np.int64)


def _keys_cubic(d: np.ndarray, a: float) -> np.ndarray:
    """The cubic convolution kernel of Keys (1981) with parameter a, at distances |d|."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _cubic_weights(ratio: np.ndarray, a: float) -> np.ndarray:
    """Keys weights of the 4 neighbours left-1 .. left+2, in the ONNX reference's closed forms."""
    r1, q, q1 = ratio + 1, 1 - ratio, (1 - ratio) + 1
    return np.stack([((a * r1 - 5 * a) * r1 + 8 * a) * r1 - 4 * a,
                     ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1,
                     ((a + 2) * q - (a + 3)) * q * q + 1,
                     ((a * q1 - 5 * a) * q1 + 8 * a) * q1 - 4 * a], axis=1)


def filter_taps(node, x: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Tap indices and weights (both outputs x taps) of linear/cubic resampling.

    The left neighbour of x is ceil(x) - 1, so an integral x sits at ratio 1 on its
    right. antialias stretches the kernel by 1/scale when downsampling, then
    renormalises the weights.
    """
    left = np.ceil(x) - 1
    ratio = x - left
    if node.antialias:
        support = 1 if node.mode == "linear" else 2
        stretch = min(scale, 1.0)
        first = math.floor(-support / stretch) + 1
        offsets = np.arange(first, 2 - first)
        distance = (offsets[None, :] - ratio[:, None]) * stretch
        if node.mode == "linear":
            weights = np.clip(1 - np.abs(distance), 0, 1)
        else:
            weights = _keys_cubic(distance, node.cubic_coeff_a)
        weights = weights / weights.sum(axis=1, keepdims=True)
    elif node.mode == "linear":
        offsets, weights = np.arange(2), np.stack([1 - ratio, ratio], axis=1)
    else:
        offsets, weights = np.arange(-1, 3), _cubic_weights(ratio, node.cubic_coeff_a)
    return left.astype(np.int64)[:, None] + offsets[None, :], weights


def _along(axis: int, rank: int, values: np.ndarray) -> np.ndarray:
    """A per-output-index vector shaped to broadcast along `axis`."""
    return values.reshape((1,) * axis + (-1,) + (1,) * (rank - axis - 1))


def _resize_axis(node, data: np.ndarray, axis: int, out_size: int, scale: float,
                 roi: tuple[float, float] | None, work: np.dtype) -> np.ndarray:
    in_size = data.shape[axis]
    x, extrapolated = source_coordinates(node.coordinate_mode, out_size, in_size, scale, roi)
    if node.mode == "nearest":
        index = nearest_index(x, node.nearest_mode)
        result = np.take(data, np.clip(index, 0, in_size - 1), axis=axis)
        if node.exclude_outside:
            # The nearest sample's weight is 0 outside the input, leaving no weight at all.
            outside = (index < 0) | (index >= in_size)
            result = np.where(_along(axis, data.ndim, outside), np.zeros((), result.dtype), result)
    else:
        index, weights = clamped_taps(node, x, scale, in_size)
        weights = weights.astype(work)
        result = np.zeros(data.shape[:axis] + (out_size,) + data.shape[axis + 1:], work)
        for tap in range(index.shape[1]):  # a handful of taps, each a whole-tensor gather
            result += np.take(data, index[:, tap], axis=axis) * _along(axis, data.ndim, weights[:, tap])
    if extrapolated is not None and extrapolated.any():
        fill = saturate(np.asarray(node.extrapolation_value), result.dtype)
        result = np.where(_along(axis, data.ndim, extrapolated), fill, result)
    return result


def saturate(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Round half to even and clamp into an integer kind; clamp into a float kind's finite range."""
    if values.dtype == dtype:
        return values
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.clip(np.round(values), info.min, info.max).astype(dtype)
    high = float(ml_dtypes.finfo(dtype).max)
    return np.clip(values, -high, high).astype(dtype)


def is_identity(node, axis: int, in_size: int) -> bool:
    """Whether resizing `axis` changes nothing (the ONNX reference skips such axes)."""
    rank = len(node.shape)
    uncropped = not node.roi or (math.isclose(node.roi[axis], 0.0) and
                                 math.isclose(node.roi[rank + axis], 1.0))
    return math.isclose(node.scales[axis], 1.0) and node.shape[axis] == in_size and uncropped


@kernel(Resize)
def _resize(node, x):
    rank = x.ndim
    if node.mode == "nearest":
        work = x.dtype
    elif x.dtype == np.float64 or not np.issubdtype(x.dtype, np.floating):
        work = np.dtype(np.float64)
    else:
        work = np.dtype(np.float32)
    result = x
    for axis in range(rank):
        if is_identity(node, axis, result.shape[axis]):
            continue
        roi = (node.roi[axis], node.roi[rank + axis]) if node.roi else None
        result = _resize_axis(node, result, axis, node.shape[axis], node.scales[axis], roi, work)
    return saturate(result, x.dtype)


def clamped_taps(node, coords: np.ndarray, scale: float, in_size: int) -> tuple[np.ndarray, np.ndarray]:
    """In-range sample indices and float64 weights per output position (linear/cubic).

    With exclude_outside the weights of taps outside the input are dropped and the
    rest renormalised; indices are then clamped (edge replication).
    """
    index, weights = filter_taps(node, coords, scale)
    if node.exclude_outside:
        weights = np.where((index < 0) | (index >= in_size), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(index, 0, in_size - 1), weights
