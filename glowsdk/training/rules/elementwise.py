"""Gradients of the element-wise kinds, built from element-wise kinds.

Binary kinds broadcast, so each operand's gradient is summed back to its shape
(`GradBuilder.unbroadcast`). Activations reuse their forward result where the
derivative is a function of it (sigmoid, tanh, exp), as Glow's do.
"""
from __future__ import annotations

from ...graph.node import Node, NodeValue
from ...graph.nodes import elementwise as ew
from ..registry import GradBuilder, Grads, gradient


@gradient(ew.Add)
def _add(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d(x + y) = (g, g)
    g = grads[0]
    return [b.unbroadcast(g, node.lhs), b.unbroadcast(g, node.rhs)]


@gradient(ew.Sub)
def _sub(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d(x - y) = (g, -g)
    g = grads[0]
    return [b.unbroadcast(g, node.lhs), b.unbroadcast(b.add(ew.Neg, g), node.rhs)]


@gradient(ew.Mul)
def _mul(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d(x * y) = (g * y, g * x)
    g = grads[0]
    return [b.unbroadcast(b.mul(g, node.rhs), node.lhs) if b.wants(0) else None,
            b.unbroadcast(b.mul(g, node.lhs), node.rhs) if b.wants(1) else None]


@gradient(ew.Div)
def _div(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d(x / y) = (g / y, -(g / y) * (x / y))
    g_over_y = b.add(ew.Div, grads[0], node.rhs)
    rhs_grad = b.add(ew.Neg, b.mul(g_over_y, node.result())) if b.wants(1) else None
    return [b.unbroadcast(g_over_y, node.lhs),
            None if rhs_grad is None else b.unbroadcast(rhs_grad, node.rhs)]


def _select(node: Node, b: GradBuilder, g: NodeValue, cond: NodeValue) -> NodeValue:
    """g where `cond` holds, 0 elsewhere."""
    return b.add(ew.Where, cond, g, b.scalar(0.0, g.type.elem))


@gradient(ew.Max, ew.Min)
def _extreme(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d max(x, y) = (g where x >= y, g where x < y); ties go to x (min: x <= y)
    g = grads[0]
    compare = ew.GreaterOrEqual if node.kind == "Max" else ew.LessOrEqual
    lhs_wins = b.add(compare, node.lhs, node.rhs)
    return [b.unbroadcast(_select(node, b, g, lhs_wins), node.lhs),
            b.unbroadcast(_select(node, b, g, b.add(ew.Not, lhs_wins)), node.rhs)]


@gradient(ew.Neg)
def _neg(node: Node, grads: list, b: GradBuilder) -> Grads:
    return [b.add(ew.Neg, grads[0])]


@gradient(ew.Relu)
def _relu(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d relu(x) = g where x > 0
    zero = b.scalar(0.0, node.input.type.elem)
    return [_select(node, b, grads[0], b.add(ew.Greater, node.input, zero))]


@gradient(ew.LeakyRelu)
def _leaky_relu(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d leaky_relu(x) = g where x >= 0, alpha * g elsewhere
    g, elem = grads[0], node.input.type.elem
    positive = b.add(ew.GreaterOrEqual, node.input, b.scalar(0.0, elem))
    return [b.add(ew.Where, positive, g, b.mul(g, b.scalar(node.alpha, elem)))]


@gradient(ew.Sigmoid)
def _sigmoid(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d sigmoid(x) = g * y * (1 - y)
    y = node.result()
    one_minus = b.add(ew.Sub, b.scalar(1.0, y.type.elem), y)
    return [b.mul(b.mul(grads[0], y), one_minus)]


@gradient(ew.Tanh)
def _tanh(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d tanh(x) = g * (1 - y^2)
    y = node.result()
    return [b.mul(grads[0], b.add(ew.Sub, b.scalar(1.0, y.type.elem), b.mul(y, y)))]


@gradient(ew.Exp)
def _exp(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d exp(x) = g * y
    return [b.mul(grads[0], node.result())]


@gradient(ew.Log)
def _log(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d log(x) = g / x
    return [b.add(ew.Div, grads[0], node.input)]


@gradient(ew.Sqrt)
def _sqrt(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d sqrt(x) = g / (2 y)
    y = node.result()
    return [b.add(ew.Div, grads[0], b.mul(y, b.scalar(2.0, y.type.elem)))]


@gradient(ew.Reciprocal)
def _reciprocal(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d (1 / x) = -g * y^2
    y = node.result()
    return [b.add(ew.Neg, b.mul(grads[0], b.mul(y, y)))]


@gradient(ew.Abs)
def _abs(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d |x| = g * sign(x)
    return [b.mul(grads[0], b.add(ew.Sign, node.input))]


@gradient(ew.Cast)
def _cast(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d cast(x) = cast back of g (float to float; an integer source has no gradient)
    if not node.input.type.elem.is_float:
        return [None]
    return [b.add(ew.Cast, grads[0], to=node.input.type.elem)]


@gradient(ew.Where)
def _where(node: Node, grads: list, b: GradBuilder) -> Grads:
    # d where(c, x, y) = (none, g where c, g where not c)
    g = grads[0]
    return [None, b.unbroadcast(_select(node, b, g, node.cond), node.lhs),
            b.unbroadcast(_select(node, b, g, b.add(ew.Not, node.cond)), node.rhs)]
