"""A squeeze-and-excitation gate folded into the 1x1 convolution that reads the gated image.

MobileNetV3's and EfficientNet's blocks end in a channel gate and a projection:
y = Conv1x1(x * s, W), s of shape 1 x C x 1 x 1, x of 1 x C x H x W. The gate is a
pass over the whole image (read x, write x * s, then the GEMM reads it again), and
for one image it commutes into the filter: Conv1x1(x * s, W) = Conv1x1(x, W * s),
W * s scaling filter column c by s[c], M x C products instead of C x H x W. The
CPU backend's post-lowering transform rewrites that; the convolution then reads
its filter in place, computed at run time (kernels/conv.py).

It applies where the image is larger than the filter (M < H x W: a 7 x 7 image
with 1152 filters has fewer elements than its filter, and a computed filter is
not packed at compile time, so there the gate stays), for one image only (each
image has its own gate), to a Mul whose only reader is such a convolution.
"""
from __future__ import annotations

import math

from ...graph.function import Function
from ...graph.node import Constant, Node, NodeValue
from ...graph.nodes import elementwise, nn
from ...graph.types import ElemKind


def _gate_and_image(mul: Node) -> tuple[NodeValue, NodeValue] | None:
    """(gate 1 x C x 1 x 1, image 1 x C x H x W) of a Mul, either operand order, else None."""
    lhs, rhs = mul.lhs, mul.rhs
    for gate, image in ((lhs, rhs), (rhs, lhs)):
        shape = image.type.shape
        if len(shape) == 4 and shape[0] == 1 and gate.type.shape == (1, shape[1], 1, 1) and \
                mul.type.shape == shape:
            return gate, image
    return None


def foldable(conv: Node) -> bool:
    """A float32 1x1 convolution (stride 1, no padding, one group) with a constant filter, reading a
    channel-gated single image that nothing else reads, larger than the filter."""
    if conv.kind != "Conv" or conv.group != 1 or conv.type.elem is not ElemKind.FLOAT32:
        return False
    if not isinstance(conv.filter.node, Constant) or math.prod(conv.kernel) != 1:
        return False
    if any(s != 1 for s in conv.strides) or any(conv.pads):
        return False
    mul = conv.input.node
    if mul.kind != "Mul" or len(mul.users) != 1 or _gate_and_image(mul) is None:
        return False
    height, width = conv.input.type.shape[2:]
    return conv.filter.type.shape[0] < height * width


def fold_gates(function: Function) -> bool:
    """Rewrite every `foldable` convolution to read the ungated image with a gated filter; whether any
    changed."""
    convs = [n for n in function.nodes if foldable(n)]
    for conv in convs:
        mul = conv.input.node
        gate, image = _gate_and_image(mul)
        with function.inserting_before(conv):
            filter_ = function.add(elementwise.Mul, conv.filter, gate, name=f"{conv.name}/gated_filter")
            folded = function.create(nn.Conv, [image, filter_, conv.bias], f"{conv.name}/gated", **conv.attrs)
        function.replace_all_uses(conv.result(), folded.result())
        function.erase(conv)
        function.erase(mul)
    return bool(convs)
