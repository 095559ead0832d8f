"""Low-level IR instructions, declared as records (paper 3.5, 3.7).

An instruction kind is an `InstrSpec`: its operands, each with a direction
(`@in`, `@out`, `@inout`), its attributes, whether a destination may share its
buffer with a source (in-place), and a docstring. The four structural kinds
(allocactivation, deallocactivation, tensorview, copy) are declared here; one
compute kind per node kind is *derived* from the node record (destinations
first, then the node's operands, the node's attributes), so adding a node kind
adds its instruction, and the node's type rule and reference kernel work on the
instruction unchanged. Liveness, in-place legality, buffer sharing, the
allocator, the printer and the parser all read the operand directions from here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ...graph.spec import NODE_KINDS, Attr, NodeSpec, int_attr, type_attr


class OperandKind(Enum):
    """How an instruction uses a buffer operand."""

    IN = "@in"
    OUT = "@out"
    INOUT = "@inout"

    @property
    def reads(self) -> bool:
        return self is not OperandKind.OUT

    @property
    def writes(self) -> bool:
        return self is not OperandKind.IN


@dataclass(frozen=True)
class OperandSpec:
    """One operand slot: name, direction, and whether it may be absent or repeat."""

    name: str
    kind: OperandKind
    optional: bool = False
    variadic: bool = False


@dataclass(frozen=True)
class InstrSpec:
    """The record of one instruction kind."""

    name: str
    operands: tuple[OperandSpec, ...]
    attrs: tuple[Attr, ...]
    doc: str
    node: NodeSpec | None = None
    inplace: bool = False
    attr_index: dict[str, Attr] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "attr_index", {a.name: a for a in self.attrs})

    @property
    def dests(self) -> tuple[OperandSpec, ...]:
        return tuple(o for o in self.operands if o.kind is OperandKind.OUT)

    @property
    def sources(self) -> tuple[OperandSpec, ...]:
        return tuple(o for o in self.operands if o.kind is not OperandKind.OUT)

    @property
    def mnemonic(self) -> str:
        return self.name.lower()


INSTR_KINDS: dict[str, InstrSpec] = {}
"""Every instruction kind by name (derived compute kinds are added on first use)."""

_STRUCTURAL = [
    InstrSpec("AllocActivation", (), (type_attr("type"),),
              "Marks the start of an activation buffer's lifetime; allocates nothing by itself: the "
              "static allocator gives every activation an offset in one mutable region."),
    InstrSpec("DeallocActivation", (OperandSpec("buffer", OperandKind.OUT),), (),
              "Marks the end of an activation buffer's lifetime."),
    InstrSpec("TensorView", (OperandSpec("source", OperandKind.IN),), (type_attr("type"), int_attr("offset", 0)),
              "A typed window into `source` starting `offset` bytes in, contiguous in row-major order: "
              "a reshape or a leading-axis slice without a copy. Reading or writing the view reads or writes "
              "the source's bytes."),
    InstrSpec("Copy", (OperandSpec("dest", OperandKind.OUT), OperandSpec("source", OperandKind.IN)), (),
              "dest = source, two buffers of one type.", inplace=False),
]
for _spec in _STRUCTURAL:
    INSTR_KINDS[_spec.name] = _spec

_INPLACE_FAMILIES = {"elementwise"}
"""Families whose kernels read element i only to write element i: a destination may reuse a
source buffer of the same type."""


def _dest_names(node: NodeSpec) -> list[str]:
    if len(node.results) == 1:
        return ["dest"]
    return [f"dest_{r}" for r in node.results]


def derived_spec(kind_name: str) -> InstrSpec:
    """The compute instruction of node kind `kind_name`: destinations, then the node's operands."""
    if kind_name in INSTR_KINDS:
        return INSTR_KINDS[kind_name]
    node = NODE_KINDS[kind_name].spec
    if node.variadic_results or kind_name == "Save" or node.family == "storage":
        raise ValueError(f"node kind {kind_name} has no instruction form")
    operands = [OperandSpec(n, OperandKind.OUT) for n in _dest_names(node)]
    operands += [OperandSpec(o.name, OperandKind.IN, o.optional, o.variadic) for o in node.operands]
    spec = InstrSpec(kind_name, tuple(operands), node.attrs, node.doc, node,
                     inplace=node.family in _INPLACE_FAMILIES)
    INSTR_KINDS[kind_name] = spec
    return spec


def derive_all() -> dict[str, InstrSpec]:
    """Declare the instruction of every node kind that has one (for docs and parsing)."""
    for name in NODE_KINDS:
        try:
            derived_spec(name)
        except ValueError:
            continue
    return INSTR_KINDS


def spec_by_mnemonic(mnemonic: str) -> InstrSpec:
    """The instruction kind printed as `mnemonic`; KeyError if there is none."""
    for spec in derive_all().values():
        if spec.mnemonic == mnemonic:
            return spec
    raise KeyError(mnemonic)


def attr_value(spec: InstrSpec, name: str, value: Any) -> Any:
    """`value` normalised as the attribute `name` of `spec` expects."""
    return spec.attr_index[name].kind.normalise(value)
