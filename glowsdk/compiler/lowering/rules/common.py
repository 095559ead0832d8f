"""Helpers shared by the lowering rules."""
from __future__ import annotations

import numpy as np

from ....graph.node import Constant, NodeValue
from ....graph.nodes.elementwise import Cast
from ....graph.types import ElemKind
from ..registry import Lowerer


def compute_elem(*values: NodeValue | None) -> ElemKind:
    """The float kind the reference kernels compute in: float64 if any operand is, else float32.

    Half-precision operands (float16, bfloat16) are therefore computed in float32 and
    rounded once at the end, which a chain of half-precision primitives would not do.
    """
    wide = any(v is not None and v.type.elem == ElemKind.FLOAT64 for v in values)
    return ElemKind.FLOAT64 if wide else ElemKind.FLOAT32


def cast_to(b: Lowerer, value: NodeValue, elem: ElemKind) -> NodeValue:
    """`value` as `elem`: a Cast, or `value` itself when it already has that kind."""
    return value if value.type.elem == elem else b.add(Cast, value, to=elem)


def constant_array(value: NodeValue | None) -> np.ndarray | None:
    """The array of an operand known at compile time (a Constant), else None."""
    if value is None or not isinstance(value.node, Constant):
        return None
    return value.node.value
