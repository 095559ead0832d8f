"""Lowering rules of the nn node kinds.

Conv, MaxPool and AveragePool are primitives and stay. Every rule here computes in
the precision of the reference kernel (float32, or float64 when an operand is
float64): half-precision operands are Cast up first and the result Cast down once,
so the lowered graph rounds where the kernel does. The float32 sub-graphs perform
the kernel's operations in the kernel's order, so they agree with it to the last
bit (ConvTranspose, whose Conv sums in another order, agrees to a few ulps).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ....graph.node import NodeValue
from ....graph.nodes import elementwise as ew, nn, quant, reduce as rd, tensor
from ....graph.types import ElemKind
from ..registry import Lowerer, lowers
from .common import cast_to, compute_elem, constant_array


# -- shared pieces ------------------------------------------------------------------------------
def _per_channel(b: Lowerer, value: NodeValue, rank: int, elem: ElemKind) -> NodeValue:
    """A (C,) operand as `elem`, shaped C x 1.. to broadcast over an N x C x D.. tensor of `rank`."""
    shape = (value.type.shape[0],) + (1,) * (rank - 2)
    return b.add(tensor.Reshape, cast_to(b, value, elem), shape=shape)


def _mean(b: Lowerer, x: NodeValue, axes: Sequence[int]) -> NodeValue:
    """The mean over `axes`, keeping them as 1s: a sum divided by the count, as numpy's mean does."""
    count = int(np.prod([x.type.shape[a] for a in axes]))
    total = b.add(rd.ReduceSum, x, axes=tuple(axes), keepdims=True)
    return b.add(ew.Div, total, b.scalar(count, x.type.elem))


def _normalise(b: Lowerer, x: NodeValue, axes: Sequence[int],
               epsilon: float) -> tuple[NodeValue, NodeValue, NodeValue]:
    """(x - mean) * inv_std over `axes`, with the mean and inv_std = 1 / sqrt(biased var + epsilon)."""
    elem = x.type.elem
    mean = _mean(b, x, axes)
    centred = b.add(ew.Sub, x, mean)
    var = _mean(b, b.add(ew.Mul, centred, centred), axes)
    std = b.add(ew.Sqrt, b.add(ew.Add, var, b.scalar(epsilon, elem)))
    inv_std = b.add(ew.Div, b.scalar(1.0, elem), std)
    return b.add(ew.Mul, centred, inv_std), mean, inv_std


def _scale_shift(b: Lowerer, y: NodeValue, scale: NodeValue, bias: NodeValue) -> NodeValue:
    """y * scale[c] + bias[c] over an N x C x D.. tensor."""
    rank, elem = y.type.rank, y.type.elem
    scaled = b.add(ew.Mul, y, _per_channel(b, scale, rank, elem))
    return b.add(ew.Add, scaled, _per_channel(b, bias, rank, elem))


# -- transposed convolution ---------------------------------------------------------------------
def _insert_zeros(b: Lowerer, x: NodeValue, axis: int, stride: int) -> NodeValue:
    """x with stride - 1 zeros after each element along `axis` (the dim becomes D * stride)."""
    if stride == 1:
        return x
    shape = x.type.shape
    column = b.add(tensor.Reshape, x, shape=shape[:axis + 1] + (1,) + shape[axis + 1:])
    zeros = b.splat(0.0, shape[:axis + 1] + (stride - 1,) + shape[axis + 1:], x.type.elem)
    spread = b.add(tensor.Concat, column, zeros, axis=axis + 1)
    return b.add(tensor.Reshape, spread, shape=shape[:axis] + (shape[axis] * stride,) + shape[axis + 1:])


def _conv_filters(b: Lowerer, node: nn.ConvTranspose) -> NodeValue:
    """C x M/g x K.. filters as Conv's M x C/g x K..: in and out channels swapped per group, taps flipped."""
    filt, group = node.filter, node.group
    c, mg, kernel = filt.type.shape[0], filt.type.shape[1], filt.type.shape[2:]
    k = len(kernel)
    grouped = (group, c // group, mg) + kernel
    swap = (0, 2, 1) + tuple(range(3, 3 + k))
    conv_shape = (group * mg, c // group) + kernel
    known = constant_array(filt)
    if known is not None:
        regrouped = known.reshape(grouped).transpose(swap).reshape(conv_shape)
        return b.constant(regrouped[(Ellipsis,) + (slice(None, None, -1),) * k], "filter")
    swapped = b.add(tensor.Transpose, b.add(tensor.Reshape, filt, shape=grouped), perm=swap)
    regrouped = b.add(tensor.Reshape, swapped, shape=conv_shape)
    return b.add(tensor.Slice, regrouped, starts=(0, 0) + tuple(d - 1 for d in kernel),
                 ends=conv_shape[:2] + (-1,) * k, steps=(1, 1) + (-1,) * k)


@lowers(nn.ConvTranspose)
def _conv_transpose(b: Lowerer, node: nn.ConvTranspose) -> NodeValue:
    # ConvTranspose(x, w) -> Conv(zero-inserted x, cropped or padded, flipped w^T), stride 1
    """Output o takes x[d] * w[t] wherever d*stride + t*dilation - begin = o, which is a stride-1
    Conv of the zero-inserted input z (z[d*stride] = x[d]) with the flipped filters, padded in
    front by reach - begin (reach = (K-1)*dilation). A negative pad crops z instead; z keeps
    the stride - 1 zeros after its last element, which the end pad accounts for. The Conv spends
    stride^k times the multiply-adds of a direct scatter on the inserted zeros; it sums in
    another order than the reference kernel (float32 results agree to a few ulps).
    """
    k = len(node.kernel)
    x = node.input
    for i in range(k):
        x = _insert_zeros(b, x, 2 + i, node.strides[i])
    shape, out = x.type.shape, node.type.shape[2:]
    starts, ends, front_pads, back_pads = [0, 0], list(shape[:2]), [], []
    for i in range(k):
        reach = (node.kernel[i] - 1) * node.dilations[i]
        length = shape[2 + i]
        front = reach - node.pads[i]
        back = out[i] - length - front + reach
        starts.append(max(0, -front))
        ends.append(min(length, length + back))
        front_pads.append(max(0, front))
        back_pads.append(max(0, back))
    if any(end <= start for start, end in zip(starts, ends)):
        # every output position lies beyond the scattered input: only the bias remains
        zeros = b.splat(0.0, node.type.shape, node.type.elem)
        if node.bias is None:
            return zeros
        return b.add(ew.Add, zeros, _per_channel(b, node.bias, node.type.rank, node.type.elem))
    if starts != [0] * len(shape) or ends != list(shape):
        x = b.add(tensor.Slice, x, starts=tuple(starts), ends=tuple(ends), steps=(1,) * len(shape))
    return b.add(nn.Conv, x, _conv_filters(b, node), node.bias, kernel=node.kernel, strides=(1,) * k,
                 pads=tuple(front_pads + back_pads), dilations=node.dilations, group=node.group)


# -- global pooling -----------------------------------------------------------------------------
@lowers(nn.GlobalAveragePool)
def _global_average_pool(b: Lowerer, node: nn.GlobalAveragePool) -> NodeValue:
    # GlobalAveragePool(x) -> ReduceSum(x over D..) / size
    x = cast_to(b, node.input, compute_elem(node.input))
    return cast_to(b, _mean(b, x, range(2, x.type.rank)), node.type.elem)


@lowers(nn.GlobalMaxPool)
def _global_max_pool(b: Lowerer, node: nn.GlobalMaxPool) -> NodeValue:
    # GlobalMaxPool(x) -> ReduceMax(x over D..)
    return b.add(rd.ReduceMax, node.input, axes=tuple(range(2, node.input.type.rank)), keepdims=True)


# -- normalisation ------------------------------------------------------------------------------
def _folded_batch_norm(b: Lowerer, node: nn.BatchNorm,
                       elem: ElemKind) -> tuple[NodeValue, NodeValue] | None:
    """The per-channel multiplier and offset computed at compile time, if all four operands are Constants."""
    known = [constant_array(v) for v in (node.scale, node.bias, node.mean, node.var)]
    if any(a is None for a in known):
        return None
    scale, bias, mean, var = (a.astype(elem.dtype) for a in known)
    multiplier = scale / np.sqrt(var + elem.dtype.type(node.epsilon))
    offset = bias - mean * multiplier
    shape = (-1,) + (1,) * (node.input.type.rank - 2)
    return b.constant(multiplier.reshape(shape), "multiplier"), b.constant(offset.reshape(shape), "offset")


@lowers(nn.BatchNorm)
def _batch_norm(b: Lowerer, node: nn.BatchNorm) -> NodeValue:
    # BatchNorm(x, scale, bias, mean, var) -> x * a[c] + o[c]; a = scale / sqrt(var + eps), o = bias - mean*a
    elem = compute_elem(*node.inputs)
    folded = _folded_batch_norm(b, node, elem)
    if folded is None:
        rank = node.input.type.rank
        scale, bias, mean, var = (_per_channel(b, v, rank, elem)
                                  for v in (node.scale, node.bias, node.mean, node.var))
        std = b.add(ew.Sqrt, b.add(ew.Add, var, b.scalar(node.epsilon, elem)))
        multiplier = b.add(ew.Div, scale, std)
        folded = multiplier, b.add(ew.Sub, bias, b.add(ew.Mul, mean, multiplier))
    multiplier, offset = folded
    x = cast_to(b, node.input, elem)
    y = b.add(ew.Add, b.add(ew.Mul, x, multiplier), offset)
    return cast_to(b, y, node.type.elem)


@lowers(nn.InstanceNorm)
def _instance_norm(b: Lowerer, node: nn.InstanceNorm) -> NodeValue:
    # InstanceNorm(x) -> normalise over D.. (ReduceSum/Sub/Mul/Sqrt/Div), then * scale[c] + bias[c]
    x = cast_to(b, node.input, compute_elem(node.input, node.scale))
    y, _, _ = _normalise(b, x, range(2, x.type.rank), node.epsilon)
    return cast_to(b, _scale_shift(b, y, node.scale, node.bias), node.type.elem)


@lowers(nn.GroupNorm)
def _group_norm(b: Lowerer, node: nn.GroupNorm) -> NodeValue:
    # GroupNorm(x) -> Reshape(N x groups x rest), normalise over rest, Reshape back, * scale[c] + bias[c]
    x = cast_to(b, node.input, compute_elem(node.input, node.scale))
    shape = x.type.shape
    per_group = int(np.prod(shape)) // (shape[0] * node.groups)
    grouped = b.add(tensor.Reshape, x, shape=(shape[0], node.groups, per_group))
    y, _, _ = _normalise(b, grouped, (2,), node.epsilon)
    y = b.add(tensor.Reshape, y, shape=shape)
    return cast_to(b, _scale_shift(b, y, node.scale, node.bias), node.type.elem)


@lowers(nn.LayerNorm)
def _layer_norm(b: Lowerer, node: nn.LayerNorm) -> tuple[NodeValue, NodeValue, NodeValue]:
    # LayerNorm(x) -> normalise over [axis, rank) then * scale + bias; mean and inv_std as stats_elem
    elem = compute_elem(node.input, node.scale)
    x = cast_to(b, node.input, elem)
    y, mean, inv_std = _normalise(b, x, range(node.axis, x.type.rank), node.epsilon)
    y = b.add(ew.Mul, y, cast_to(b, node.scale, elem))
    if node.bias is not None:
        y = b.add(ew.Add, y, cast_to(b, node.bias, elem))
    return (cast_to(b, y, node.types[0].elem), cast_to(b, mean, node.stats_elem),
            cast_to(b, inv_std, node.stats_elem))


@lowers(nn.RMSNorm)
def _rms_norm(b: Lowerer, node: nn.RMSNorm) -> NodeValue:
    # RMSNorm(x, scale) -> x / Sqrt(ReduceSum(x * x) / n + eps) * scale
    elem = compute_elem(node.input, node.scale)
    x = cast_to(b, node.input, elem)
    mean_square = _mean(b, b.add(ew.Mul, x, x), range(node.axis, x.type.rank))
    rms = b.add(ew.Sqrt, b.add(ew.Add, mean_square, b.scalar(node.epsilon, elem)))
    y = b.add(ew.Mul, b.add(ew.Div, x, rms), cast_to(b, node.scale, elem))
    return cast_to(b, y, node.type.elem)


@lowers(nn.LRN)
def _lrn(b: Lowerer, node: nn.LRN) -> NodeValue:
    # LRN(x) -> x / (bias + alpha * AveragePool_channels(x^2))^beta
    """The channel window of each c is [c - before, c + after] with zeros beyond the channels:
    an AveragePool over a (channels x positions) view of the squares, with that window and
    count_include_pad, is the window sum divided by `size`, so alpha/size * sum becomes
    alpha * mean. Nothing the size of the padded squares is built (the sum order differs
    from the reference's by rounding only: within a few ulps).
    """
    elem = compute_elem(node.input)
    x = cast_to(b, node.input, elem)
    shape = x.type.shape
    positions = int(np.prod(shape[2:], dtype=np.int64))
    before = (node.size - 1) // 2
    after = node.size - 1 - before
    squares = b.add(tensor.Reshape, b.add(ew.Mul, x, x), shape=(shape[0], 1, shape[1], positions))
    mean = b.add(nn.AveragePool, squares, kernel=(node.size, 1), strides=(1, 1), pads=(before, 0, after, 0),
                 dilations=(1, 1), count_include_pad=True)
    window_mean = b.add(tensor.Reshape, mean, shape=shape)
    base = b.add(ew.Add, b.scalar(node.bias, elem), b.add(ew.Mul, b.scalar(node.alpha, elem), window_mean))
    y = b.add(ew.Div, x, b.add(ew.Pow, base, b.scalar(node.beta, elem)))
    return cast_to(b, y, node.type.elem)


# -- softmax ------------------------------------------------------------------------------------
def _shifted_exp_sum(b: Lowerer, x: NodeValue,
                     axes: tuple[int, ...]) -> tuple[NodeValue, NodeValue, NodeValue]:
    """x - max(x), its exp, and the sum of the exp over `axes`: the max shift keeps exp finite."""
    shifted = b.add(ew.Sub, x, b.add(rd.ReduceMax, x, axes=axes, keepdims=True))
    exp = b.add(ew.Exp, shifted)
    return shifted, exp, b.add(rd.ReduceSum, exp, axes=axes, keepdims=True)


def _divide_rounded(b: Lowerer, a: NodeValue, d: NodeValue) -> NodeValue:
    """a / d rounded half to even, for int64 a >= 0 and d > 0 (glowsdk.numerics.rounded_average)."""
    i64 = ElemKind.INT64
    floor = b.add(ew.Div, a, d)
    twice = b.add(ew.Mul, b.add(ew.Sub, a, b.add(ew.Mul, floor, d)), b.scalar(2, i64))
    odd = b.add(ew.Equal, b.add(ew.Mod, floor, b.scalar(2, i64)), b.scalar(1, i64))
    up = b.add(ew.Or, b.add(ew.Less, d, twice), b.add(ew.And, b.add(ew.Equal, twice, d), odd))
    return b.add(ew.Add, floor, b.add(ew.Cast, up, to=i64))


def _int8_softmax(b: Lowerer, node: nn.Softmax) -> NodeValue:
    # Softmax(int8q x) -> T[min(max(x) - x, 255)] * 2^8 / sum, rounded half to even, - 128, saturated
    """The integer semantics of an int8 Softmax (nn.Softmax's doc, the reference kernel and the NPU's
    layer) on integer primitives, so a host computes the same integers as the device."""
    i64 = ElemKind.INT64
    x = node.input.type
    axes = tuple(sorted(node.axes))
    length = int(np.prod([x.shape[a] for a in axes]))
    table = b.constant(quant.softmax_table(x.scale, length), "softmax_table")
    raw = b.add(ew.Cast, b.add(quant.Reinterpret, node.input, result_type=x.with_elem(ElemKind.INT8)), to=i64)
    below = b.add(ew.Sub, b.add(rd.ReduceMax, raw, axes=axes, keepdims=True), raw)
    steps = b.add(ew.Min, below, b.scalar(quant.SOFTMAX_TABLE_SIZE - 1, i64))
    e = b.add(tensor.Gather, table, steps, axis=0)
    if node.masked:  # the code -128 is -inf: e times min(raw + 128, 1), the sum at least 1
        e = b.add(ew.Mul, e, b.add(ew.Min, b.add(ew.Add, raw, b.scalar(128, i64)), b.scalar(1, i64)))
    total = b.add(rd.ReduceSum, e, axes=axes, keepdims=True)
    if node.masked:
        total = b.add(ew.Max, total, b.scalar(1, i64))
    if node.wide:  # round(2^16 e / S), int32q of scale 2^-16
        wide = _divide_rounded(b, b.add(ew.Mul, e, b.scalar(1 << nn.SOFTMAX_WIDE_BITS, i64)), total)
        return b.add(quant.Reinterpret, b.add(ew.Cast, wide, to=ElemKind.INT32), result_type=node.type)
    q = _divide_rounded(b, b.add(ew.Mul, e, b.scalar(1 << quant.SOFTMAX_SHIFT, i64)), total)
    shifted = b.add(ew.Add, q, b.scalar(nn.SOFTMAX_ZERO, i64))
    code = b.add(ew.Min, b.add(ew.Max, shifted, b.scalar(-128, i64)), b.scalar(127, i64))
    return b.add(quant.Reinterpret, b.add(ew.Cast, code, to=ElemKind.INT8), result_type=node.type)


@lowers(nn.Softmax)
def _softmax(b: Lowerer, node: nn.Softmax) -> NodeValue:
    # Softmax(x) -> Exp(x - ReduceMax(x)) / ReduceSum(Exp(x - ReduceMax(x)))
    if node.input.type.elem is ElemKind.QINT8:
        return _int8_softmax(b, node)
    x = cast_to(b, node.input, compute_elem(node.input))
    _, exp, total = _shifted_exp_sum(b, x, tuple(sorted(node.axes)))
    return cast_to(b, b.add(ew.Div, exp, total), node.type.elem)


@lowers(nn.LogSoftmax)
def _log_softmax(b: Lowerer, node: nn.LogSoftmax) -> NodeValue:
    # LogSoftmax(x) -> (x - ReduceMax(x)) - Log(ReduceSum(Exp(x - ReduceMax(x))))
    x = cast_to(b, node.input, compute_elem(node.input))
    shifted, _, total = _shifted_exp_sum(b, x, tuple(sorted(node.axes)))
    return cast_to(b, b.add(ew.Sub, shifted, b.add(ew.Log, total)), node.type.elem)
