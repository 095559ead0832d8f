"""Lowering rules of the training node kinds: losses, the MaxPool gradient and SGD become
arithmetic, comparisons and data movement, so a backend needs no gradient kernel (paper 3.2)."""
from __future__ import annotations

import itertools

import numpy as np

from ....graph.node import NodeValue
from ....graph.nodes import elementwise as ew, nn, reduce as rd, tensor, training as tr
from ..registry import Lowerer, lowers
from .common import cast_to, compute_elem


@lowers(tr.Regression)
def _regression(b: Lowerer, node: tr.Regression) -> NodeValue:
    # Regression(x, expected) -> x  (its gradient was built before lowering)
    return node.input


@lowers(tr.SoftmaxCrossEntropy)
def _softmax_cross_entropy(b: Lowerer, node: tr.SoftmaxCrossEntropy) -> NodeValue:
    # SoftmaxCrossEntropy(x, labels) -> -ReduceSum(LogSoftmax(x) * OneHot(labels)) / N
    elem = compute_elem(node.logits)
    x = cast_to(b, node.logits, elem)
    n, classes = x.type.shape
    shifted = b.add(ew.Sub, x, b.add(rd.ReduceMax, x, axes=(1,), keepdims=True))
    total = b.add(rd.ReduceSum, b.add(ew.Exp, shifted), axes=(1,), keepdims=True)
    log_probs = b.add(ew.Sub, shifted, b.add(ew.Log, total))
    picked = b.add(ew.Mul, log_probs, one_hot(b, node.labels, classes, elem))
    summed = b.add(rd.ReduceSum, picked, axes=(0, 1), keepdims=False)
    return cast_to(b, b.add(ew.Div, summed, b.scalar(-n, elem)), node.type.elem)


def one_hot(b: Lowerer, labels: NodeValue, classes: int, elem) -> NodeValue:
    """N labels as an N x classes matrix of `elem`: 1 where the column is the label."""
    column = b.add(tensor.Reshape, labels, shape=(labels.type.shape[0], 1))
    indices = b.constant(np.arange(classes, dtype=labels.type.dtype).reshape(1, classes), "classes")
    return b.add(ew.Cast, b.add(ew.Equal, column, indices), to=elem)


@lowers(tr.MaxPoolGrad)
def _max_pool_grad(b: Lowerer, node: tr.MaxPoolGrad) -> NodeValue:
    # MaxPoolGrad(x, y, dy) -> per tap: Where(first x_tap == y, dy, 0); stacked, ConvTranspose one-hot taps
    """Each tap's strided slice of the -inf padded input is compared with the pooled maximum;
    the first tap that matches takes the window's gradient. The T taps' gradients, stacked as
    C x T channels, scatter back through a grouped ConvTranspose whose filter for tap t is 1
    at t and 0 elsewhere, which sums overlapping windows as the reference does.
    """
    elem = compute_elem(node.input)
    x, y, dy = (cast_to(b, v, elem) for v in (node.input, node.pooled, node.pooled_grad))
    k = len(node.kernel)
    shape, out = x.type.shape, y.type.shape[2:]
    n, c = shape[:2]
    begin = list(node.pads[:k])
    end = [max(node.pads[k + i], (out[i] - 1) * node.strides[i] + (node.kernel[i] - 1) * node.dilations[i] + 1
               - shape[2 + i] - begin[i]) for i in range(k)]
    padded = x
    if any(begin) or any(end):
        padded = b.add(tensor.Pad, x, pads=(0, 0, *begin, 0, 0, *end), value=float("-inf"))
    zero = b.scalar(0.0, elem)
    taken, pieces = None, []
    offsets = list(itertools.product(*(range(kk) for kk in node.kernel)))
    for tap in offsets:
        starts = tuple(tap[i] * node.dilations[i] for i in range(k))
        ends = tuple(starts[i] + (out[i] - 1) * node.strides[i] + 1 for i in range(k))
        values = b.add(tensor.Slice, padded, starts=(0, 0) + starts, ends=(n, c) + ends,
                       steps=(1, 1) + tuple(node.strides))
        hits = b.add(ew.Equal, values, y)
        wins = hits if taken is None else b.add(ew.And, hits, b.add(ew.Not, taken))
        taken = hits if taken is None else b.add(ew.Or, taken, hits)
        routed = b.add(ew.Where, wins, dy, zero)
        pieces.append(b.add(tensor.Reshape, routed, shape=(n, c, 1) + tuple(out)))
    stacked = pieces[0] if len(pieces) == 1 else b.add(tensor.Concat, *pieces, axis=2)
    channels = b.add(tensor.Reshape, stacked, shape=(n, c * len(offsets)) + tuple(out))
    filters = np.zeros((c, len(offsets), 1) + tuple(node.kernel), elem.dtype)
    for t, tap in enumerate(offsets):
        filters[(slice(None), t, 0) + tap] = 1
    filt = b.constant(filters.reshape((c * len(offsets), 1) + tuple(node.kernel)), "taps")
    pads, extra = tr.adjoint_pads(shape[2:], out, node.kernel, node.strides, node.pads, node.dilations)
    grad = b.add(nn.ConvTranspose, channels, filt, None, kernel=node.kernel, strides=node.strides, pads=pads,
                 dilations=node.dilations, group=c, output_padding=extra)
    return cast_to(b, grad, node.type.elem)


@lowers(tr.SGD)
def _sgd(b: Lowerer, node: tr.SGD) -> tuple[NodeValue, NodeValue]:
    # SGD(w, g, v) -> v' = momentum * v + (g + decay * w); w' = w - lr * v'
    elem = compute_elem(node.weight)
    w, g = cast_to(b, node.weight, elem), cast_to(b, node.grad, elem)
    if node.weight_decay:
        g = b.add(ew.Add, g, b.add(ew.Mul, w, b.scalar(node.weight_decay, elem)))
    if node.velocity is not None and node.momentum:
        g = b.add(ew.Add, b.add(ew.Mul, cast_to(b, node.velocity, elem), b.scalar(node.momentum, elem)), g)
    updated = b.add(ew.Sub, w, b.add(ew.Mul, g, b.scalar(node.learning_rate, elem)))
    return cast_to(b, updated, node.types[0].elem), cast_to(b, g, node.types[1].elem)
