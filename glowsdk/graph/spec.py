"""Declarative node records (ClassGen, paper 3.7).

A node kind is one `NodeSpec`: its operands, results, attributes, a result-type
rule, an optional extra verify rule and a docstring. `kinds.define_node` turns the
record into a `Node` subclass with named accessors; construction, verification,
structural equality, cloning and printing all follow from the record, so adding
a node kind is adding one `define_node(...)` call in `glowsdk/graph/nodes/`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from .types import ElemKind, Type

if TYPE_CHECKING:
    from .node import Node


class AttrKind(Enum):
    """What an attribute holds; values are normalised to hashable Python objects."""

    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    STR = "str"
    INTS = "ints"
    STRS = "strs"
    FLOATS = "floats"
    ELEM = "elem"
    TYPE = "type"
    ARRAY = "array"

    def normalise(self, value: Any) -> Any:
        """Coerce `value` to this kind's canonical form, or raise TypeError/ValueError."""
        if self is AttrKind.INT:
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"expected an int, got {value!r}")
            return int(value)
        if self is AttrKind.FLOAT:
            return float(value)
        if self is AttrKind.BOOL:
            return bool(value)
        if self is AttrKind.STR:
            if not isinstance(value, str):
                raise TypeError(f"expected a string, got {value!r}")
            return value
        if self is AttrKind.INTS:
            return tuple(AttrKind.INT.normalise(v) for v in value)
        if self is AttrKind.FLOATS:
            return tuple(float(v) for v in value)
        if self is AttrKind.STRS:
            return tuple(AttrKind.STR.normalise(v) for v in value)
        if self is AttrKind.ELEM:
            if not isinstance(value, ElemKind):
                raise TypeError(f"expected an ElemKind, got {value!r}")
            return value
        if self is AttrKind.TYPE:
            if not isinstance(value, Type):
                raise TypeError(f"expected a Type, got {value!r}")
            return value
        array = np.asarray(value)
        array.setflags(write=False)
        return array


REQUIRED = object()
"""Marks an attribute without a default."""


@dataclass(frozen=True)
class Attr:
    """One attribute of a node kind."""

    name: str
    kind: AttrKind
    default: Any = REQUIRED
    doc: str = ""


@dataclass(frozen=True)
class Operand:
    """One input slot. `optional` slots may be None; a `variadic` slot takes a list."""

    name: str
    optional: bool = False
    variadic: bool = False


def operands(text: str) -> tuple[Operand, ...]:
    """Parse a compact operand list: 'input filter bias?' or 'inputs*'."""
    out = []
    for word in text.split():
        if word.endswith("?"):
            out.append(Operand(word[:-1], optional=True))
        elif word.endswith("*"):
            out.append(Operand(word[:-1], variadic=True))
        else:
            out.append(Operand(word))
    if sum(o.variadic for o in out) > 1 or (any(o.variadic for o in out) and not out[-1].variadic):
        raise ValueError(f"only the last operand may be variadic: {text!r}")
    return tuple(out)


TypeRule = Callable[["Node"], "Type | Sequence[Type]"]
VerifyRule = Callable[["Node"], None]


@dataclass(frozen=True)
class NodeSpec:
    """The record of one node kind."""

    name: str
    operands: tuple[Operand, ...]
    results: tuple[str, ...]
    attrs: tuple[Attr, ...]
    infer: TypeRule
    verify: VerifyRule | None
    doc: str
    family: str
    variadic_results: bool = False
    attr_index: dict[str, Attr] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "attr_index", {a.name: a for a in self.attrs})

    def normalise_attrs(self, given: dict[str, Any]) -> dict[str, Any]:
        """Fill defaults and coerce kinds; raises ValueError naming a bad attribute."""
        unknown = set(given) - set(self.attr_index)
        if unknown:
            raise ValueError(f"{self.name} has no attribute(s) {sorted(unknown)}")
        out = {}
        for attr in self.attrs:
            if attr.name in given and given[attr.name] is not None:
                try:
                    out[attr.name] = attr.kind.normalise(given[attr.name])
                except (TypeError, ValueError) as err:
                    raise ValueError(f"{self.name}.{attr.name}: {err}") from None
            elif attr.default is REQUIRED:
                raise ValueError(f"{self.name} needs attribute '{attr.name}'")
            else:
                out[attr.name] = attr.default
        return out


NODE_KINDS: dict[str, type["Node"]] = {}
"""Every declared node kind by name: the registry that passes, printers and backends read."""


def int_attr(name: str, default: Any = REQUIRED, doc: str = "") -> Attr:
    return Attr(name, AttrKind.INT, default, doc)


def float_attr(name: str, default: Any = REQUIRED, doc: str = "") -> Attr:
    return Attr(name, AttrKind.FLOAT, default, doc)


def bool_attr(name: str, default: Any = REQUIRED, doc: str = "") -> Attr:
    return Attr(name, AttrKind.BOOL, default, doc)


def str_attr(name: str, default: Any = REQUIRED, doc: str = "") -> Attr:
    return Attr(name, AttrKind.STR, default, doc)


def ints_attr(name: str, default: Any = REQUIRED, doc: str = "") -> Attr:
    return Attr(name, AttrKind.INTS, default if default is REQUIRED else tuple(default), doc)


def floats_attr(name: str, default: Any = REQUIRED, doc: str = "") -> Attr:
    return Attr(name, AttrKind.FLOATS, default if default is REQUIRED else tuple(default), doc)


def strs_attr(name: str, default: Any = REQUIRED, doc: str = "") -> Attr:
    return Attr(name, AttrKind.STRS, default if default is REQUIRED else tuple(default), doc)


def elem_attr(name: str, default: Any = REQUIRED, doc: str = "") -> Attr:
    return Attr(name, AttrKind.ELEM, default, doc)


def type_attr(name: str, default: Any = REQUIRED, doc: str = "") -> Attr:
    return Attr(name, AttrKind.TYPE, default, doc)


def array_attr(name: str, default: Any = REQUIRED, doc: str = "") -> Attr:
    return Attr(name, AttrKind.ARRAY, default, doc)
