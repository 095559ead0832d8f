"""Sliding-window helpers shared by convolution, pooling and integer convolution kernels.

Windows are strided views (no copies until the contraction), so a conv is one
tensordot per group: fast enough to run resnet50 and vgg19 in the evaluator.
"""
from __future__ import annotations

from typing import Sequence

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


def conv(x: np.ndarray, w: np.ndarray, *, strides: Sequence[int], pads: Sequence[int],
         dilations: Sequence[int], group: int, acc_dtype: np.dtype | None = None) -> np.ndarray:
    """Grouped N-d cross-correlation (ONNX Conv without bias): N x C x D.. * M x C/g x K.. -> N x M x O..

    `acc_dtype` is the accumulation type (float64 gives exact int32 results for int8 inputs).
    """
    acc = np.dtype(acc_dtype or np.result_type(x.dtype, w.dtype))
    k = x.ndim - 2
    xp = pad_spatial(x.astype(acc, copy=False), pads)
    win = windows(xp, w.shape[2:], strides, dilations)  # N, C, O.., K..
    n, c = x.shape[:2]
    m = w.shape[0]
    cg, mg = c // group, m // group
    out_spatial = win.shape[2:2 + k]
    out = np.empty((n, m) + tuple(out_spatial), dtype=acc)
    axes_w = [1] + list(range(2, 2 + k))  # C/g, K..
    for g in range(group):
        wg = w[g * mg:(g + 1) * mg].astype(acc, copy=False)
        xg = win[:, g * cg:(g + 1) * cg]
        # contract C/g and K.. : result N, O.., M/g
        res = np.tensordot(xg, wg, axes=([1] + list(range(2 + k, 2 + 2 * k)), axes_w))
        out[:, g * mg:(g + 1) * mg] = np.moveaxis(res, -1, 1)
    return out
