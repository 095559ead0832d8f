"""Reference kernels of the neural-network node kinds.

They run whole ImageNet networks in CI, so every kernel is vectorised: loops run
only over small dims (window taps, groups, LRN's size). Float16 and bfloat16
operands are computed in float32 (float64 stays float64); the evaluator casts
results back to the node's element kind.
"""
from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np


from ... import numerics
from ...graph.nodes import linalg, nn, quant
from ...graph.nodes.lrn_int8 import lrn_table
from ...graph.types import ElemKind
from ..registry import kernel
from .quant import offset_shifted, wrap_int32
from .windows import conv, pad_spatial, taps


def compute_dtype(*arrays: np.ndarray | None) -> np.dtype:
    """float64 if any operand is float64, else float32: the precision the kernels work in."""
    wide = any(a is not None and a.dtype == np.float64 for a in arrays)
    return np.dtype(np.float64 if wide else np.float32)


def is_float(x: np.ndarray) -> bool:
    """Whether `x` holds floats (bfloat16's numpy kind is 'V', not 'f')."""
    return ElemKind.from_dtype(x.dtype).is_float


def _as(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return x.astype(dtype, copy=False)


def _per_channel(v: np.ndarray, rank: int) -> np.ndarray:
    """A (C,) vector shaped to broadcast over N x C x D.. of `rank`."""
    return v.reshape((-1,) + (1,) * (rank - 2))


# -- convolution ---------------------------------------------------------------------------------
def _spatial_pads(node) -> tuple[list[int], list[int]]:
    k = len(node.kernel)
    return list(node.pads[:k]), list(node.pads[k:])


@kernel(nn.Conv)
def _conv(node, x, w, b):
    if node.type.elem.is_quantized:
        y = conv(offset_shifted(x, node.input.type), offset_shifted(w, node.filter.type), strides=node.strides,
                 pads=node.pads, dilations=node.dilations, group=node.group, acc_dtype=np.float64)
        if b is not None:
            y += _per_channel(b.astype(np.float64), y.ndim)
        return wrap_int32(y)
    acc = compute_dtype(x, w)
    y = conv(_as(x, acc), _as(w, acc), strides=node.strides, pads=node.pads,
             dilations=node.dilations, group=node.group, acc_dtype=acc)
    if b is not None:
        y += _per_channel(_as(b, acc), y.ndim)
    return y


@kernel(nn.ConvTranspose)
def _conv_transpose(node, x, w, b):
    """One matrix product per group gives every (input position, filter tap) contribution;
    each tap's block is then scatter-added into a strided slice of the output, and cropped.

    The buffer covers both the natural extent stride*(D-1) + (K-1)*dilation + 1 and the
    requested output, so negative pads and output_padding just leave zeros.
    """
    acc = compute_dtype(x, w)
    x, w = _as(x, acc), _as(w, acc)
    k = x.ndim - 2
    spatial, out_spatial = x.shape[2:], node.type.shape[2:]
    begin, _ = _spatial_pads(node)
    lead = [max(0, -p) for p in begin]
    size = [lead[i] + max((spatial[i] - 1) * node.strides[i] + nn.window_extent(node.kernel[i], node.dilations[i]),
                          begin[i] + out_spatial[i]) for i in range(k)]
    n, c = x.shape[:2]
    cg, mg = c // node.group, w.shape[1]
    tap_list = list(taps(spatial, node.kernel, node.strides, node.dilations))
    by_channel = x.swapaxes(0, 1).reshape(c, -1)  # C x (N*D..)
    buf = np.zeros((mg * node.group, n, *size), dtype=acc)  # M x N x D'..: channel-major, like cols
    shifted = buf[(slice(None), slice(None)) + tuple(slice(lead_i, None) for lead_i in lead)]
    for g in range(node.group):
        filters = w[g * cg:(g + 1) * cg].reshape(cg, -1)  # C/g x (M/g * taps)
        cols = (filters.T @ by_channel[g * cg:(g + 1) * cg]).reshape((mg, len(tap_list), n) + spatial)
        for number, where in tap_list:
            shifted[(slice(g * mg, (g + 1) * mg), slice(None)) + where] += cols[:, number]
    crop = tuple(slice(lead[i] + begin[i], lead[i] + begin[i] + out_spatial[i]) for i in range(k))
    y = buf[(slice(None), slice(None)) + crop].swapaxes(0, 1)
    if b is not None:
        y = y + _per_channel(_as(b, acc), y.ndim)
    return y


# -- pooling ------------------------------------------------------------------------------------
def _pool_padded(node, x: np.ndarray, value: float) -> np.ndarray:
    """x padded by the explicit pads plus the end extension ceil_mode's last window needs."""
    k = x.ndim - 2
    begin, end = _spatial_pads(node)
    out = node.types[0].shape[2:]
    for i in range(k):
        need = (out[i] - 1) * node.strides[i] + nn.window_extent(node.kernel[i], node.dilations[i])
        end[i] = max(end[i], need - x.shape[2 + i] - begin[i])
    return pad_spatial(x, begin + end, value)


def _lowest(dtype: np.dtype) -> float:
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _running_max(node, x, track: bool):
    """Running maximum over the taps; with `track`, also which tap won (the first one on ties)."""
    work = _as(x, compute_dtype(x)) if is_float(x) else x
    xp = _pool_padded(node, work, _lowest(work.dtype))
    best, winner = None, None
    for number, where in taps(node.types[0].shape[2:], node.kernel, node.strides, node.dilations):
        values = xp[(slice(None), slice(None)) + where]
        if best is None:
            best = values.copy()
            winner = np.zeros(values.shape, dtype=np.int32) if track else None
            continue
        if track:
            better = values > best
            # tap numbers only grow, so the latest strict improvement is the largest number seen
            np.maximum(winner, better * np.int32(number), out=winner)
        np.maximum(best, values, out=best)
    return best, winner


@kernel(nn.MaxPool)
def _max_pool(node, x):
    return _running_max(node, x, track=False)[0]


@kernel(nn.MaxPoolWithIndices)
def _max_pool_with_indices(node, x):
    best, winner = _running_max(node, x, track=True)
    return best, _argmax_indices(node, x.shape, winner)


def _argmax_indices(node, shape: Sequence[int], winner: np.ndarray) -> np.ndarray:
    """Flat input positions of the winning taps: base of (n, c) + window start + tap offset."""
    k = len(shape) - 2
    spatial = shape[2:]
    # distance between neighbours along each spatial dim in the flattened input
    if node.column_major:
        step = [int(np.prod(spatial[:i])) for i in range(k)]
    else:
        step = [int(np.prod(spatial[i + 1:])) for i in range(k)]
    out_spatial = winner.shape[2:]
    plane = int(np.prod(spatial))
    flat = (np.arange(shape[0] * shape[1], dtype=np.int64) * plane).reshape(shape[:2] + (1,) * k)
    for i in range(k):
        start = np.arange(out_spatial[i], dtype=np.int64) * node.strides[i] - node.pads[i]
        flat = flat + (start * step[i]).reshape((-1,) + (1,) * (k - 1 - i))
    offsets = np.array([sum(t[i] * node.dilations[i] * step[i] for i in range(k))
                        for t in itertools.product(*(range(kk) for kk in node.kernel))], dtype=np.int64)
    return flat + offsets[winner]


def _tap_counts(node, spatial: Sequence[int], out_spatial: Sequence[int]) -> np.ndarray:
    """Divisor of each average: the taps inside the input (and its explicit pads if counted)."""
    k = len(spatial)
    begin, end = _spatial_pads(node)
    counts = np.ones((1, 1) + (1,) * k)
    for i in range(k):
        low, high = (0, begin[i] + spatial[i] + end[i]) if node.count_include_pad \
            else (begin[i], begin[i] + spatial[i])
        pos = np.arange(out_spatial[i])[:, None] * node.strides[i] \
            + np.arange(node.kernel[i])[None, :] * node.dilations[i]
        per_dim = ((pos >= low) & (pos < high)).sum(axis=1)
        counts = counts * per_dim.reshape((-1,) + (1,) * (k - 1 - i))
    return counts


@kernel(nn.AveragePool)
def _average_pool(node, x):
    if node.type.elem.is_quantized:
        return _quantized_average_pool(node, x)
    acc = compute_dtype(x)
    xp = _pool_padded(node, _as(x, acc), 0.0)
    out_spatial = node.type.shape[2:]
    total = None
    for _, where in taps(out_spatial, node.kernel, node.strides, node.dilations):
        values = xp[(slice(None), slice(None)) + where]
        total = values.copy() if total is None else np.add(total, values, out=total)
    return total / _tap_counts(node, x.shape[2:], out_spatial).astype(acc)


def _quantized_average_pool(node, x: np.ndarray) -> np.ndarray:
    """round_half_even(sum of the raw q of the counted taps, padding worth the offset / their count).

    Summed as q - offset (every tap, counted or not, adds 0 outside the input),
    then the counted taps' offsets are added back, so ceil_mode's uncounted
    extension contributes nothing.
    """
    offset = node.input.type.offset
    xp = _pool_padded(node, x.astype(np.int64) - offset, 0)
    total = None
    for _, where in taps(node.type.shape[2:], node.kernel, node.strides, node.dilations):
        values = xp[(slice(None), slice(None)) + where]
        total = values.copy() if total is None else np.add(total, values, out=total)
    counts = _tap_counts(node, x.shape[2:], node.type.shape[2:]).astype(np.int64)
    return numerics.rounded_average(total + offset * counts, counts)


@kernel(nn.GlobalAveragePool)
def _global_average_pool(node, x):
    return _as(x, compute_dtype(x)).mean(axis=tuple(range(2, x.ndim)), keepdims=True)


@kernel(nn.GlobalMaxPool)
def _global_max_pool(node, x):
    return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)


# -- normalisation ------------------------------------------------------------------------------
@kernel(nn.BatchNorm)
def _batch_norm(node, x, scale, bias, mean, var):
    """Folded into one multiply-add per element: y = x * a[c] + b[c]."""
    acc = compute_dtype(x, scale, bias, mean, var)
    a = _as(scale, acc) / np.sqrt(_as(var, acc) + acc.type(node.epsilon))
    b = _as(bias, acc) - _as(mean, acc) * a
    y = _as(x, acc) * _per_channel(a, x.ndim)
    y += _per_channel(b, x.ndim)
    return y


def _normalise(x: np.ndarray, axes: tuple[int, ...], epsilon: float) -> tuple[np.ndarray, ...]:
    """(x - mean) * inv_std over `axes`, with the mean and inv_std (biased variance)."""
    mean = x.mean(axis=axes, keepdims=True)
    centred = x - mean
    inv_std = 1.0 / np.sqrt((centred * centred).mean(axis=axes, keepdims=True) + x.dtype.type(epsilon))
    centred *= inv_std
    return centred, mean, inv_std


@kernel(nn.InstanceNorm)
def _instance_norm(node, x, scale, bias):
    acc = compute_dtype(x, scale)
    y, _, _ = _normalise(_as(x, acc), tuple(range(2, x.ndim)), node.epsilon)
    return y * _per_channel(_as(scale, acc), x.ndim) + _per_channel(_as(bias, acc), x.ndim)


@kernel(nn.GroupNorm)
def _group_norm(node, x, scale, bias):
    acc = compute_dtype(x, scale)
    grouped = _as(x, acc).reshape((x.shape[0], node.groups, -1))
    y, _, _ = _normalise(grouped, (2,), node.epsilon)
    y = y.reshape(x.shape)
    return y * _per_channel(_as(scale, acc), x.ndim) + _per_channel(_as(bias, acc), x.ndim)


@kernel(nn.LayerNorm)
def _layer_norm(node, x, scale, bias):
    acc = compute_dtype(x, scale)
    y, mean, inv_std = _normalise(_as(x, acc), tuple(range(node.axis, x.ndim)), node.epsilon)
    y *= _as(scale, acc)
    if bias is not None:
        y += _as(bias, acc)
    return y, mean, inv_std


@kernel(nn.RMSNorm)
def _rms_norm(node, x, scale):
    acc = compute_dtype(x, scale)
    x = _as(x, acc)
    mean_square = (x * x).mean(axis=tuple(range(node.axis, x.ndim)), keepdims=True)
    return x / np.sqrt(mean_square + acc.type(node.epsilon)) * _as(scale, acc)


def _channel_window_sums(squares: np.ndarray, size: int) -> np.ndarray:
    """LRN's sums over channels [c - floor((size-1)/2), c + ceil((size-1)/2)], as `size` shifted adds of
    the zero-padded squares."""
    channels = squares.shape[1]
    before = (size - 1) // 2
    widths = [(0, 0), (before, size - 1 - before)] + [(0, 0)] * (squares.ndim - 2)
    padded = np.pad(squares, widths)
    window = padded[:, :channels].copy()
    for shift in range(1, size):
        window += padded[:, shift:shift + channels]
    return window


@kernel(nn.LRN)
def _lrn(node, x):
    if node.input.type.elem is ElemKind.QINT8:
        return _quantized_lrn(node, x)
    acc = compute_dtype(x)
    x = _as(x, acc)
    window = _channel_window_sums(x * x, node.size)
    return x / (acc.type(node.bias) + acc.type(node.alpha / node.size) * window) ** acc.type(node.beta)


def _quantized_lrn(node, x: np.ndarray) -> np.ndarray:
    """nn.LRN's integer semantics: u * T[S >> k] / 2^F rounded half to even, plus the offset."""
    t = node.input.type
    table = lrn_table(t.scale, t.offset, node.size, node.alpha, node.beta, node.bias)
    u = x.astype(np.int64) - t.offset
    index = _channel_window_sums(u * u, node.size) >> table.index_shift
    y = numerics.round_shift(u * table.entries[index], table.fraction_bits) + t.offset
    return np.clip(y, -128, 127).astype(np.int8)


# -- matrix products ----------------------------------------------------------------------------
def _numeric(*arrays: np.ndarray) -> list[np.ndarray]:
    """Float operands in the kernels' compute precision; integers stay as they are."""
    if not is_float(arrays[0]):
        return list(arrays)
    acc = compute_dtype(*arrays)
    return [_as(a, acc) for a in arrays]


@kernel(linalg.Gemm)
def _gemm(node, a, b, c):
    a, b = _numeric(a, b)
    y = (a.T if node.trans_a else a) @ (b.T if node.trans_b else b)
    if node.alpha != 1.0:
        y = y * node.alpha
    if c is not None and node.beta != 0.0:
        y = y + _numeric(c)[0] * node.beta
    return y


@kernel(linalg.MatMul)
def _matmul(node, a, b):
    if node.type.elem.is_quantized:
        return wrap_int32(np.matmul(offset_shifted(a, node.lhs.type), offset_shifted(b, node.rhs.type)))
    return np.matmul(*_numeric(a, b))


@kernel(linalg.Einsum)
def _einsum(node, operands):
    return np.einsum(node.equation, *_numeric(*operands), optimize=len(operands) > 1)


# -- softmax ------------------------------------------------------------------------------------
def _shifted(node, x: np.ndarray) -> np.ndarray:
    """x - its maximum over the axes, so exp cannot overflow."""
    x = _as(x, compute_dtype(x))
    return x - x.max(axis=node.axes, keepdims=True)


def _int8_softmax(node, x: np.ndarray) -> np.ndarray:
    """The integer semantics of nn.Softmax on int8q (its doc), bit for bit what the NPU computes."""
    length = int(np.prod([x.shape[a] for a in node.axes]))
    table = quant.softmax_table(node.input.type.scale, length)
    raw = x.astype(np.int64)
    e = table[np.minimum(raw.max(axis=node.axes, keepdims=True) - raw, quant.SOFTMAX_TABLE_SIZE - 1)]
    if node.masked:  # the code -128 is -inf: no weight, and a group of nothing else sums to 1, not 0
        e = np.where(raw == -128, 0, e)
    total = e.sum(axis=node.axes, keepdims=True)
    if node.wide:
        return numerics.divide_rounded(e, np.maximum(total, 1) if node.masked else total,
                                       nn.SOFTMAX_WIDE_BITS).astype(np.int32)
    q = numerics.divide_rounded(e, np.maximum(total, 1) if node.masked else total, quant.SOFTMAX_SHIFT)
    return np.clip(q + nn.SOFTMAX_ZERO, -128, 127).astype(np.int8)


@kernel(nn.Softmax)
def _softmax(node, x):
    if node.input.type.elem is ElemKind.QINT8:
        return _int8_softmax(node, x)
    e = np.exp(_shifted(node, x))
    e /= e.sum(axis=node.axes, keepdims=True)
    return e


@kernel(nn.LogSoftmax)
def _log_softmax(node, x):
    shifted = _shifted(node, x)
    return shifted - np.log(np.exp(shifted).sum(axis=node.axes, keepdims=True))
