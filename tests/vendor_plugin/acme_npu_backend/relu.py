"""Acme's post-lowering transform: Max(x, 0) back into the chip's native Relu.

Exporters and lowering rules (Clip, for one) spell a rectifier as Max(x, 0); the
chip runs Relu as one kernel fused with its producer, so the transform recovers
it. The rewrite is exact: Relu is max(x, 0) with the same NaN propagation. It
only rewrites into a kind glowsdk already has, so the function stays verifiable.
"""
from __future__ import annotations

import numpy as np

from glowsdk.graph.function import Function
from glowsdk.graph.node import Constant, Node, NodeValue
from glowsdk.graph.nodes.elementwise import Relu
from glowsdk.graph.types import ElemKind


def _is_positive_zero(value: NodeValue) -> bool:
    """A tensor of +0.0: Relu compares with +0.0, so only then do the signs of zeros match too."""
    node = value.node
    if isinstance(node, Constant):
        return not np.any(node.value) and not np.any(np.signbit(node.value))
    return node.kind == "Splat" and node.value == 0.0 and not np.signbit(node.value)


def _rectified(node: Node) -> NodeValue | None:
    """x when `node` is Max(x, +0) or Max(+0, x) and the zero does not widen x."""
    lhs, rhs = node.inputs
    for x, zero in ((lhs, rhs), (rhs, lhs)):
        if x.type == node.type and _is_positive_zero(zero):
            return x
    return None


def recover_relus(function: Function) -> int:
    """Replace every float32 Max(x, +0) by Relu(x); returns how many were replaced."""
    replaced = 0
    for node in list(function.nodes):
        if node.kind != "Max" or node.type.elem is not ElemKind.FLOAT32:
            continue
        x = _rectified(node)
        if x is None:
            continue
        # Max(x, 0) -> Relu(x)
        with function.inserting_before(node):
            relu = function.add(Relu, x, name=f"{node.name}_relu")
        function.replace_all_uses(node.result(), relu)
        function.erase(node)
        replaced += 1
    if replaced:
        function.erase_dead()
    return replaced
