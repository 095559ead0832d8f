"""The vocabulary of the ISA table: engines, field kinds, fields, instruction records.

An instruction is 128 bits, little-endian: byte i holds bits 8i..8i+7 of one
128-bit integer. Bits 0..21 are the common header (opcode and the semaphore
wait/signal of the synchronisation model); each instruction places its own
fields in bits 22..127. Every bit outside the header and the instruction's
fields is reserved and must be zero.

`validate_table` checks a table for duplicate or oversized opcodes, fields that
overlap each other or the header or do not fit in 128 bits, and ranges a field
cannot hold; `isa/table.py` runs it at import so a broken table fails loudly.
"""
from __future__ import annotations

from dataclasses import dataclass, field as dataclass_field
from enum import Enum
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from .errors import IsaTableError

if TYPE_CHECKING:
    from .behaviour import ExtentRule, Semantics, Timing

INSTR_BITS = 128
INSTR_BYTES = INSTR_BITS // 8
OPCODE_BITS = 6

FieldValue = int | str
"""A field's value in an instruction record: an int, or a name for symbolic (enum) fields."""


class Engine(Enum):
    """The unit whose in-order queue executes an instruction."""

    CONTROL = "control"
    LOAD = "load"
    STORE = "store"
    MATRIX = "matrix"
    VECTOR = "vector"


@dataclass(frozen=True)
class FieldKind:
    """A row of the field table: how many bits, which values are legal, how they print."""

    name: str
    width: int
    lo: int
    hi: int
    doc: str
    signed: bool = False
    names: tuple[str, ...] = ()
    hex: bool = False

    def problem(self, value: object) -> str | None:
        """Why `value` is not a legal value of this kind, or None."""
        if self.names:
            if value not in self.names:
                return f"= {value!r} is not one of {', '.join(self.names)}"
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            return f"= {value!r} is not an integer"
        if not self.lo <= value <= self.hi:
            return f"= {self.text(value)} is out of range {self.text(self.lo)}..{self.text(self.hi)}"
        return None

    def to_bits(self, value: FieldValue) -> int:
        """The raw bits of a legal value."""
        if self.names:
            return self.names.index(value)
        return value & ((1 << self.width) - 1)

    def from_bits(self, raw: int) -> FieldValue | None:
        """The value raw bits stand for (None: an enum index with no name); the range is checked by the caller."""
        if self.names:
            return self.names[raw] if raw < len(self.names) else None
        if self.signed and raw >> (self.width - 1):
            return raw - (1 << self.width)
        return raw

    def text(self, value: FieldValue) -> str:
        """Assembly spelling of a value."""
        if isinstance(value, str):
            return value
        return (f"-{-value:#x}" if value < 0 else f"{value:#x}") if self.hex else str(value)

    def parse(self, text: str) -> FieldValue:
        """The value an assembly spelling stands for (a name or an integer literal); raises ValueError."""
        return text if self.names else int(text, 0)

    def legal_text(self) -> str:
        """The legal values, for the reference page."""
        return " / ".join(f"{i}={n}" for i, n in enumerate(self.names)) if self.names \
            else f"{self.text(self.lo)}..{self.text(self.hi)}"


def unsigned(name: str, width: int, doc: str, lo: int = 0, hi: int | None = None, hex: bool = False) -> FieldKind:
    return FieldKind(name, width, lo, (1 << width) - 1 if hi is None else hi, doc, hex=hex)


def signed(name: str, width: int, doc: str, lo: int | None = None, hi: int | None = None) -> FieldKind:
    half = 1 << (width - 1)
    return FieldKind(name, width, -half if lo is None else lo, half - 1 if hi is None else hi, doc, signed=True)


def symbolic(name: str, names: Sequence[str], doc: str) -> FieldKind:
    width = max(1, (len(names) - 1).bit_length())
    return FieldKind(name, width, 0, len(names) - 1, doc, names=tuple(names))


@dataclass(frozen=True)
class Field:
    """One field of one instruction: its name, bit position, kind and meaning."""

    name: str
    lsb: int
    kind: FieldKind
    doc: str

    @property
    def msb(self) -> int:
        return self.lsb + self.kind.width - 1


Check = Callable[[Mapping[str, FieldValue]], "str | None"]
"""A cross-field rule: returns why the field values are illegal together, or None."""


@dataclass(frozen=True)
class FromConfig:
    """A register whose reset value is a parameter of the architecture configuration."""

    parameter: str


@dataclass(frozen=True)
class InstrSpec:
    """A row of the ISA table: the encoding and documentation, and what the instruction does.

    `semantics`, `extents` and `timing` (see `isa.behaviour`) are required: a row without one of
    them raises IsaTableError as the table is imported, so no consumer meets an instruction it
    cannot execute, bound or time.
    """

    mnemonic: str
    opcode: int
    engine: Engine
    fields: tuple[Field, ...]
    doc: str
    family: str
    checks: tuple[Check, ...] = ()
    reset: tuple[tuple[str, FieldValue | FromConfig], ...] = ()
    """For a config instruction: each field is an engine register of that name, with this value at reset."""
    semantics: Semantics | None = dataclass_field(default=None, kw_only=True)
    """Its integer semantics on the machine state, returned as writes."""
    extents: ExtentRule | None = dataclass_field(default=None, kw_only=True)
    """Every memory region it reads and writes (none for control and configuration rows)."""
    timing: Timing | None = dataclass_field(default=None, kw_only=True)
    """Its cycles on its engine, or the DRAM transfer that decides them."""

    def __post_init__(self) -> None:
        missing = [name for name in ("semantics", "extents", "timing") if getattr(self, name) is None]
        if missing:
            raise IsaTableError(f"ISA table: {self.mnemonic}: no {' and no '.join(missing)} (every record carries its "
                                f"semantics, memory extents and timing)")

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)


# The common header. `opcode` selects the row; the other four are fields of every instruction.
SEM = unsigned("sem", 5, "semaphore number s0..s31 (must be below the configuration's `semaphores`)")
COUNT = unsigned("count", 3, "semaphore count 0..7; 0 means no wait (or no signal)")
OPCODE = Field("opcode", 0, unsigned("opcode", OPCODE_BITS, "instruction opcode; 0x00 is illegal", lo=1, hex=True),
               "selects the instruction")
SYNC_FIELDS: tuple[Field, ...] = (
    Field("wait_sem", 6, SEM, "semaphore to wait on before starting"),
    Field("wait_count", 11, COUNT, "wait until wait_sem >= wait_count, then subtract wait_count"),
    Field("signal_sem", 14, SEM, "semaphore to signal after completing"),
    Field("signal_count", 19, COUNT, "add signal_count to signal_sem on completion"),
)
HEADER_BITS = 22


def check_sync(values: Mapping[str, FieldValue]) -> str | None:
    """A zero count takes no semaphore: its number must be 0 too, so every instruction has one spelling."""
    for what in ("wait", "signal"):
        if values[f"{what}_count"] == 0 and values[f"{what}_sem"] != 0:
            return f"{what}_sem = {values[f'{what}_sem']} with {what}_count = 0 (must be 0 when nothing is {what}ed)"
    return None


def validate_table(specs: Sequence[InstrSpec]) -> None:
    """Raise IsaTableError on the first inconsistency of an ISA table."""
    seen_mnemonics: set[str] = set()
    seen_opcodes: dict[int, str] = {}
    registers: dict[tuple[Engine, str], str] = {}
    for spec in specs:
        where = f"ISA table: {spec.mnemonic}"
        if not spec.mnemonic.isidentifier() or spec.mnemonic != spec.mnemonic.upper():
            raise IsaTableError(f"{where}: mnemonic must be an upper-case identifier")
        if spec.mnemonic in seen_mnemonics:
            raise IsaTableError(f"{where}: mnemonic declared twice")
        seen_mnemonics.add(spec.mnemonic)
        if not 0 < spec.opcode < (1 << OPCODE_BITS):
            raise IsaTableError(f"{where}: opcode {spec.opcode:#x} does not fit 1..{(1 << OPCODE_BITS) - 1:#x}")
        if spec.opcode in seen_opcodes:
            raise IsaTableError(f"{where}: opcode {spec.opcode:#04x} already used by {seen_opcodes[spec.opcode]}")
        seen_opcodes[spec.opcode] = spec.mnemonic
        _validate_fields(where, (OPCODE, *SYNC_FIELDS, *spec.fields))
        _validate_reset(where, spec)
        for name, _ in spec.reset:
            owner = registers.setdefault((spec.engine, name), spec.mnemonic)
            if owner != spec.mnemonic:
                raise IsaTableError(f"{where}: register '{name}' of the {spec.engine.value} engine is already "
                                    f"set by {owner}")


def _validate_reset(where: str, spec: InstrSpec) -> None:
    """A config row gives every field a reset value its kind allows."""
    if not spec.reset:
        return
    if [name for name, _ in spec.reset] != [f.name for f in spec.fields]:
        raise IsaTableError(f"{where}: reset values must name every field, in order")
    for name, value in spec.reset:
        problem = None if isinstance(value, FromConfig) else spec.field(name).kind.problem(value)
        if problem:
            raise IsaTableError(f"{where}: reset value of '{name}' {problem}")


def _validate_fields(where: str, fields: Sequence[Field]) -> None:
    names: set[str] = set()
    for f in fields:
        kind = f.kind
        if f.name in names or not f.name.isidentifier():
            raise IsaTableError(f"{where}: field name '{f.name}' is duplicated or not an identifier")
        names.add(f.name)
        if f.lsb < 0 or f.msb >= INSTR_BITS:
            raise IsaTableError(f"{where}: field '{f.name}' (bits {f.lsb}..{f.msb}) does not fit in {INSTR_BITS} bits")
        half = 1 << (kind.width - 1)
        low, high = (-half, half - 1) if kind.signed else (0, 2 * half - 1)
        if not low <= kind.lo <= kind.hi <= high:
            raise IsaTableError(f"{where}: field '{f.name}' range {kind.lo}..{kind.hi} does not fit {kind.width} bits")
    ordered = sorted(fields, key=lambda f: f.lsb)
    for a, b in zip(ordered, ordered[1:]):
        if b.lsb <= a.msb:
            raise IsaTableError(f"{where}: field '{b.name}' (bits {b.lsb}..{b.msb}) overlaps "
                                f"'{a.name}' (bits {a.lsb}..{a.msb})")
