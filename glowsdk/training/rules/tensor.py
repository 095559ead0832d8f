"""Gradients of data movement, reductions and matrix products, built from the same kinds.

Moving data backwards is the inverse move (Reshape back, the inverse permutation,
a Slice per Concat part, zero Pad around a Slice); a sum spreads its gradient with
Expand; a matrix product's gradients are matrix products with transposed operands.
"""
from __future__ import annotations

import numpy as np

from ...errors import UnsupportedError
from ...graph.node import Node, NodeValue
from ...graph.nodes import elementwise as ew, linalg, reduce as rd, tensor
from ..registry import GradBuilder, Grads, gradient


@gradient(tensor.Reshape)
def _reshape(node: Node, grads: list, b: GradBuilder) -> Grads:
    return [b.reshape(grads[0], node.input.type.shape)]


@gradient(tensor.Transpose)
def _transpose(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d transpose(x, perm) = transpose(g, perm^-1)
    return [b.add(tensor.Transpose, grads[0], perm=tuple(int(i) for i in np.argsort(node.perm)))]


@gradient(tensor.Expand)
def _expand(node: Node, grads: list, b: GradBuilder) -> Grads:
    return [b.unbroadcast(grads[0], node.input)]


@gradient(tensor.Concat)
def _concat(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d concat(x_i) = the slice of g each x_i occupies
    g, axis, start, out = grads[0], node.axis, 0, []
    shape = g.type.shape
    for part in node.parts:
        size = part.type.shape[axis]
        starts = tuple(start if i == axis else 0 for i in range(len(shape)))
        ends = tuple(start + size if i == axis else d for i, d in enumerate(shape))
        out.append(b.add(tensor.Slice, g, starts=starts, ends=ends, steps=(1,) * len(shape)))
        start += size
    return out


@gradient(tensor.Split)
def _split(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d split(x) = concat(g_i), zeros for pieces the loss does not read
    pieces = [g if g is not None else b.splat(0.0, value) for g, value in zip(grads, node.results)]
    return [pieces[0] if len(pieces) == 1 else b.add(tensor.Concat, *pieces, axis=node.axis)]


@gradient(tensor.Slice)
def _slice(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d slice(x) = g placed back by a zero Pad (a reversing step reverses g first)
    g, shape = grads[0], node.input.type.shape
    if any(abs(s) != 1 for s in node.steps):
        raise UnsupportedError(f"node '{node.name}': no gradient for Slice steps {list(node.steps)} "
                               "(only 1 and -1)")
    if any(s == -1 for s in node.steps):
        dims = g.type.shape
        g = b.add(tensor.Slice, g, starts=tuple(d - 1 if s < 0 else 0 for d, s in zip(dims, node.steps)),
                  ends=tuple(-1 if s < 0 else d for d, s in zip(dims, node.steps)), steps=node.steps)
    begins = [start if step > 0 else end + 1 for start, end, step in zip(node.starts, node.ends, node.steps)]
    ends = [dim - begin - size for dim, begin, size in zip(shape, begins, g.type.shape)]
    if not any(begins) and not any(ends):
        return [g]
    return [b.add(tensor.Pad, g, pads=tuple(begins + ends), value=0.0)]


@gradient(tensor.Pad)
def _pad(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d pad(x) = the slice of g where x was placed
    rank = node.input.type.rank
    if node.mode != "constant" or any(p < 0 for p in node.pads):
        raise UnsupportedError(f"node '{node.name}': no gradient for {node.mode} Pad by {list(node.pads)} "
                               "(only constant padding that grows)")
    starts = node.pads[:rank]
    ends = tuple(s + d for s, d in zip(starts, node.input.type.shape))
    return [b.add(tensor.Slice, grads[0], starts=starts, ends=ends, steps=(1,) * rank)]


def _spread(node: Node, g: NodeValue, b: GradBuilder) -> NodeValue:
    """A reduction's gradient back over the reduced axes of its input."""
    kept = tuple(1 if i in node.axes else d for i, d in enumerate(node.input.type.shape))
    return b.expand(b.reshape(g, kept), node.input.type.shape)


@gradient(rd.ReduceSum)
def _reduce_sum(node: Node, grads: list, b: GradBuilder) -> Grads:
    return [_spread(node, grads[0], b)]


@gradient(rd.ReduceMean)
def _reduce_mean(node: Node, grads: list, b: GradBuilder) -> Grads:
    shape = node.input.type.shape
    count = int(np.prod([shape[a] for a in node.axes]))
    spread = _spread(node, grads[0], b)
    return [b.add(ew.Div, spread, b.scalar(count, spread.type.elem))]


def _swap_last(b: GradBuilder, value: NodeValue) -> NodeValue:
    rank = value.type.rank
    return b.add(tensor.Transpose, value, perm=tuple(range(rank - 2)) + (rank - 1, rank - 2))


@gradient(linalg.MatMul)
def _matmul(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d (x @ y) = (g @ y^T, x^T @ g), summed over broadcast batch dims
    lhs, rhs, g = node.lhs, node.rhs, grads[0]
    if lhs.type.rank < 2 or rhs.type.rank < 2:
        raise UnsupportedError(f"node '{node.name}': no gradient for a MatMul with a 1-D operand")
    out = [None, None]
    if b.wants(0):
        out[0] = b.unbroadcast(b.add(linalg.MatMul, g, _swap_last(b, rhs)), lhs)
    if b.wants(1):
        out[1] = b.unbroadcast(b.add(linalg.MatMul, _swap_last(b, lhs), g), rhs)
    return out


@gradient(linalg.Gemm)
def _gemm(node: Node, grads: list, b: GradBuilder) -> Grads:
    # y = alpha op(a) op(b) + beta c: da = alpha g op(b)^T, db = alpha op(a)^T g (as Gemms), dc = beta g
    g, alpha = grads[0], node.alpha
    out: list = [None, None, None]
    if b.wants(0):
        out[0] = (b.add(linalg.Gemm, node.b, g, None, alpha=alpha, trans_a=node.trans_b, trans_b=True) if node.trans_a
                  else b.add(linalg.Gemm, g, node.b, None, alpha=alpha, trans_b=not node.trans_b))
    if b.wants(1):
        out[1] = (b.add(linalg.Gemm, g, node.a, None, alpha=alpha, trans_a=True, trans_b=node.trans_a) if node.trans_b
                  else b.add(linalg.Gemm, node.a, g, None, alpha=alpha, trans_a=not node.trans_a))
    if node.c is not None and b.wants(2):
        scaled = g if node.beta == 1.0 else b.mul(g, b.scalar(node.beta, g.type.elem))
        out[2] = b.unbroadcast(scaled, node.c)
    return out
