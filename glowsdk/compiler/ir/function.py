"""The low-level IR function: a `declare` section of weights and a `program` of instructions.

Weights live for the whole program: constants (known data), and the mutable
input and output placeholders. Activations are local buffers whose lifetime runs
from their `allocactivation` to their `deallocactivation`; a `tensorview` is a
typed window into another buffer. Every other instruction reads and writes
buffers through its operands, each tagged `@in`, `@out` or `@inout` (paper 3.5).
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
        """Raise GraphError for the first broken invariant (see verifier.py)."""
        from .verifier import verify_ir

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
