"""Conv as patch extraction (im2col) + MatMul, for a backend that runs MatMul but not Conv.

A chip with a MAC array and no convolution unit would otherwise send every
convolution of a CNN to a fallback device. The rule gathers each window's taps
into the columns of a patch matrix with one Gather driven by an index array
computed at compile time (padding taps index a zero appended to the flattened
input), so any rank, stride, dilation, padding and grouping take the same path,
and the multiply-adds land in one canonical MatMul over the groups. The cost is
memory: the index array and the patch matrix hold C x K x N x O elements (K taps
per window, O output positions), K times the input for a stride-1 Conv; the rule
refuses (the Conv stays) when the index array would exceed `MAX_INDICES`.
"""
from __future__ import annotations

import math

import numpy as np

from ....graph.node import NodeValue
from ....graph.nodes import elementwise as ew, linalg, nn, tensor
from ..primitives import FLOATS
from ..registry import Lowerer, lowers_primitive

MAX_INDICES = 64 << 20
"""The largest index array (elements) the rule builds; a larger Conv stays as it is."""


def _taps(node: nn.Conv) -> tuple[np.ndarray, np.ndarray]:
    """(offset, inside), each K x O: where each tap of each window lies in one channel's flattened
    spatial dims, and whether it lies inside the image (else it reads padding)."""
    spatial, out = node.input.type.shape[2:], node.type.shape[2:]
    k = len(spatial)
    steps = [math.prod(spatial[i + 1:]) for i in range(k)]
    offset, inside = np.zeros((1,) * 2 * k, np.int64), np.ones((1,) * 2 * k, bool)
    for i in range(k):
        starts = np.arange(out[i]) * node.strides[i] - node.pads[i]
        pos = np.arange(node.kernel[i])[:, None] * node.dilations[i] + starts[None, :]
        shape = [1] * 2 * k
        shape[i], shape[k + i] = pos.shape
        pos = pos.reshape(shape)  # taps along axis i, output positions along axis k + i
        offset = offset + pos * steps[i]
        inside = inside & (pos >= 0) & (pos < spatial[i])
    taps, positions = math.prod(node.kernel), math.prod(out)
    return offset.reshape(taps, positions), inside.reshape(taps, positions)


def _patch_indices(node: nn.Conv, offset: np.ndarray, inside: np.ndarray) -> np.ndarray:
    """G x (C/G)*K x N*O indices into the flattened input; padding taps index one past its end."""
    n, c = node.input.type.shape[:2]
    group, taps, positions = node.group, *offset.shape
    image = c * math.prod(node.input.type.shape[2:])
    dtype = np.int32 if n * image <= np.iinfo(np.int32).max else np.int64
    channel = (np.arange(c, dtype=dtype) * (image // c)).reshape(group, c // group, 1, 1, 1)
    batch = (np.arange(n, dtype=dtype) * image).reshape(1, 1, 1, n, 1)
    index = channel + offset.astype(dtype)[None, None, :, None, :] + batch
    np.copyto(index, n * image, where=~inside[None, None, :, None, :])
    return index.reshape(group, c // group * taps, n * positions)


@lowers_primitive(nn.Conv, onto=(tensor.Concat, tensor.Gather, linalg.MatMul, tensor.Reshape,
                                 tensor.Transpose, ew.Add), core=linalg.MatMul)
def _conv_as_matmul(b: Lowerer, node: nn.Conv) -> NodeValue | None:
    # Conv(x, w, bias) -> Transpose(Reshape(MatMul(Reshape(w), Gather(Concat(flat x, 0), indices)))) + bias
    """Patches gathered by an index array built at compile time, times the filters in one MatMul
    batched over the groups (float Conv only; the index array holds C*K*N*O int32 elements).

    Per group, filters (M/G) x (C/G)*K times patches (C/G)*K x N*O; the result M x N x O.. becomes
    N x M x O.. (a Transpose, a Reshape when N is 1). A quantized Conv is left alone: its integer
    engine and accumulator types are another story.
    """
    x, filt = node.input, node.filter
    if not {x.type.elem, filt.type.elem} <= FLOATS:
        return None
    (n, c), spatial, (m, out) = x.type.shape[:2], x.type.shape[2:], (node.type.shape[1], node.type.shape[2:])
    if c * math.prod(node.kernel) * n * math.prod(out) > MAX_INDICES:
        return None
    offset, inside = _taps(node)
    data = b.add(tensor.Reshape, x, shape=(n * c * math.prod(spatial),))
    if not inside.all():  # some taps read padding: give them a zero to read
        data = b.add(tensor.Concat, data, b.constant(np.zeros(1, x.type.elem.dtype), "zero"), axis=0)
    patches = b.add(tensor.Gather, data, b.constant(_patch_indices(node, offset, inside), "patches"), axis=0)
    group = node.group
    filters = b.add(tensor.Reshape, filt, shape=(group, m // group, patches.type.shape[1]))
    y = b.add(linalg.MatMul, filters, patches)
    if n == 1:
        y = b.add(tensor.Reshape, y, shape=(1, m) + out)
    else:
        y = b.add(tensor.Reshape, y, shape=(m, n) + out)
        y = b.add(tensor.Transpose, y, perm=(1, 0) + tuple(range(2, 2 + len(out))))
    if node.bias is None:
        return y
    return b.add(ew.Add, y, b.add(tensor.Reshape, node.bias, shape=(m,) + (1,) * len(out)))
