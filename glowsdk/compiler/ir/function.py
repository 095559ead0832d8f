"""The low-level IR function: a `declare` section of weights and a `program` of instructions.

Weights live for the whole program: constants (known data), and the mutable
input and output placeholders. Activations are local buffers whose lifetime runs
from their `allocactivation` to their `deallocactivation`; a `tensorview` is a
typed window into another buffer. Every other instruction reads and writes
buffers through its operands, each tagged `@in`, `@out` or `@inout` (paper 3.5).
`verify_ir` checks every invariant (types, operand directions, lifetimes, reads of
unwritten buffers); `IRFunction.verify` runs it.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Iterator, Sequence

import numpy as np

from ...errors import GraphError
from ...graph.spec import REQUIRED
from ...graph.types import Type
from ...names import fresh_name
from .instructions import INSTR_KINDS, InstrSpec, OperandKind, OperandSpec


class Value(ABC):
    """Something an operand can name: a weight, an activation, or a view."""

    name: str

    @property
    @abstractmethod
    def type(self) -> Type:
        """The type of the buffer this value names."""


class Weight(Value):
    """A global buffer: `constant` (with data), `input` or `output` (bound at run time)."""

    ROLES = ("constant", "input", "output")

    def __init__(self, name: str, type_: Type, role: str, value: np.ndarray | None = None) -> None:
        if role not in self.ROLES:
            raise ValueError(f"weight role must be one of {self.ROLES}, got '{role}'")
        self.name = name
        self._type = type_
        self.role = role
        self.value = value

    @property
    def type(self) -> Type:
        return self._type

    @property
    def mutable(self) -> bool:
        return self.role != "constant"

    def __repr__(self) -> str:
        return f"%{self.name}"


class Instruction(Value):
    """One instruction: a kind (its `spec`), operand values, attributes.

    Derived compute instructions expose their operands and attributes by the
    node record's names, and `types`/`type`/`inputs`/`fail` like a node, so the
    node's type rule and reference kernel apply to the instruction as they are.
    """

    def __init__(self, spec: InstrSpec, name: str, operands: Sequence[Value | None],
                 attrs: dict[str, Any]) -> None:
        self.spec = spec
        self.name = name
        self.operands: list[Value | None] = list(operands)
        self.attrs = attrs

    # -- as a node, for type rules and kernels -------------------------------------------------
    @property
    def kind(self) -> str:
        return self.spec.name

    def __getattr__(self, name: str) -> Any:
        attrs = self.__dict__.get("attrs")
        if attrs is not None and name in attrs:
            return attrs[name]
        spec = self.__dict__.get("spec")
        if spec is not None:
            for slot, operand in zip(self.operand_slots(), self.__dict__["operands"]):
                if slot.name == name and not slot.variadic:
                    return operand
            if any(o.name == name and o.variadic for o in spec.operands):
                return [v for s, v in zip(self.operand_slots(), self.operands) if s.name == name]
        raise AttributeError(name)

    @property
    def types(self) -> list[Type]:
        return [v.type for s, v in zip(self.operand_slots(), self.operands) if s.kind is OperandKind.OUT]

    @property
    def type(self) -> Type:
        if self.spec.name in ("AllocActivation", "TensorView"):
            return self.attrs["type"]
        types = self.types
        if len(types) != 1:
            raise GraphError(f"instruction '{self.name}' ({self.kind}) has {len(types)} destinations")
        return types[0]

    @property
    def inputs(self) -> list[Value | None]:
        """The source operands in the node record's order (what a type rule calls inputs)."""
        return [v for s, v in zip(self.operand_slots(), self.operands) if s.kind is not OperandKind.OUT]

    def present_inputs(self) -> Iterator[Value]:
        return (v for v in self.inputs if v is not None)

    def fail(self, message: str) -> GraphError:
        return GraphError(f"instruction '{self.name}' ({self.kind}): {message}")

    # -- operands ------------------------------------------------------------------------------
    def operand_slots(self) -> list[OperandSpec]:
        """The spec slot of each operand (a variadic slot repeats)."""
        specs = self.spec.operands
        fixed = [o for o in specs if not o.variadic]
        if len(fixed) == len(specs):
            return list(specs)
        extra = len(self.operands) - len(fixed)
        return fixed + [specs[-1]] * extra

    def operand_pairs(self) -> list[tuple[Value, OperandKind]]:
        """(value, direction) of every present operand."""
        return [(v, s.kind) for s, v in zip(self.operand_slots(), self.operands) if v is not None]

    def __repr__(self) -> str:
        return f"<{self.kind} %{self.name}>"


class IRFunction:
    """Weights plus an ordered program of instructions."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.weights: dict[str, Weight] = {}
        self.instructions: list[Instruction] = []
        self._names: set[str] = set()

    def unique_name(self, base: str) -> str:
        name = fresh_name(base, self._names)
        self._names.add(name)
        return name

    def add_weight(self, name: str, type_: Type, role: str, value: np.ndarray | None = None) -> Weight:
        weight = Weight(self.unique_name(name), type_, role, value)
        self.weights[weight.name] = weight
        return weight

    def create(self, kind: str | InstrSpec, operands: Sequence[Value | None], name: str | None = None,
               at: int | None = None, **attrs: Any) -> Instruction:
        """Add an instruction (at position `at`, default the end); attributes are normalised."""
        spec = kind if isinstance(kind, InstrSpec) else INSTR_KINDS[kind]
        values = {}
        for attr in spec.attrs:
            if attr.name in attrs:
                values[attr.name] = attr.kind.normalise(attrs.pop(attr.name))
            elif attr.default is REQUIRED:
                raise GraphError(f"{spec.name} needs attribute '{attr.name}'")
            else:
                values[attr.name] = attr.default
        if attrs:
            raise GraphError(f"{spec.name} has no attribute(s) {sorted(attrs)}")
        instr = Instruction(spec, self.unique_name(name or spec.mnemonic), operands, values)
        if at is None:
            self.instructions.append(instr)
        else:
            self.instructions.insert(at, instr)
        return instr

    def remove(self, instr: Instruction) -> None:
        """Take `instr` out of the program; its name is free again (a pass may give it to a replacement)."""
        self.instructions.remove(instr)
        self._names.discard(instr.name)

    def allocs(self) -> list[Instruction]:
        return [i for i in self.instructions if i.kind == "AllocActivation"]

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.instructions)

    def __len__(self) -> int:
        return len(self.instructions)

    def verify(self) -> None:
        """Raise GraphError for the first broken invariant (see `verify_ir`)."""
        verify_ir(self)


def base_of(value: Value) -> Value:
    """The weight or activation a (possibly nested) tensorview looks into."""
    while isinstance(value, Instruction) and value.kind == "TensorView":
        value = value.operands[0]
    return value


def view_offset(value: Value) -> int:
    """The byte offset of a (possibly nested) tensorview within its base buffer."""
    offset = 0
    while isinstance(value, Instruction) and value.kind == "TensorView":
        offset += value.attrs["offset"]
        value = value.operands[0]
    return offset


_STRUCTURAL = ("AllocActivation", "DeallocActivation", "TensorView")


def result_types(instr: Instruction) -> list[Type]:
    """What the node type rule says the destinations of a derived instruction must be."""
    inferred = instr.spec.node.infer(instr)
    return [inferred] if isinstance(inferred, Type) else list(inferred)


def verify_ir(function: IRFunction) -> None:
    """Raise GraphError for the first broken invariant. Checks, naming the instruction:
    - every operand is a weight or an instruction defined earlier in the program;
    - operand counts and directions match the record; constants and inputs are never
      written (a backend may read an input where the caller's array holds it);
    - a derived instruction's destination types are what its node type rule gives for
      its sources, so IRGen and every IR pass keep the program well-typed;
    - a tensorview fits inside its source;
    - an activation is used only between its allocactivation and deallocactivation,
      deallocated once, and never read before something wrote it (a write through a
      view counts for the whole buffer: views are windows, written in full by IRGen);
    - an instruction reads no bytes it writes, unless it is in-place (element-wise)
      and reads exactly the bytes, with the type, it writes.
    """
    defined: set[int] = {id(w) for w in function.weights.values()}
    alive: set[int] = set()
    dead: set[int] = set()
    written: set[int] = {id(w) for w in function.weights.values() if w.role != "output"}
    for instr in function.instructions:
        _check_shape(instr)
        _check_overlap(instr)
        for value, direction in instr.operand_pairs():
            if id(value) not in defined:
                raise instr.fail(f"uses %{value.name} before it is defined")
            base = base_of(value)
            if isinstance(base, Instruction):
                if id(base) in dead:
                    raise instr.fail(f"uses %{value.name} after its deallocactivation")
                if id(base) not in alive:
                    raise instr.fail(f"uses %{value.name}, whose buffer is not allocated here")
            if direction.writes and isinstance(base, Weight) and base.role != "output":
                raise instr.fail(f"writes the {base.role} %{base.name}")
            if direction.reads and instr.kind not in _STRUCTURAL and id(base) not in written:
                raise instr.fail(f"reads %{value.name} before anything wrote it")
        for value, direction in instr.operand_pairs():
            if direction.writes and instr.kind != "DeallocActivation":
                written.add(id(base_of(value)))
        if instr.kind == "AllocActivation":
            alive.add(id(instr))
        elif instr.kind == "DeallocActivation":
            target = instr.operands[0]
            if not (isinstance(target, Instruction) and target.kind == "AllocActivation"):
                raise instr.fail("deallocates something that is not an activation")
            alive.discard(id(target))
            dead.add(id(target))
        defined.add(id(instr))


def _check_shape(instr: Instruction) -> None:
    slots = instr.operand_slots()
    if len(slots) != len(instr.operands):
        raise instr.fail(f"has {len(instr.operands)} operands, the record declares {len(slots)}")
    for slot, value in zip(slots, instr.operands):
        if value is None and not slot.optional:
            raise instr.fail(f"operand '{slot.name}' is missing")
    if instr.kind == "TensorView":
        source = instr.operands[0]
        if instr.attrs["offset"] < 0 or instr.attrs["offset"] + instr.type.nbytes > source.type.nbytes:
            raise instr.fail(f"view {instr.type} at byte {instr.attrs['offset']} does not fit in "
                             f"%{source.name} ({source.type}, {source.type.nbytes} bytes)")
    elif instr.kind == "Copy":
        dest, source = instr.operands
        if dest.type != source.type:
            raise instr.fail(f"copies {source.type} into {dest.type}")
    elif instr.spec.node is not None:
        try:
            expected = result_types(instr)
        except GraphError:
            raise
        except (ValueError, TypeError, IndexError, KeyError) as err:
            raise instr.fail(str(err)) from None
        if expected != instr.types:
            raise instr.fail(f"writes {', '.join(map(str, instr.types))} but its sources give "
                             f"{', '.join(map(str, expected))}")
        if instr.spec.node.verify is not None:
            instr.spec.node.verify(instr)


def _check_overlap(instr: Instruction) -> None:
    """Kernels may stream: a destination must not alias a source, except element for element in place."""
    if instr.kind in _STRUCTURAL:
        return
    pairs = instr.operand_pairs()
    for i, (written, direction) in enumerate(pairs):
        for j, (read, other) in enumerate(pairs):
            if i == j or not (direction.writes and other.reads) or not _overlap(written, read):
                continue
            if not (instr.spec.inplace and view_offset(written) == view_offset(read) and written.type == read.type):
                raise instr.fail(f"writes %{written.name} over bytes of %{read.name}, which it reads")


def _overlap(a: Value, b: Value) -> bool:
    start_a, start_b = view_offset(a), view_offset(b)
    return (base_of(a) is base_of(b) and start_a < start_b + b.type.nbytes
            and start_b < start_a + a.type.nbytes)
