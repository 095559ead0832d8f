"""Fold inference BatchNorm into the Conv, Gemm or MatMul(+Add) that feeds it (Glow's
optimizeBatchNorm), after absorbing the per-channel Mul/Add that follow it.

First sweep (CHAIN): Mul(BatchNorm(x), k) and Add(BatchNorm(x), k) with a
per-channel Constant k become one BatchNorm with scale*k, bias*k or bias+k (the
light densenet and inception_v2 scale every BatchNorm this way; in Glow, a
BatchNorm-first variant of FoldArithmeticChainUnderConvIntoBN).

Second sweep (RULES): BatchNorm is y = x * a[c] + b[c] with
a = scale / sqrt(var + epsilon) and b = bias - mean * a. When x comes from a Conv (channel = output filter), a Gemm
or a 2-D MatMul (channel = output column) with Constant weights, the scaling
moves into the weights and b into the bias, so the BatchNorm disappears. The
producer must have no reader but the BatchNorm (or it would see the scaled
weights too), and every BatchNorm operand must be a Constant.

Precision: a, b and the new weights are computed in float64 and rounded once to
the weights' element kind, so the folded network differs from the unfolded one
by that rounding and by the reordering of one multiply-add (a few ulps in
float32; one rounding of a weight, about 2**-11 relative, in float16).
"""
from __future__ import annotations

import numpy as np

from ...graph.function import Function
from ...graph.node import Node, NodeValue
from ...graph.nodes import elementwise as ew, linalg, nn
from .manager import Pass, register_pass
from .rewrite import RuleSet, constant_array, emit, emit_constant, only_reader, producer

CHAIN = RuleSet()
RULES = RuleSet()


def _per_channel(bn: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """(a, b) of y = x * a + b in float64, or None unless the statistics are Constants."""
    arrays = [constant_array(v) for v in (bn.scale, bn.bias, bn.mean, bn.var)]
    if any(array is None for array in arrays):
        return None
    scale, bias, mean, var = (array.astype(np.float64) for array in arrays)
    a = scale / np.sqrt(var + bn.epsilon)
    return a, bias - mean * a


def _weights(node: Node, array: np.ndarray, like: np.ndarray, hint: str) -> NodeValue:
    """A Constant of `array` rounded once to the element kind of `like`."""
    return emit_constant(node, array.astype(like.dtype), hint)


def _channel_vector(value: NodeValue, bn: Node) -> np.ndarray | None:
    """A Constant `value` as a (C,) float64 vector, if it broadcasts along BatchNorm's channel dim only."""
    array = constant_array(value)
    rank = bn.type.rank
    if array is None or array.ndim > rank or value.type.elem.is_quantized:
        return None
    shape = (1,) * (rank - array.ndim) + array.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1):
        return None
    return np.broadcast_to(array.reshape(-1).astype(np.float64), (bn.type.shape[1],))


def _chained(node: Node) -> tuple[Node, np.ndarray, np.ndarray, np.ndarray] | None:
    """(BatchNorm, scale, bias, k) for node = op(BatchNorm(x), k) or op(k, BatchNorm(x)), the
    BatchNorm read only here, with Constant scale and bias (as float64)."""
    for this, other in ((node.lhs, node.rhs), (node.rhs, node.lhs)):
        bn = producer(this, nn.BatchNorm)
        if bn is None or not only_reader(this, node) or node.type != bn.type:
            continue
        scale, bias, k = constant_array(bn.scale), constant_array(bn.bias), _channel_vector(other, bn)
        if scale is not None and bias is not None and k is not None:
            return bn, scale.astype(np.float64), bias.astype(np.float64), k
    return None


def _renormalised(node: Node, bn: Node, scale: NodeValue, bias: np.ndarray) -> NodeValue:
    """BatchNorm(x) with `scale` and a new bias of the old bias's element kind."""
    new_bias = _weights(node, bias, bn.bias.node.value, "bias")
    return emit(node, nn.BatchNorm, bn.input, scale, new_bias, bn.mean, bn.var, epsilon=bn.epsilon)


@CHAIN.rule(ew.Mul)
def _scaled(node: Node) -> NodeValue | None:
    # BatchNorm(x, scale, bias) * k -> BatchNorm(x, scale * k, bias * k)
    found = _chained(node)
    if found is None:
        return None
    bn, scale, bias, k = found
    return _renormalised(node, bn, _weights(node, scale * k, bn.scale.node.value, "scale"), bias * k)


@CHAIN.rule(ew.Add)
def _shifted(node: Node) -> NodeValue | None:
    # BatchNorm(x, scale, bias) + k -> BatchNorm(x, scale, bias + k)
    found = _chained(node)
    if found is None:
        return None
    bn, _, bias, k = found
    return _renormalised(node, bn, bn.scale, bias + k)


@RULES.rule(nn.BatchNorm)
def _into_conv(bn: Node) -> NodeValue | None:
    # BatchNorm(Conv(x, w, c)) -> Conv(x, w * a, c * a + b)
    conv = producer(bn.input, nn.Conv)
    if conv is None or not only_reader(bn.input, bn):
        return None
    filt, bias = constant_array(conv.filter), constant_array(conv.bias)
    stats = _per_channel(bn)
    if filt is None or (conv.bias is not None and bias is None) or stats is None:
        return None
    a, b = stats
    old_bias = np.zeros_like(a) if bias is None else bias.astype(np.float64)
    filt_scale = a.reshape((-1,) + (1,) * (filt.ndim - 1))
    new_filter = _weights(conv, filt.astype(np.float64) * filt_scale, filt, "filter")
    new_bias = _weights(conv, old_bias * a + b, filt, "bias")
    return emit(conv, nn.Conv, conv.input, new_filter, new_bias, **conv.attrs)


@RULES.rule(nn.BatchNorm)
def _into_gemm(bn: Node) -> NodeValue | None:
    # BatchNorm(Gemm(x, w, c)) -> Gemm(x, w * a, beta * c * a + b) with beta = 1
    gemm = producer(bn.input, linalg.Gemm)
    if gemm is None or not only_reader(bn.input, bn):
        return None
    w, c = constant_array(gemm.b), constant_array(gemm.c)
    stats = _per_channel(bn)
    if w is None or (gemm.c is not None and c is None) or stats is None:
        return None
    a, b = stats
    column_scale = a[:, None] if gemm.trans_b else a[None, :]
    new_w = _weights(gemm, w.astype(np.float64) * column_scale, w, "b")
    new_c = b if c is None else gemm.beta * c.astype(np.float64) * a + b
    return emit(gemm, linalg.Gemm, gemm.a, new_w, _weights(gemm, new_c, w, "c"),
                alpha=gemm.alpha, beta=1.0, trans_a=gemm.trans_a, trans_b=gemm.trans_b)


@RULES.rule(nn.BatchNorm)
def _into_matmul(bn: Node) -> NodeValue | None:
    # BatchNorm(Add(MatMul(x, w), c)) -> Add(MatMul(x, w * a), c * a + b); the Add is optional
    value, c, add = bn.input, None, producer(bn.input, ew.Add)
    if add is not None:
        if not only_reader(value, bn):
            return None
        value, other = (add.lhs, add.rhs) if producer(add.lhs, linalg.MatMul) else (add.rhs, add.lhs)
        c = constant_array(other)
        if c is None:
            return None
    matmul = producer(value, linalg.MatMul)
    if matmul is None or not only_reader(value, add or bn) or bn.type.rank != 2 or matmul.rhs.type.rank != 2:
        return None
    w, stats = constant_array(matmul.rhs), _per_channel(bn)
    if w is None or stats is None:
        return None
    a, b = stats
    new_w = _weights(matmul, w.astype(np.float64) * a[None, :], w, "rhs")
    new_c = b if c is None else c.astype(np.float64) * a + b
    product = emit(matmul, linalg.MatMul, matmul.lhs, new_w)
    return emit(add or matmul, ew.Add, product, _weights(matmul, new_c, w, "bias"))


@register_pass
class FoldBatchNorm(Pass):
    """Per-channel Mul/Add into BatchNorm; BatchNorm after a Conv, Gemm or MatMul(+Add) with
    Constant weights -> scaled weights and bias."""

    name = "fold-batchnorm"

    def run(self, function: Function) -> bool:
        chained = CHAIN.apply(function)
        return RULES.apply(function) or chained
