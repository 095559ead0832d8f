"""Lowering rules, one per high-level node kind, registered with `@lowers(Kind)`, and
alternative lowerings of primitives, registered with `@lowers_primitive(Kind, onto=...)`.

A rule receives a `Lowerer` (which adds nodes just before the node being
lowered) and the node; it returns the replacement values, one per result of the
node, built from primitives or from other kinds that lower further. A rule may
return None when the node is already in a form it cannot simplify (for example a
MatMul that is already canonical), in which case the node stays.

An alternative lowering rewrites a primitive for a backend that lacks it (Conv as
patch extraction + MatMul for a chip with a MAC array but no convolution unit). It
builds its result from the canonical primitives named in `onto` only, so the
driver can tell, before and after running it, whether the backend runs the result.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ...graph.function import Function
from ...graph.node import Node, NodeValue
from ...graph.nodes.core import Splat
from ...graph.table import KindTable
from ...graph.types import ElemKind
from .primitives import PRIMITIVES

Rule = Callable[["Lowerer", Node], "NodeValue | Sequence[NodeValue] | None"]
LOWERINGS = KindTable("a lowering rule")
lowers = LOWERINGS.register
"""`@lowers(Kind, ...)` registers the lowering of each kind."""


@dataclass(frozen=True)
class AlternativeLowering:
    """A rule for a primitive a backend lacks, and the primitives its result is built from: the driver
    applies it only for a backend that declares all of them (and runs every node the rule made). With a
    fallback device, declaring and running the `core` primitive (the one doing the work) is enough:
    the rest of the result runs on the fallback."""

    rule: Rule
    onto: frozenset[str]
    core: str

    def __call__(self, b: Lowerer, node: Node) -> NodeValue | Sequence[NodeValue] | None:
        return self.rule(b, node)


PRIMITIVE_LOWERINGS = KindTable("an alternative lowering")


def lowers_primitive(kind: type[Node], onto: Iterable[type[Node]], core: type[Node]) -> Callable[[Rule], Rule]:
    """`@lowers_primitive(Kind, onto=(...), core=K)` registers the alternative lowering of primitive `Kind`,
    built from the primitives `onto`, doing its work in `core` (a kind outside the primitive set is an
    error at import)."""
    names = frozenset(k.spec.name for k in onto) | {core.spec.name}
    strays = sorted(n for n in names | {kind.spec.name} if n not in PRIMITIVES)
    if strays:
        raise ValueError(f"alternative lowering of {kind.spec.name}: {strays} are not primitives")

    def add(rule: Rule) -> Rule:
        PRIMITIVE_LOWERINGS.register(kind)(AlternativeLowering(rule, names, core.spec.name))
        return rule

    return add


class Lowerer:
    """Builds the replacement of one node, named after it, placed just before it."""

    def __init__(self, function: Function, node: Node) -> None:
        self.function = function
        self.node = node
        self._count = 0

    def _name(self, hint: str) -> str:
        self._count += 1
        return f"{self.node.name}/{hint}{self._count}"

    def add(self, kind: type[Node], *inputs: NodeValue | None, **attrs: Any) -> NodeValue:
        """A single-result node."""
        return self.function.create(kind, list(inputs), self._name(kind.spec.name.lower()), **attrs).result()

    def create(self, kind: type[Node], inputs: Sequence[NodeValue | None], **attrs: Any) -> Node:
        """A node with any number of results."""
        return self.function.create(kind, list(inputs), self._name(kind.spec.name.lower()), **attrs)

    def constant(self, array: np.ndarray, hint: str = "const") -> NodeValue:
        """A new Constant (for tensors the rule computes at compile time: masks, indices)."""
        return self.function.module.create_constant(self._name(hint), np.require(array, requirements="C")).result()

    def scalar(self, value: float | int | bool, elem: ElemKind) -> NodeValue:
        """A rank-0 Constant of `elem`, which broadcasts against anything."""
        return self.constant(np.array(value, dtype=elem.dtype), "scalar")

    def splat(self, value: float, shape: Sequence[int], elem: ElemKind) -> NodeValue:
        return self.add(Splat, shape=tuple(shape), value=float(value), elem=elem)
