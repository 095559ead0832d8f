"""Result-type rules shared by node families, so a family states its rule once."""
from __future__ import annotations

from typing import Callable

from ..node import Node
from ..types import ElemKind, Type, broadcast_shapes


def same_as(index: int = 0) -> Callable[[Node], Type]:
    """The result has the type of operand `index`."""
    return lambda node: node.inputs[index].type


def broadcast_to(elem: ElemKind | None = None) -> Callable[[Node], Type]:
    """Multidirectional broadcast of all operands' shapes; element kind of the first
    operand (which all operands must share) or `elem` if given."""

    def rule(node: Node) -> Type:
        types = [v.type for v in node.present_inputs()]
        first = types[0]
        for other in types[1:]:
            if not first.same_elem(other):
                raise node.fail(f"operands must share one element kind, got {first} and {other}")
        shape = broadcast_shapes(*[t.shape for t in types])
        return Type(elem, shape) if elem is not None else first.with_shape(shape)

    return rule


def require_elem(node: Node, type_: Type, allowed: Callable[[ElemKind], bool], what: str) -> None:
    """Raise a GraphError naming the node unless `type_`'s kind is allowed."""
    if not allowed(type_.elem):
        raise node.fail(f"{what} must be {allowed.__doc__ or 'of another kind'}, got {type_}")


def normalise_axis(node: Node, axis: int, rank: int) -> int:
    """Map a possibly negative axis into [0, rank); GraphError if out of range."""
    if not -rank <= axis < max(rank, 1):
        raise node.fail(f"axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def is_float(kind: ElemKind) -> bool:
    """a floating-point kind"""
    return kind.is_float


def is_numeric(kind: ElemKind) -> bool:
    """a numeric (float or integer) kind"""
    return kind.is_float or kind.is_integer


def is_numeric_or_quantized(kind: ElemKind) -> bool:
    """a numeric or quantized kind"""
    return kind.is_float or kind.is_integer or kind.is_quantized


def is_quantized_byte(kind: ElemKind) -> bool:
    """int8q or uint8q"""
    return kind in (ElemKind.QINT8, ElemKind.QUINT8)


def accumulator_type(node: Node, lhs: Type, rhs: Type, shape: tuple[int, ...],
                     channels: tuple[int, int] | None = None) -> Type:
    """The exact int32 accumulator of products of two 8-bit quantized operands (paper 4.1).

    Products of (q - offset) terms carry the scale s_lhs * s_rhs and offset 0, so
    sums of them (and an int32 bias of that scale) add without rescaling.
    `channels` = (axis of rhs, axis of the result) where a per-channel rhs (weights
    quantized per output channel) may have its axis; the accumulator is then
    per-channel along the result's axis.
    """
    for value, what in ((lhs, "lhs"), (rhs, "rhs")):
        require_elem(node, value, is_quantized_byte, f"quantized {what}")
    if lhs.per_channel:
        raise node.fail(f"lhs {lhs} must be quantized per tensor")
    if not rhs.per_channel:
        return Type(ElemKind.QINT32, shape, lhs.scale * rhs.scale, 0)
    if channels is None or rhs.axis != channels[0]:
        where = "" if channels is None else f" on axis {channels[0]}"
        raise node.fail(f"rhs {rhs} can only be quantized per channel{where or ' per tensor here'}")
    if any(o != 0 for o in rhs.offset):
        raise node.fail(f"per-channel rhs {rhs} must have offsets 0")
    scales = tuple(lhs.scale * s for s in rhs.scale)
    return Type(ElemKind.QINT32, shape, scales, (0,) * len(scales), channels[1])


def is_bool(kind: ElemKind) -> bool:
    """bool"""
    return kind is ElemKind.BOOL


def is_index(kind: ElemKind) -> bool:
    """int32 or int64"""
    return kind in (ElemKind.INT32, ElemKind.INT64)


def require_same_elem(node: Node, *names: str) -> None:
    """Raise a GraphError unless the named operands (absent ones skipped) share the first one's kind."""
    first = getattr(node, names[0]).type
    for name in names[1:]:
        value = getattr(node, name)
        if value is not None and not value.type.same_elem(first):
            raise node.fail(f"{name} must have the element kind of {names[0]} ({first.elem.value}), "
                            f"got {value.type}")
