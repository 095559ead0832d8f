"""Instruction records and their 16-byte encoding, derived from the ISA table alone.

An `Instr` is immutable and always legal: building one checks every field
against its kind and the row's cross-field rules. `encode` packs its fields at
their bit positions into a 128-bit little-endian word; `decode` unpacks one,
rejecting an illegal opcode, a field out of range and set reserved bits with a
message naming the instruction index, its byte offset and the field.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from .errors import DecodeError, IsaError
from .schema import INSTR_BITS, INSTR_BYTES, OPCODE, SYNC_FIELDS, Field, FieldKind, FieldValue, InstrSpec, check_sync
from .table import BY_MNEMONIC, BY_OPCODE


@dataclass(frozen=True)
class _Layout:
    """Per-row precomputation: field order, name -> position, the mask of bits in use."""

    spec: InstrSpec
    fields: tuple[Field, ...]
    index: dict[str, int]
    used_bits: int
    slots: tuple[tuple[int, int, FieldKind], ...]
    """(lsb, mask, kind) of each field, for the decoder's inner loop."""


def _layout(spec: InstrSpec) -> _Layout:
    fields = (*spec.fields, *SYNC_FIELDS)
    used = 0
    for f in (OPCODE, *fields):
        used |= ((1 << f.kind.width) - 1) << f.lsb
    slots = tuple((f.lsb, (1 << f.kind.width) - 1, f.kind) for f in fields)
    return _Layout(spec, fields, {f.name: i for i, f in enumerate(fields)}, used, slots)


_LAYOUTS: dict[str, _Layout] = {m: _layout(s) for m, s in BY_MNEMONIC.items()}
_SYNC_NAMES = tuple(f.name for f in SYNC_FIELDS)


def _problem(layout: _Layout, values: tuple[FieldValue, ...]) -> str | None:
    """Why these field values do not form a legal instruction, or None."""
    for f, value in zip(layout.fields, values):
        kind = f.kind
        if type(value) is int and not kind.names and kind.lo <= value <= kind.hi:
            continue  # the common case, decided without building a message
        problem = kind.problem(value)
        if problem:
            return f"field '{f.name}' {problem}"
    checks = layout.spec.checks
    wait_sem, wait_count, signal_sem, signal_count = values[-4:]
    if (wait_sem and not wait_count) or (signal_sem and not signal_count):
        checks = (check_sync, *checks)  # only then can the sync rule fail
    if not checks:
        return None
    named = dict(zip(layout.index, values))
    for check in checks:
        problem = check(named)
        if problem:
            return problem
    return None


@dataclass(frozen=True)
class Instr:
    """One NPU instruction: its mnemonic and the values of its fields (body fields, then the sync fields).

    Fields read as attributes (`instr.rows`, `instr.wait_sem`); symbolic fields hold their names
    (`instr.space == "acc"`).
    """

    mnemonic: str
    values: tuple[FieldValue, ...]

    def __post_init__(self) -> None:
        layout = _LAYOUTS.get(self.mnemonic)
        if layout is None:
            raise IsaError(f"unknown instruction '{self.mnemonic}'")
        if len(self.values) != len(layout.fields):
            raise IsaError(f"{self.mnemonic}: expected {len(layout.fields)} field values, got {len(self.values)}")
        problem = _problem(layout, self.values)
        if problem:
            raise IsaError(f"{self.mnemonic}: {problem}")

    def __getattr__(self, name: str) -> FieldValue:
        if name.startswith("_") or name in ("mnemonic", "values"):
            raise AttributeError(name)
        index = _LAYOUTS[self.mnemonic].index.get(name)
        if index is None:
            raise AttributeError(f"{self.mnemonic} has no field '{name}'")
        return self.values[index]

    @property
    def spec(self) -> InstrSpec:
        return _LAYOUTS[self.mnemonic].spec

    def fields(self) -> dict[str, FieldValue]:
        """Field name -> value, body fields first, then wait_sem, wait_count, signal_sem, signal_count."""
        return dict(zip(_LAYOUTS[self.mnemonic].index, self.values))

    def replace(self, **changes: FieldValue) -> Instr:
        """A copy with some fields changed (checked again)."""
        return make_instr(self.mnemonic, **{**self.fields(), **changes})

    def __repr__(self) -> str:
        body = ", ".join(f"{k}={v!r}" for k, v in self.fields().items())
        return f"Instr({self.mnemonic}: {body})"


def make_instr(mnemonic: str, **fields: Any) -> Instr:
    """Build an instruction by field name; the sync fields default to 0 (no wait, no signal)."""
    layout = _LAYOUTS.get(mnemonic)
    if layout is None:
        raise IsaError(f"unknown instruction '{mnemonic}'")
    unknown = sorted(set(fields) - set(layout.index))
    if unknown:
        raise IsaError(f"{mnemonic}: unknown field '{unknown[0]}' (fields: {', '.join(layout.index)})")
    values = []
    for f in layout.fields:
        if f.name in fields:
            values.append(fields[f.name])
        elif f.name in _SYNC_NAMES:
            values.append(0)
        else:
            raise IsaError(f"{mnemonic}: missing field '{f.name}'")
    return Instr(mnemonic, tuple(values))


def encode(instr: Instr) -> bytes:
    """The 16 bytes of one instruction."""
    layout = _LAYOUTS[instr.mnemonic]
    word = layout.spec.opcode
    for f, value in zip(layout.fields, instr.values):
        word |= f.kind.to_bits(value) << f.lsb
    return word.to_bytes(INSTR_BYTES, "little")


def decode(data: bytes, index: int = 0) -> Instr:
    """The instruction in exactly 16 bytes; `index` (its position in the program) names it in errors."""
    where = f"instruction {index} at byte {index * INSTR_BYTES}"
    if len(data) != INSTR_BYTES:
        raise DecodeError(f"{where}: expected {INSTR_BYTES} bytes, got {len(data)}")
    word = int.from_bytes(data, "little")
    opcode = word & ((1 << OPCODE.kind.width) - 1)
    spec = BY_OPCODE.get(opcode)
    if spec is None:
        raise DecodeError(f"{where}: illegal opcode {opcode:#04x}")
    layout = _LAYOUTS[spec.mnemonic]
    stray = word & ~layout.used_bits & ((1 << INSTR_BITS) - 1)
    if stray:
        bit = (stray & -stray).bit_length() - 1
        raise DecodeError(f"{where}: {spec.mnemonic}: reserved bit {bit} is set (reserved bits must be zero)")
    values = []
    for lsb, mask, kind in layout.slots:
        raw = (word >> lsb) & mask
        value = kind.from_bits(raw) if kind.names or kind.signed else raw
        if value is None:
            name = layout.fields[len(values)].name
            raise DecodeError(f"{where}: {spec.mnemonic}: field '{name}' = {raw} is not a legal encoding "
                              f"({kind.legal_text()})")
        values.append(value)
    try:
        return Instr(spec.mnemonic, tuple(values))
    except IsaError as exc:
        raise DecodeError(f"{where}: {exc}") from None


def encode_program(instrs: Iterable[Instr]) -> bytes:
    """The instruction stream: each instruction's 16 bytes, in program order."""
    return b"".join(encode(i) for i in instrs)


def iter_decode(data: bytes) -> Iterator[Instr]:
    """Decode an instruction stream lazily, in program order."""
    if len(data) % INSTR_BYTES:
        whole = len(data) // INSTR_BYTES
        raise DecodeError(f"instruction stream of {len(data)} bytes is not a whole number of {INSTR_BYTES}-byte "
                          f"instructions ({len(data) - whole * INSTR_BYTES} bytes left over at byte "
                          f"{whole * INSTR_BYTES})")
    for index in range(len(data) // INSTR_BYTES):
        yield decode(data[index * INSTR_BYTES:(index + 1) * INSTR_BYTES], index)


def decode_program(data: bytes) -> list[Instr]:
    """Decode a whole instruction stream, stopping at the first illegal instruction."""
    return list(iter_decode(data))
