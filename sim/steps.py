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

from isa.behaviour import Semantics, Transfer
from isa.config import ArchConfig
from isa.encoding import Instr
from isa.program import Extent, ProgramError, Registers, extents, with_registers
from isa.schema import Engine
from isa.sections import DebugRange

from .errors import SimInputError
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
    transfer: Transfer | None
    """The DRAM side of a LOAD, GATHER or STORE."""
    pad_bytes: int
    """SRAM bytes a LOAD writes as padding, without DRAM requests (0 when a static fault stops it)."""
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
        if self.transfer is None:
            return 0
        box = self.transfer.box
        return box.planes * box.rows * box.cols * box.elem


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
        spec = instr.spec
        transfer = spec.timing.transfer(instr, registers, config) if spec.timing.transfer else None
        steps.append(Step(index, instr, spec.engine, registers, found, problem, cycles, spec.semantics,
                          macs(instr), transfer, transfer.pad_bytes if transfer and not problem else 0, names[index],
                          (instr.wait_sem, instr.wait_count), (instr.signal_sem, instr.signal_count)))
    return steps
