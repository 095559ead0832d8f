"""Sliding-window helpers shared by convolution, pooling and integer convolution kernels.

A conv is im2col plus one matrix product per group: each window tap copies one
strided slice of the padded input into a (C x taps) x (N x O..) matrix, which BLAS
multiplies by the M x (C x taps) filter matrix. That is fast enough to run resnet50
and vgg19 in the evaluator.
"""
from __future__ import annotations

import itertools
from typing import Iterator, Sequence

import numpy as np


def pad_spatial(x: np.ndarray, pads: Sequence[int], value: float = 0.0) -> np.ndarray:
    """Pad the spatial dims of an N x C x D1..Dk array; pads = [begin_1..begin_k, end_1..end_k]."""
    k = x.ndim - 2
    if not any(pads):
        return x
    widths = [(0, 0), (0, 0)] + [(int(pads[i]), int(pads[i + k])) for i in range(k)]
    return np.pad(x, widths, mode="constant", constant_values=value)


def windows(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int],
            dilations: Sequence[int]) -> np.ndarray:
    """View of every kernel window: N x C x O1..Ok x K1..Kk for an (already padded) N x C x D1..Dk."""
    k = x.ndim - 2
    span = [(kernel[i] - 1) * dilations[i] + 1 for i in range(k)]
    view = np.lib.stride_tricks.sliding_window_view(x, span, axis=tuple(range(2, 2 + k)))
    index = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides) \
        + tuple(slice(None, None, d) for d in dilations)
    return view[index]


def taps(out_spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
         dilations: Sequence[int]) -> Iterator[tuple[int, tuple[slice, ...]]]:
    """(tap number, spatial slices) for each window tap, in row-major tap order.

    Slicing the padded input's spatial dims with a tap's slices gives, for each of the
    `out_spatial` output positions, the input element that tap reads.
    """
    k = len(kernel)
    out = out_spatial
    for number, tap in enumerate(itertools.product(*(range(kk) for kk in kernel))):
        yield number, tuple(slice(tap[i] * dilations[i], tap[i] * dilations[i] + (out[i] - 1) * strides[i] + 1,
                                  strides[i]) for i in range(k))


def conv(x: np.ndarray, w: np.ndarray, *, strides: Sequence[int], pads: Sequence[int],
         dilations: Sequence[int], group: int, acc_dtype: np.dtype | None = None) -> np.ndarray:
    """Grouped N-d cross-correlation (ONNX Conv without bias): N x C x D.. * M x C/g x K.. -> N x M x O..

    `acc_dtype` is the accumulation type (float64 gives exact int32 results for int8 inputs).
    """
    acc = np.dtype(acc_dtype or np.result_type(x.dtype, w.dtype))
    k = x.ndim - 2
    xp = pad_spatial(x.astype(acc, copy=False), pads)
    w = w.astype(acc, copy=False)
    n, c = x.shape[:2]
    m, kernel = w.shape[0], w.shape[2:]
    cg, mg = c // group, m // group
    out_spatial = tuple((xp.shape[2 + i] - (kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1
                        for i in range(k))
    tap_list = list(taps(out_spatial, kernel, strides, dilations))
    by_channel = xp.swapaxes(0, 1)  # C x N x D..: a tap's slice is already in im2col row order
    out = np.empty((n, m) + out_spatial, dtype=acc)
    if cg == 1 and group > 1:
        _depthwise(by_channel, w, tap_list, out, group)
        return out
    for g in range(group):
        cols = np.empty((cg, len(tap_list), n) + out_spatial, dtype=acc)
        channels = slice(g * cg, (g + 1) * cg)
        for number, where in tap_list:
            cols[:, number] = by_channel[(channels, slice(None)) + where]
        product = w[g * mg:(g + 1) * mg].reshape(mg, -1) @ cols.reshape(cg * len(tap_list), -1)
        out[:, g * mg:(g + 1) * mg] = product.reshape((mg, n) + out_spatial).swapaxes(0, 1)
    return out


def _depthwise(by_channel: np.ndarray, w: np.ndarray, tap_list: list, out: np.ndarray, group: int) -> None:
    """One input channel per group: a multiply-add per tap beats `group` tiny matrix products."""
    n, m = out.shape[:2]
    k = out.ndim - 2
    mg = m // group
    weights = w.reshape(group, mg, -1)  # G x M/G x taps
    result = out.reshape((n, group, mg) + out.shape[2:])
    result.fill(0)
    for number, where in tap_list:
        tap = by_channel[(slice(None), slice(None)) + where].swapaxes(0, 1)  # N x G x O..
        result += tap[:, :, None] * weights[:, :, number].reshape((group, mg) + (1,) * k)
