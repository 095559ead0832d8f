"""Every memory-touching row of the ISA table: its semantics stay inside its own memory extents.

Checked mode's race detector (`sim.races`) sees an instruction only through its record's `extents`, so an
element the semantics writes, or reads, outside them is a race it cannot report. For every row whose
semantics or extents are not the configuration no-ops, random legal instructions run on memories of
random contents: each field drawn over its kind from the field table, the engine's registers drawn the
same way through its configuration rows, and an instruction kept when the table's checks and
`check_program` accept it on a small machine. The test asserts that (a) every element the semantics
writes lies in a write extent, (b) what it writes is the same when every element outside its read
extents changes, and (c) the extents lie within the memories. Each memory is backed past its end, so an
access beyond it is caught rather than clipped by numpy. A row added to the table is covered as it is;
one the generator cannot build legal instances of (or of one of its variants: a space, a flag) fails.
"""
from __future__ import annotations

from dataclasses import dataclass, fields as dataclass_fields
from random import Random

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from isa import INSTRUCTIONS, PRESETS, Engine, Instr, IsaError, ProgramError, check_program, format_instr, make_instr
from isa.behaviour import ExecutionFault, Extent, Registers, Write, no_effect, no_extents
from isa.config import KiB, MiB
from isa.program import extents, with_registers
from isa.schema import FieldKind, FieldValue, InstrSpec

CONFIG = PRESETS["edge"].replace(name="small", scratchpad_bytes=16 * KiB, accumulator_bytes=16 * KiB, dram_bytes=MiB)
SIZES = {"dram": CONFIG.dram_bytes, "spad": CONFIG.scratchpad_bytes, "acc": CONFIG.accumulator_bytes // 4}
MEMORIES = tuple(SIZES)
GUARD = 4096
"""Elements backed past the end of each memory (of DRAM: past the highest address an extent reaches)."""
MEMORY_ROWS = [s for s in INSTRUCTIONS if s.semantics is not no_effect or s.extents is not no_extents]
CONFIG_ROWS = {engine: [s for s in INSTRUCTIONS if s.engine is engine and s.reset] for engine in Engine}
END = make_instr("END")
ATTEMPTS = 40
"""Draws of one instruction (or of memory contents) before the example is rejected."""
SIZE_BITS = range(4, 13)
"""Field values are mostly below 2^bits, bits from this range: drawn per example, one less at each new attempt."""
PALETTES = (None, (-2, 2), (0, 3), (0, 0), (1, 1))
"""Value ranges of memory contents: the element type's whole range, or small values, among which every
instruction finds contents it does not fault on (indices inside a table, nonzero divisors, requantize
entries with M >= 0)."""


def field_value(rng: Random, kind: FieldKind, bits: int) -> FieldValue:
    """A legal value of `kind`: mostly of magnitude below 2^bits, so that the extents fit a small machine, and
    often round (whole words, aligned sizes); now and then anything in the kind's range."""
    if kind.names:
        return rng.choice(kind.names)
    limit = min(bits, kind.width)
    width = rng.randint(0, limit + 1)
    if width > limit:
        return rng.randint(kind.lo, kind.hi)
    zeros = rng.randint(0, width)
    top = (1 << (width - zeros)) - 1
    magnitude = rng.randint(-top if kind.signed else 0, top) << zeros
    return min(max(magnitude, kind.lo), kind.hi)


def two_valued(kind: FieldKind) -> bool:
    """A space, a flag, an op: a choice between variants of the instruction rather than a size."""
    return kind.hi - kind.lo == 1


def values(kind: FieldKind) -> tuple[FieldValue, ...]:
    """The two values of a two-valued kind."""
    return kind.names or (kind.lo, kind.hi)


def instruction(rng: Random, spec: InstrSpec, bits: int, variant: dict[tuple[str, str], FieldValue]) -> Instr | None:
    """The row with the `variant`'s two-valued fields and every other field drawn over its kind, drawn again
    until the row's cross-field checks accept them (None if they never do)."""
    for _ in range(ATTEMPTS):
        try:
            return make_instr(spec.mnemonic, **{f.name: variant[spec.mnemonic, f.name] if two_valued(f.kind)
                                                else field_value(rng, f.kind, bits) for f in spec.fields})
        except IsaError:
            continue
    return None


@dataclass(frozen=True)
class Case:
    """An instruction, the registers it executes with and its extents; `program` sets the registers."""

    program: tuple[Instr, ...]
    registers: Registers
    extents: tuple[Extent, ...]

    @property
    def instr(self) -> Instr:
        return self.program[-1]

    def __str__(self) -> str:
        return "; ".join(format_instr(i) for i in self.program)


def random_case(rng: Random, spec: InstrSpec) -> Case | None:
    """A legal instruction of `spec` after its engine's configuration rows (any register values, the reset
    values among them) that `check_program` accepts on the small machine; None if none was found.

    The variant (the two-valued fields of the row and of the registers) is drawn once and the sizes again,
    smaller, until they fit: a variant that rarely fits (a LOAD into the accumulator needs whole words) is
    then as likely as any other."""
    rows = (*CONFIG_ROWS[spec.engine], spec)
    variant = {(row.mnemonic, f.name): rng.choice(values(f.kind))
               for row in rows for f in row.fields if two_valued(f.kind)}
    scale = rng.choice(SIZE_BITS)
    for attempt in range(ATTEMPTS):
        bits = max(SIZE_BITS[0], scale - attempt)
        program = [instruction(rng, row, bits, variant) for row in rows]
        if None in program:
            return None
        try:
            check_program([*program, END], CONFIG)
        except ProgramError:
            continue
        *_, (instr, registers) = with_registers(program, CONFIG)
        return Case(tuple(program), registers, tuple(extents(instr, registers)))
    return None


@dataclass
class State:
    """The machine state semantics act on (`isa.behaviour.State`), every memory backed past its end."""

    dram: np.ndarray
    spad: np.ndarray
    acc: np.ndarray
    lut: np.ndarray

    def arrays(self) -> dict[str, np.ndarray]:
        return {f.name: getattr(self, f.name) for f in dataclass_fields(self)}

    def snapshot(self) -> dict[str, np.ndarray]:
        return {name: array.copy() for name, array in self.arrays().items()}

    def restore(self, saved: dict[str, np.ndarray]) -> None:
        """Back to `saved`, in the same arrays (writes hold views of them)."""
        for name, array in self.arrays().items():
            np.copyto(array, saved[name])


def random_state(rng: np.random.Generator, dram_backing: int, palettes: dict[str, tuple[int, int] | None]) -> State:
    """Memories (and the LUT) of random contents, each memory's values from its palette."""
    def fill(dtype: type, size: int, palette: tuple[int, int] | None) -> np.ndarray:
        if palette is None:
            return rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, size, dtype, endpoint=True)
        return rng.integers(*palette, size, np.int64, endpoint=True).astype(dtype)

    return State(fill(np.uint8, dram_backing, palettes["dram"]), fill(np.int8, SIZES["spad"] + GUARD, palettes["spad"]),
                 fill(np.int32, SIZES["acc"] + GUARD, palettes["acc"]), fill(np.int8, 256, None))


def scrambled(rng: np.random.Generator, state: State, keep: dict[str, np.ndarray]) -> State:
    """A copy of `state` with every memory element outside `keep` changed (the LUT kept)."""
    arrays = state.snapshot()
    for memory in MEMORIES:
        bits = arrays[memory].view(f"u{arrays[memory].itemsize}")
        flips = rng.integers(1, np.iinfo(bits.dtype).max, bits.size, bits.dtype, endpoint=True)
        bits[~keep[memory]] ^= flips[~keep[memory]]
    return State(**arrays)


def execute(spec: InstrSpec, case: Case, state: State) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Run the semantics on `state` (left as it was): per array, the elements its writes cover, and the
    arrays after the writes."""
    before = state.snapshot()
    writes = spec.semantics(state, case.instr, case.registers)
    changed = [name for name, array in state.arrays().items() if not np.array_equal(array, before[name])]
    assert not changed, f"{case}: the semantics changed {changed} itself instead of returning writes"
    # Values that alias a memory would change with whatever lands there before the instruction completes.
    shared = [w for w in writes for array in state.arrays().values() if np.may_share_memory(w.values, array)]
    assert not shared, f"{case}: a write's values are a view of the memories, not read as the instruction starts"
    marked = []
    for mark in (np.zeros_like, lambda values: ~np.zeros_like(values)):
        for w in writes:
            Write(w.target, w.key, mark(w.values)).commit()
        marked.append(state.snapshot())
        state.restore(before)
    for w in writes:
        w.commit()
    after = state.snapshot()
    state.restore(before)
    return {name: marked[0][name] != marked[1][name] for name in marked[0]}, after


def covered(found: tuple[Extent, ...], state: State, write: bool) -> dict[str, np.ndarray]:
    """Per memory, the elements inside the extents that read (or write)."""
    masks = {memory: np.zeros(getattr(state, memory).size, bool) for memory in MEMORIES}
    for e in found:
        if e.write == write:
            masks[e.memory][e.start:e.stop] = True
    return masks


def addresses(mask: np.ndarray) -> str:
    """Where a failure is, in its message: how many elements, and the first."""
    at = np.flatnonzero(mask)
    return f"{at.size} elements from {at[0]:#x}" if at.size else "none"


def examples(spec: InstrSpec) -> int:
    """More examples for rows with more fields; their own count thrice, their engine's registers once (a row
    reads few of them)."""
    return 8 + 3 * len(spec.fields) + sum(len(c.fields) for c in CONFIG_ROWS[spec.engine])


def variants(spec: InstrSpec) -> set[tuple[str, FieldValue]]:
    """Every value of each two-valued field (a space, a flag, an op) of the row and its engine's registers."""
    return {(f.name, v) for row in (spec, *CONFIG_ROWS[spec.engine]) for f in row.fields
            if two_valued(f.kind) for v in values(f.kind)}


def check(spec: InstrSpec, case: Case, rng: np.random.Generator) -> bool:
    """Assert (a), (b) and (c) on random memory contents; False if the instruction faulted on every one tried."""
    for e in case.extents:
        assert e.memory in SIZES and 0 <= e.start < e.stop <= SIZES[e.memory], f"{case}: {e} is outside its memory"
    dram_backing = max([0] + [e.stop for e in case.extents if e.memory == "dram"]) + GUARD
    for _ in range(ATTEMPTS):
        palettes = {memory: PALETTES[rng.integers(len(PALETTES))] for memory in MEMORIES}
        state = random_state(rng, dram_backing, palettes)
        try:
            written, after = execute(spec, case, state)
            break
        except ExecutionFault:
            continue  # contents this instruction does not accept (an index outside its table, a zero divisor)
    else:
        return False
    # (a) Every element written lies in a write extent.
    allowed = covered(case.extents, state, write=True)
    for memory in MEMORIES:
        stray = written[memory] & ~allowed[memory]
        assert not stray.any(), f"{case}: writes {memory} outside its write extents: {addresses(stray)}"
    # (b) What it writes depends only on the elements inside its read extents.
    reads = covered(case.extents, state, write=False)
    try:
        written_again, after_again = execute(spec, case, scrambled(rng, state, reads))
    except ExecutionFault as exc:
        raise AssertionError(f"{case}: faults once the elements outside its read extents change ({exc})") from None
    for name, mask in written.items():
        assert np.array_equal(written_again[name], mask), f"{case}: what it writes in {name} depends on unread data"
        differ = np.zeros_like(mask)
        differ[mask] = after[name][mask] != after_again[name][mask]
        assert not differ.any(), (f"{case}: reads outside its read extents: what it writes to {name} at "
                                  f"{addresses(differ)} changes with elements outside them")
    return True


@pytest.mark.parametrize("spec", MEMORY_ROWS, ids=lambda s: s.mnemonic)
def test_semantics_stay_inside_their_extents(spec):
    seen: set[tuple[str, FieldValue]] = set()

    @settings(max_examples=examples(spec), deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(rng=st.randoms(use_true_random=True))
    def run(rng: Random) -> None:
        case = random_case(rng, spec)
        assume(case is not None and check(spec, case, np.random.default_rng(rng.getrandbits(64))))
        seen.update(case.instr.fields().items(), case.registers.items())

    run()
    missing = variants(spec) - seen
    assert not missing, f"{spec.mnemonic}: never generated {sorted(missing)}: the generator cannot build them"
