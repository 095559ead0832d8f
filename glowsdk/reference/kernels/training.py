"""Reference kernels of the training node kinds, written from their definitions.

They compute in float32 (float64 stays float64), as the other float kernels do.
"""
from __future__ import annotations

import numpy as np

from ...errors import InputError
from ...graph.nodes import training as tr
from ..registry import kernel
from .nn import compute_dtype
from .windows import pad_spatial, taps


@kernel(tr.SoftmaxCrossEntropy)
def _softmax_cross_entropy(node, logits, labels):
    classes = logits.shape[1]
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        raise InputError(f"node '{node.name}': labels must lie in [0, {classes}), "
                         f"got {labels.min()}..{labels.max()}")
    x = logits.astype(compute_dtype(logits), copy=False)
    shifted = x - x.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(len(labels)), labels].mean()


@kernel(tr.Regression)
def _regression(node, x, expected):
    return x


@kernel(tr.MaxPoolGrad)
def _max_pool_grad(node, x, pooled, pooled_grad):
    """Scatter each window's gradient onto its first maximal tap of the padded input, then crop."""
    acc = compute_dtype(x)
    k = x.ndim - 2
    out = pooled.shape[2:]
    begin = list(node.pads[:k])
    end = [max(node.pads[k + i], (out[i] - 1) * node.strides[i] + (node.kernel[i] - 1) * node.dilations[i] + 1
               - x.shape[2 + i] - begin[i]) for i in range(k)]
    padded = pad_spatial(x.astype(acc), begin + end, -np.inf)
    grad = np.zeros(padded.shape, acc)
    best = pooled.astype(acc)
    taken = np.zeros(pooled.shape, bool)
    for _, where in taps(out, node.kernel, node.strides, node.dilations):
        index = (slice(None), slice(None)) + where
        wins = (padded[index] == best) & ~taken
        taken |= wins
        grad[index] += np.where(wins, pooled_grad.astype(acc), 0)
    crop = (slice(None), slice(None)) + tuple(slice(begin[i], begin[i] + x.shape[2 + i]) for i in range(k))
    return grad[crop]


@kernel(tr.SGD)
def _sgd(node, weight, grad, velocity):
    acc = compute_dtype(weight)
    w, g = weight.astype(acc), grad.astype(acc)
    if node.weight_decay:
        g = g + acc.type(node.weight_decay) * w
    if velocity is not None and node.momentum:
        g = acc.type(node.momentum) * velocity.astype(acc) + g
    return w - acc.type(node.learning_rate) * g, g
