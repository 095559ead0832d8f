"""A static view of a program: the registers each instruction sees and the memory it touches.

Each engine runs its queue in program order, so the configuration registers an
instruction executes with are known before anything runs. From them follow the
exact bounds of every region an instruction reads or writes (`extents`), which
lets a loader reject a binary whose instructions leave the SRAMs, DRAM or the
memory plan, and `check_program` the whole-program rules (one END, last;
semaphores the machine has; regions inside memories; static faults).
`semaphore_protocol` pairs every wait with the signals whose tokens it takes,
by program order and counts: the happens-before the program declares.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Iterable, Iterator

from .behaviour import Extent, ProgramError, Registers
from .config import ArchConfig, format_size
from .encoding import Instr
from .families.vector import LUT_BYTES, WIDE_LUT_BYTES
from .schema import Engine, FromConfig
from .table import INSTRUCTIONS

# Extent, ProgramError, Registers and the LUT sizes are defined with the records' rules and are part of this
# module's interface too: the program view is where the loader, the compiler and the simulator meet them.
__all__ = ["Extent", "LUT_BYTES", "ProgramError", "Registers", "SemaphoreProtocol", "WIDE_LUT_BYTES", "check_program",
           "extents", "program_extents", "reset_registers", "semaphore_protocol", "with_registers"]


def reset_registers(config: ArchConfig) -> dict[Engine, Registers]:
    """Every engine's configuration registers at program start."""
    registers: dict[Engine, Registers] = {engine: {} for engine in Engine}
    for spec in INSTRUCTIONS:
        for name, value in spec.reset:
            registers[spec.engine][name] = getattr(config, value.parameter) if isinstance(value, FromConfig) else value
    return registers


def with_registers(program: Iterable[Instr], config: ArchConfig) -> Iterator[tuple[Instr, Registers]]:
    """Each instruction with the registers of its engine as it executes (config instructions update them)."""
    registers = reset_registers(config)
    for instr in program:
        own = registers[instr.spec.engine]
        if instr.spec.reset:
            own = registers[instr.spec.engine] = {**own, **instr.fields()}
            for name in ("wait_sem", "wait_count", "signal_sem", "signal_count"):
                del own[name]
        yield instr, own


def extents(instr: Instr, registers: Registers) -> list[Extent]:
    """The regions an instruction reads and writes, given its engine's registers: its record's rule."""
    return instr.spec.extents(instr, registers)


def _where(index: int, instr: Instr) -> str:
    return f"instruction {index} ({instr.mnemonic})"


def program_extents(program: list[Instr], config: ArchConfig) -> list[list[Extent]]:
    """`extents` of every instruction, in program order; a ProgramError names the instruction of a static fault."""
    result = []
    for index, (instr, registers) in enumerate(with_registers(program, config)):
        try:
            result.append(extents(instr, registers))
        except ProgramError as exc:
            raise ProgramError(f"{_where(index, instr)}: {exc}", index) from None
    return result


def check_program(program: list[Instr], config: ArchConfig) -> None:
    """Reject a program this machine cannot run, naming the first offending instruction."""
    if not program or program[-1].mnemonic != "END":
        raise ProgramError(f"the program must end with END (it has {len(program)} instructions"
                           f"{', the last a ' + program[-1].mnemonic if program else ''})")
    sizes = {"dram": config.dram_bytes, "spad": config.scratchpad_bytes, "acc": config.accumulator_bytes // 4}
    for index, (instr, found) in enumerate(zip(program, program_extents(program, config))):
        if instr.mnemonic == "END" and index != len(program) - 1:
            raise ProgramError(f"{_where(index, instr)}: END before the last instruction ({len(program) - 1})",
                               index)
        for what in ("wait", "signal"):
            sem = getattr(instr, f"{what}_sem")
            if getattr(instr, f"{what}_count") and sem >= config.semaphores:
                raise ProgramError(f"{_where(index, instr)}: {what} on s{sem}, but architecture '{config.name}' "
                                   f"has {config.semaphores} semaphores", index)
        for extent in found:
            if extent.stop > sizes[extent.memory]:
                size = sizes[extent.memory] * (4 if extent.memory == "acc" else 1)
                raise ProgramError(f"{_where(index, instr)}: {extent}, beyond the {format_size(size)} "
                                   f"{extent.memory} of architecture '{config.name}'", index)


@dataclass(frozen=True)
class SemaphoreProtocol:
    """How a program's semaphores pair signals with waits, each counter handing out its tokens in program
    order: the k-th wait on a semaphore takes the tokens after those of the waits before it.

    The pairing is what the program means; it is what every run does when the semaphore's signals cannot
    overtake one another and its waits cannot either, which `follows` and `previous_wait` state.
    """

    consumes: dict[int, tuple[int, ...]]
    """wait instruction -> the signalling instructions whose tokens it takes"""
    follows: dict[int, tuple[int, ...]]
    """signalling instruction -> per other engine, the latest earlier signal of the semaphore it must come
    after: were it first, a wait given that signal's tokens could take its tokens instead"""
    previous_wait: dict[int, int]
    """wait instruction -> the wait before it on its semaphore, when another engine makes that one"""


def semaphore_protocol(program: list[Instr]) -> SemaphoreProtocol:
    """Pair waits and signals per semaphore by program order and counts (tokens no wait takes stay unpaired)."""
    engines = [instr.spec.engine for instr in program]
    signals: dict[int, list[tuple[int, int]]] = {}  # semaphore -> (instruction, count) in program order
    waits: dict[int, list[tuple[int, int]]] = {}
    for index, instr in enumerate(program):
        wait_sem, wait_count, signal_sem, signal_count = instr.values[-4:]  # the sync fields come last
        if wait_count:
            waits.setdefault(wait_sem, []).append((index, wait_count))
        if signal_count:
            signals.setdefault(signal_sem, []).append((index, signal_count))
    consumes: dict[int, tuple[int, ...]] = {}
    follows: dict[int, tuple[int, ...]] = {}
    previous_wait: dict[int, int] = {}
    for sem in signals.keys() | waits.keys():
        waiting = waits.get(sem, [])
        ends, total = [], 0  # ends[k]: the tokens waits 0..k take
        for _, count in waiting:
            total += count
            ends.append(total)
        taken: list[list[int]] = [[] for _ in waiting]
        latest: dict[Engine, tuple[list[int], list[int]]] = {}  # engine -> (first waits, signals) so far
        start = 0
        for index, count in signals.get(sem, []):
            stop = start + count
            first, last = bisect_right(ends, start), bisect_right(ends, stop - 1)
            for k in range(first, min(last + 1, len(waiting))):
                taken[k].append(index)
            # The latest earlier signal of each other engine that feeds a wait before this signal's last.
            engine = engines[index]
            follows[index] = tuple(earlier[bisect_left(firsts, last) - 1] for other, (firsts, earlier) in latest.items()
                                   if other is not engine and bisect_left(firsts, last))
            firsts, earlier = latest.setdefault(engine, ([], []))
            firsts.append(first)
            earlier.append(index)
            start = stop
        consumes.update((index, tuple(t)) for (index, _), t in zip(waiting, taken))
        # Two waits on other engines could swap, unless one signal's tokens serve both (either order, same pairing).
        for (before, _), (index, _) in zip(waiting, waiting[1:]):
            if engines[before] is not engines[index] and (len(consumes[index]) != 1
                                                          or consumes[index] != consumes[before]):
                previous_wait[index] = before
    return SemaphoreProtocol(consumes, follows, previous_wait)
