"""One conformance case: a small function of one primitive on one element kind, with its inputs.

A case holds several variants (shapes, attributes, edge values), each a node of
the primitive reading fresh input placeholders and saving its results, so one
compilation checks them all and a mismatch names the variant that broke.
Every operand is a placeholder, never a constant, so graph optimisation has
nothing to fold and the backend receives the primitive itself.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..graph.function import Function, Module
from ..graph.node import Node, NodeValue
from ..graph.types import ElemKind, Type
from .values import FULL, Domain, quantized_type, random_values, with_edges


@dataclass
class Case:
    """A function to compile, its inputs, and what each output checks."""

    primitive: str
    kind: ElemKind
    function: Function
    feeds: dict[str, np.ndarray]
    variants: dict[str, str] = field(default_factory=dict)
    """Output placeholder name -> a description of the variant that produced it."""


class CaseBuilder:
    """Builds a Case: `tensor` makes inputs, `node` adds the primitive, `check` saves its results."""

    def __init__(self, primitive: str, kind: ElemKind, seed: int) -> None:
        self.module = Module()
        self.case = Case(primitive, kind, self.module.create_function("main"), {})
        self.rng = np.random.default_rng(seed)

    @property
    def function(self) -> Function:
        return self.case.function

    def tensor(self, kind: ElemKind | Type, shape: tuple[int, ...] = (), *, edge: bool = False,
               domain: Domain = FULL, values: np.ndarray | None = None) -> NodeValue:
        """A new input of `kind` (quantized kinds get the suite's scale and offset, unless a Type is
        given) and `shape`, fed with `values`, or random values (with the edge values if `edge`)."""
        type_ = kind if isinstance(kind, Type) else quantized_type(kind, shape)
        if values is None:
            draw = with_edges if edge and type_.size > 0 else random_values
            values = draw(type_.elem, type_.shape, self.rng, domain)
        name = f"x{len(self.case.feeds)}"
        self.case.feeds[name] = np.asarray(values).astype(type_.dtype).reshape(type_.shape)
        return self.module.create_placeholder(name, type_).result()

    def node(self, kind: type[Node], *inputs: NodeValue | None, **attrs) -> Node:
        return self.function.create(kind, list(inputs), **attrs)

    def check(self, label: str, node: Node | NodeValue) -> None:
        """Save every result of `node` (or the one value) as outputs of the variant `label`."""
        values = node.results if isinstance(node, Node) else [node]
        for k, value in enumerate(values):
            name = f"v{len(self.case.variants)}"
            self.function.save(value, name)
            self.case.variants[name] = label if len(values) == 1 else f"{label} (result {k})"
