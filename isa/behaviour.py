"""The vocabulary of what an instruction does, so that its ISA record can carry it.

Every row of the ISA table carries three rules beside its encoding, each a plain function of the
instruction and the registers its engine executes it with (`Registers`, known statically):

- `semantics(state, instr, registers) -> [Write]`: its integer semantics on the machine `State`
  (the memories and the vector LUT), read when it starts and returned as writes for the executor
  to commit when it completes;
- `extents(instr, registers) -> [Extent]`: every region it reads and writes (the loader's bounds
  check and checked mode's race detector), or a `ProgramError` for a static fault;
- `timing`: a `Timing`, its cycles on its engine or the DRAM transfer that decides them.

The rules live in `isa/families/` by instruction family and depend on `isa` alone; `sim` only
executes them, so adding an instruction is its record plus its tests.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import EllipsisType
from typing import TYPE_CHECKING, Callable, Protocol

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .errors import IsaError
from .schema import FieldValue

if TYPE_CHECKING:
    from .config import ArchConfig
    from .encoding import Instr

Registers = dict[str, FieldValue]
"""An engine's configuration registers by name, as an instruction sees them."""


class ProgramError(IsaError):
    """A decoded program that cannot run on the configured machine; names the instruction.

    `index` is the offending instruction's position when there is one (a container
    reader turns it into a byte offset).
    """

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class ExecutionFault(Exception):
    """A fault only execution can find (a bad per-channel requantize entry); the engine names the instruction."""


@dataclass(frozen=True)
class Extent:
    """Addresses start..stop-1 of one memory ('dram', 'spad' bytes; 'acc' words) read or written."""

    memory: str
    start: int
    stop: int
    write: bool

    def __str__(self) -> str:
        unit = "words" if self.memory == "acc" else "bytes"
        return f"{'writes' if self.write else 'reads'} {self.memory} {unit} {self.start:#x}..{self.stop - 1:#x}"


class State(Protocol):
    """The machine state semantics act on: DRAM bytes (uint8), the int8 scratchpad, the int32 accumulator
    and the vector engine's 256-entry int8 LUT."""

    dram: np.ndarray
    spad: np.ndarray
    acc: np.ndarray
    lut: np.ndarray


@dataclass(frozen=True, slots=True)
class Write:
    """Results an instruction stores when it completes: `target[key] = values` (`values` a fresh array)."""

    target: np.ndarray
    key: slice | np.ndarray | EllipsisType
    values: np.ndarray

    def commit(self) -> None:
        self.target[self.key] = self.values


@dataclass(frozen=True)
class Box:
    """The DRAM side of one transfer: planes x rows x cols elements of `elem` bytes."""

    address: int
    planes: int
    rows: int
    cols: int
    plane_stride: int
    row_stride: int
    col_stride: int
    elem: int


@dataclass(frozen=True)
class Transfer:
    """A DMA instruction as the DRAM times it: its box, the SRAM bytes it writes as padding (no DRAM
    requests) and its direction."""

    box: Box
    pad_bytes: int
    into_dram: bool


Semantics = Callable[[State, "Instr", Registers], list[Write]]
ExtentRule = Callable[["Instr", Registers], list[Extent]]
CycleRule = Callable[["Instr", Registers, "ArchConfig", str], int]
"""Cycles on the engine, given the matrix engine's timing model (`isa.families.matrix.ARRAY_MODELS`)."""
WorkRule = Callable[["Instr", Registers], int]
TransferRule = Callable[["Instr", Registers, "ArchConfig"], Transfer]


@dataclass(frozen=True)
class Timing:
    """How long an instruction holds its engine: `cycles`, or for a DMA the DRAM `transfer` that decides
    it. `work` is a vector instruction's lane operations (the cycles and the energy follow from it),
    `multiplies` whether each is a 32-bit multiply; `macs` a matrix instruction's multiply-accumulates."""

    cycles: CycleRule | None = None
    transfer: TransferRule | None = None
    work: WorkRule | None = None
    multiplies: bool = False
    macs: Callable[["Instr"], int] | None = None

    def __post_init__(self) -> None:
        if (self.cycles is None) == (self.transfer is None):
            raise TypeError("a Timing has either engine cycles or a DRAM transfer")


def vector_cycles(work: int, config: ArchConfig) -> int:
    """Pipeline fill plus `work` elements over the lanes."""
    return config.vector_pipeline_cycles + -(-work // config.vector_lanes)


ONE_CYCLE = Timing(cycles=lambda i, r, config, array_model: 1)
"""Control and configuration instructions: one cycle of their engine."""


def lanes(work: WorkRule, multiplies: bool = False) -> Timing:
    """A vector-engine instruction: its `work` lane operations after the pipeline fill."""
    return Timing(cycles=lambda i, r, config, array_model: vector_cycles(work(i, r), config), work=work,
                  multiplies=multiplies)


def dram(transfer: TransferRule) -> Timing:
    """A DMA instruction: its DRAM requests decide its time (`sim.dram`)."""
    return Timing(transfer=transfer)


def no_effect(state: State, i: Instr, r: Registers) -> list[Write]:
    """Control and configuration instructions: their effect is on registers, known statically."""
    return []


def no_extents(i: Instr, r: Registers) -> list[Extent]:
    """Control and configuration instructions touch no memory."""
    return []


def sram(state: State, space: FieldValue) -> np.ndarray:
    """The scratchpad (int8 per byte) or the accumulator (int32 per word)."""
    return state.spad if space == "spad" else state.acc


def read(state: State, space: FieldValue, start: int, count: int) -> np.ndarray:
    """`count` elements of an SRAM as int64 (sign-extended), a copy."""
    return sram(state, space)[start:start + count].astype(np.int64)


def write_to(target: np.ndarray, start: int, values: np.ndarray) -> list[Write]:
    """One write of `values` (flattened) at element `start` of a memory."""
    values = values.ravel()
    return [Write(target, slice(start, start + values.size), values)]


def strided(base: np.ndarray, start: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """A read-only element-strided view; the caller has checked every address it reaches is in `base`."""
    view = base[start:]
    return as_strided(view, shape, tuple(s * base.itemsize for s in strides), writeable=False)


def sram_extent(space: FieldValue, start: int, elements: int, write: bool) -> Extent:
    """`elements` consecutive elements of the scratchpad or the accumulator."""
    return Extent(str(space), start, start + elements, write)
