"""The static view the simulator runs from: every instruction with what is known before it runs.

Each engine executes its queue in program order, so the registers an instruction sees, the memory
it touches, its semantics and (except for DRAM transfers) its cycles are all fixed by the program.
`prepare` works them out once; the engines then only wait, execute and time. A static fault (an
im2col `k` that does not fit the window, an accumulator transfer of odd element size, an empty
POOL) is kept with the instruction and raised when the machine reaches it, as hardware would.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from isa.config import ArchConfig
from isa.encoding import Instr
from isa.program import Extent, ProgramError, Registers, extents, with_registers
from isa.schema import Engine
from isa.sections import DebugRange

from .dram import Box
from .errors import SimInputError
from .semantics import Semantics, semantics_of
from .timing import macs, static_cycles

ENGINES = (Engine.LOAD, Engine.STORE, Engine.MATRIX, Engine.VECTOR)
"""The four engines with instruction queues; the dispatcher runs Engine.CONTROL itself."""


@dataclass(eq=False)
class Step:
    """One instruction as the simulator runs it."""

    index: int
    instr: Instr
    engine: Engine
    registers: Registers
    extents: list[Extent]
    problem: str | None
    """A static fault the machine raises when it reaches this instruction."""
    cycles: int | None
    """Cycles on its engine; None for LOAD and STORE, which the DRAM times."""
    semantics: Semantics
    macs: int
    box: Box | None
    """The DRAM side of a LOAD or STORE."""
    pad_bytes: int
    """SRAM bytes a LOAD writes as padding, without DRAM requests."""
    layer: str | None
    wait: tuple[int, int]
    """(semaphore, count) the instruction waits for; count 0 is no wait."""
    signal: tuple[int, int]
    """(semaphore, count) it signals on completion; count 0 is no signal."""

    @property
    def mnemonic(self) -> str:
        return self.instr.mnemonic

    @property
    def dram_bytes(self) -> int:
        return self.box.planes * self.box.rows * self.box.cols * self.box.elem if self.box else 0


def _box(instr: Instr, r: Registers, config: ArchConfig) -> Box:
    if instr.mnemonic == "GATHER":  # N runs of E bytes, spaced so that no two merge into one request
        burst = config.dma_burst_bytes
        apart = (-(-r["elem_bytes"] // burst) + 1) * burst
        return Box(instr.dram, 1, instr.count, 1, 0, apart, 0, r["elem_bytes"])
    return Box(instr.dram, instr.planes, instr.rows, instr.cols, r["plane_stride"], r["row_stride"],
               r["col_stride"], r["elem_bytes"])


def _pad_bytes(instr: Instr, r: Registers) -> int:
    if instr.mnemonic != "LOAD":
        return 0
    height = r["pad_top"] + instr.rows + r["pad_bottom"]
    width = r["pad_left"] + instr.cols + r["pad_right"]
    return instr.planes * (height * width - instr.rows * instr.cols) * r["elem_bytes"]


def layer_names(count: int, layers: Sequence[DebugRange]) -> list[str | None]:
    """The layer of each of `count` instructions (None outside every debug range)."""
    names: list[str | None] = [None] * count
    for layer in layers:
        names[layer.start:layer.stop] = [layer.name] * (min(layer.stop, count) - layer.start)
    return names


def _semaphore_problem(instr: Instr, config: ArchConfig) -> str | None:
    for what in ("wait", "signal"):
        sem = getattr(instr, f"{what}_sem")
        if getattr(instr, f"{what}_count") and sem >= config.semaphores:
            return f"{what} on s{sem}, but architecture '{config.name}' has {config.semaphores} semaphores"
    return None


def prepare(program: Sequence[Instr], config: ArchConfig, layers: Sequence[DebugRange] = (),
            array_model: str = "closed") -> list[Step]:
    """Every instruction with its registers, extents, semantics, static cycles, work and layer.

    The program must end with its only END (the dispatcher stops fetching there).
    """
    ends = [i for i, instr in enumerate(program) if instr.mnemonic == "END"]
    if ends != [len(program) - 1]:
        where = f"instruction {ends[0]} is an END before the last" if ends else "it has no END"
        raise SimInputError(f"the program must end with its only END instruction ({where})")
    names = layer_names(len(program), layers)
    steps = []
    for index, (instr, registers) in enumerate(with_registers(program, config)):
        problem, cycles, found = _semaphore_problem(instr, config), None, []
        try:
            found = extents(instr, registers)
            cycles = static_cycles(instr, registers, config, array_model)
        except ProgramError as err:
            problem = problem or str(err)
        dma = instr.spec.family == "dma"
        steps.append(Step(index, instr, instr.spec.engine, registers, found, problem, cycles, semantics_of(instr),
                          macs(instr), _box(instr, registers, config) if dma else None,
                          _pad_bytes(instr, registers) if dma and not problem else 0, names[index],
                          (instr.wait_sem, instr.wait_count), (instr.signal_sem, instr.signal_count)))
    return steps
