"""The gradient registry: one rule per forward node kind, registered with `@gradient(Kind)`.

A rule receives the forward node, the gradient of each of its results (None for a
result the loss does not depend on) and a `GradBuilder`, and returns the gradient
of each operand (None where there is none: integer operands, absent ones, or those
the builder says nobody wants). Rules build the backward graph from forward kinds
wherever that is exact, and from the training kinds (`glowsdk.graph.nodes.training`)
where no forward kind is.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..graph.function import Function
from ..graph.node import Node, NodeValue
from ..graph.nodes import elementwise as ew, reduce as rd, tensor
from ..graph.nodes.core import Splat
from ..graph.table import KindTable
from ..graph.types import ElemKind

Grads = Sequence["NodeValue | None"]
Rule = Callable[[Node, list["NodeValue | None"], "GradBuilder"], Grads]
GRADIENTS = KindTable("a gradient rule")
gradient = GRADIENTS.register
"""`@gradient(Kind, ...)` registers how to differentiate each kind."""


class GradBuilder:
    """Adds the backward nodes of one forward node to the function, named after it."""

    def __init__(self, function: Function, node: Node, wanted: Sequence[bool]) -> None:
        self.function = function
        self.node = node
        self.wanted = tuple(wanted)

    def wants(self, index: int) -> bool:
        """Whether the gradient of operand `index` leads to a parameter (else the rule may skip it)."""
        return self.wanted[index]

    def add(self, kind: type[Node], *inputs: NodeValue | None, **attrs: Any) -> NodeValue:
        name = f"{self.node.name}_grad_{kind.spec.name.lower()}"
        return self.function.create(kind, list(inputs), name, **attrs).result()

    def constant(self, array: np.ndarray, hint: str = "const") -> NodeValue:
        name = f"{self.node.name}_grad_{hint}"
        return self.function.module.create_constant(name, np.require(array, requirements="C")).result()

    def scalar(self, value: float, elem: ElemKind) -> NodeValue:
        """A rank-0 Constant, which broadcasts against anything."""
        return self.constant(np.array(value, dtype=elem.dtype), "scalar")

    def splat(self, value: float, like: NodeValue) -> NodeValue:
        return self.add(Splat, shape=like.type.shape, value=float(value), elem=like.type.elem)

    def reshape(self, value: NodeValue, shape: Sequence[int]) -> NodeValue:
        shape = tuple(shape)
        return value if value.type.shape == shape else self.add(tensor.Reshape, value, shape=shape)

    def expand(self, value: NodeValue, shape: Sequence[int]) -> NodeValue:
        shape = tuple(shape)
        return value if value.type.shape == shape else self.add(tensor.Expand, value, shape=shape)

    def unbroadcast(self, grad: NodeValue, operand: NodeValue) -> NodeValue:
        """Sum `grad` over the dims along which `operand` was broadcast to it, back to its shape."""
        target, shape = operand.type.shape, grad.type.shape
        lead = len(shape) - len(target)
        axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(target) if d == 1 and shape[lead + i] != 1)
        if axes:
            grad = self.add(rd.ReduceSum, grad, axes=axes, keepdims=True)
        return self.reshape(grad, target)

    def mul(self, lhs: NodeValue, rhs: NodeValue) -> NodeValue:
        return self.add(ew.Mul, lhs, rhs)


def differentiable(value: NodeValue | None) -> bool:
    """Whether a value can carry a gradient: a float tensor."""
    return value is not None and value.type.elem.is_float
