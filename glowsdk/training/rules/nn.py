"""Gradients of convolution, pooling, normalisation, softmax and the losses.

Conv's input gradient is the ConvTranspose with the same filter and window (its
exact adjoint); its filter gradient is a Conv of the input by the result gradient
with stride and dilation swapped, one per group. Pooling scatters back through a
ConvTranspose too, except MaxPool's first-maximum routing, which is MaxPoolGrad.
"""
from __future__ import annotations

import numpy as np

from ...graph.node import Node, NodeValue
from ...graph.nodes import elementwise as ew, nn, reduce as rd, tensor, training as tr
from ..registry import GradBuilder, Grads, gradient


def _channels(b: GradBuilder, value: NodeValue, start: int, stop: int) -> NodeValue:
    """Channels [start, stop) of an N x C x D.. value, as C' x N x D.. (batch and channels swapped)."""
    shape = value.type.shape
    if (start, stop) != (0, shape[1]):
        value = b.add(tensor.Slice, value, starts=(0, start) + (0,) * (len(shape) - 2),
                      ends=(shape[0], stop) + shape[2:], steps=(1,) * len(shape))
    return b.add(tensor.Transpose, value, perm=(1, 0) + tuple(range(2, len(shape))))


def _conv_filter_grad(node: Node, g: NodeValue, b: GradBuilder) -> NodeValue:
    # dW[m, c, t] = sum_n,o g[n, m, o] x[n, c, o*stride + t*dilation - begin]: a Conv over n
    x, filt = node.input, node.filter
    c, m, kernel = x.type.shape[1] // node.group, filt.type.shape[0] // node.group, filt.type.shape[2:]
    k = len(kernel)
    per_group = []
    for i in range(node.group):
        image = _channels(b, x, i * c, (i + 1) * c)
        taps = _channels(b, g, i * m, (i + 1) * m)
        full = b.add(nn.Conv, image, taps, None, kernel=g.type.shape[2:], strides=node.dilations,
                     pads=node.pads, dilations=node.strides, group=1)
        if full.type.shape[2:] != kernel:
            full = b.add(tensor.Slice, full, starts=(0,) * (k + 2), ends=(c, m) + kernel, steps=(1,) * (k + 2))
        per_group.append(b.add(tensor.Transpose, full, perm=(1, 0) + tuple(range(2, k + 2))))
    return per_group[0] if node.group == 1 else b.add(tensor.Concat, *per_group, axis=0)


@gradient(nn.Conv)
def _conv(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d conv(x, w, bias) = (ConvTranspose(g, w), Conv(x^T, g^T)^T, ReduceSum(g))
    g = grads[0]
    out: list = [None, None, None]
    spatial = node.input.type.shape[2:]
    if b.wants(0):
        pads, extra = tr.adjoint_pads(spatial, g.type.shape[2:], node.kernel, node.strides, node.pads,
                                      node.dilations)
        out[0] = b.add(nn.ConvTranspose, g, node.filter, None, kernel=node.kernel, strides=node.strides,
                       pads=pads, dilations=node.dilations, group=node.group, output_padding=extra)
    if b.wants(1):
        out[1] = _conv_filter_grad(node, g, b)
    if node.bias is not None and b.wants(2):
        out[2] = b.add(rd.ReduceSum, g, axes=(0,) + tuple(range(2, g.type.rank)), keepdims=False)
    return out


@gradient(nn.MaxPool, nn.MaxPoolWithIndices)
def _max_pool(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d maxpool(x) = MaxPoolGrad(x, y, g): each window's g to its first maximum
    return [b.add(tr.MaxPoolGrad, node.input, node.result(0), grads[0], kernel=node.kernel,
                  strides=node.strides, pads=node.pads, dilations=node.dilations, ceil_mode=node.ceil_mode)]


@gradient(nn.GlobalMaxPool)
def _global_max_pool(node: Node, grads: list, b: GradBuilder) -> Grads:
    spatial = node.input.type.shape[2:]
    k = len(spatial)
    return [b.add(tr.MaxPoolGrad, node.input, node.result(), grads[0], kernel=spatial, strides=(1,) * k,
                  pads=(0,) * (2 * k), dilations=(1,) * k)]


def _tap_counts(node: Node) -> np.ndarray:
    """How many taps each average divides by: those inside the input, plus the explicit pads if counted."""
    spatial, out = node.input.type.shape[2:], node.type.shape[2:]
    k = len(spatial)
    counts = np.ones((1, 1) + (1,) * k)
    for i in range(k):
        begin, end = node.pads[i], node.pads[k + i]
        low, high = (0, begin + spatial[i] + end) if node.count_include_pad else (begin, begin + spatial[i])
        pos = np.arange(out[i])[:, None] * node.strides[i] + np.arange(node.kernel[i])[None, :] * node.dilations[i]
        counts = counts * ((pos >= low) & (pos < high)).sum(axis=1).reshape((-1,) + (1,) * (k - 1 - i))
    return counts


@gradient(nn.AveragePool)
def _average_pool(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d avgpool(x) = ConvTranspose(g / counts, ones, group=C): every tap gets its window's share
    g, elem = grads[0], grads[0].type.elem
    channels, kernel = node.input.type.shape[1], tuple(node.kernel)
    share = b.add(ew.Div, g, b.constant(_tap_counts(node).astype(elem.dtype), "counts"))
    ones = b.constant(np.ones((channels, 1) + kernel, elem.dtype), "ones")
    pads, extra = tr.adjoint_pads(node.input.type.shape[2:], g.type.shape[2:], kernel, node.strides, node.pads,
                                  node.dilations)
    return [b.add(nn.ConvTranspose, share, ones, None, kernel=kernel, strides=node.strides, pads=pads,
                  dilations=node.dilations, group=channels, output_padding=extra)]


@gradient(nn.GlobalAveragePool)
def _global_average_pool(node: Node, grads: list, b: GradBuilder) -> Grads:
    shape = node.input.type.shape
    spread = b.expand(grads[0], shape)
    return [b.add(ew.Div, spread, b.scalar(int(np.prod(shape[2:])), spread.type.elem))]


@gradient(nn.Softmax)
def _softmax(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d softmax(x) = y * (g - sum(g * y))
    y = node.result()
    dot = b.add(rd.ReduceSum, b.mul(grads[0], y), axes=tuple(sorted(node.axes)), keepdims=True)
    return [b.mul(y, b.add(ew.Sub, grads[0], dot))]


@gradient(nn.LogSoftmax)
def _log_softmax(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d logsoftmax(x) = g - exp(y) * sum(g)
    total = b.add(rd.ReduceSum, grads[0], axes=tuple(sorted(node.axes)), keepdims=True)
    return [b.add(ew.Sub, grads[0], b.mul(b.add(ew.Exp, node.result()), total))]


@gradient(nn.BatchNorm)
def _batch_norm(node: Node, grads: list, b: GradBuilder) -> Grads:
    # frozen statistics: dx = g * scale / std, dscale = sum(g * (x - mean) / std), dbias = sum(g)
    g, elem, rank = grads[0], grads[0].type.elem, grads[0].type.rank
    per_channel = (node.input.type.shape[1],) + (1,) * (rank - 2)
    std = b.add(ew.Sqrt, b.add(ew.Add, b.reshape(node.var, per_channel), b.scalar(node.epsilon, elem)))
    axes = (0,) + tuple(range(2, rank))
    out: list = [None] * 5
    if b.wants(0):
        out[0] = b.mul(g, b.add(ew.Div, b.reshape(node.scale, per_channel), std))
    if b.wants(1):
        normalised = b.add(ew.Div, b.add(ew.Sub, node.input, b.reshape(node.mean, per_channel)), std)
        out[1] = b.add(rd.ReduceSum, b.mul(g, normalised), axes=axes, keepdims=False)
    if b.wants(2):
        out[2] = b.add(rd.ReduceSum, g, axes=axes, keepdims=False)
    return out


@gradient(tr.SoftmaxCrossEntropy)
def _softmax_cross_entropy(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d mean CE(x, labels) = (softmax(x) - onehot(labels)) * g / N
    logits, labels = node.logits, node.labels
    n, classes = logits.type.shape
    elem = logits.type.elem
    column = b.reshape(labels, (n, 1))
    indices = b.constant(np.arange(classes, dtype=labels.type.dtype).reshape(1, classes), "classes")
    one_hot = b.add(ew.Cast, b.add(ew.Equal, column, indices), to=elem)
    error = b.add(ew.Sub, b.add(nn.Softmax, logits, axes=(1,)), one_hot)
    return [b.mul(error, b.add(ew.Div, grads[0], b.scalar(n, elem))), None]


@gradient(tr.Regression)
def _regression(node: Node, grads: list, b: GradBuilder) -> Grads:
    # the end of 1/2 sum (x - expected)^2: dx = x - expected, whatever flows in (paper 3.4)
    return [b.add(ew.Sub, node.input, node.expected), None]
