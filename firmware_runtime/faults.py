"""Fault injection: make one run of a device fail for real, by what its simulator then detects.

Nothing is faked: the program handed to the simulator is changed so that the machine itself
faults. OUT_OF_BOUNDS points the LOAD nearest the middle of the program past the end of DRAM (the
run faults mid-request, at that instruction); DEADLOCK makes END wait on a semaphore no instruction
signals (every unit ends up waiting); TIMEOUT sets the watchdog below the run's length.
"""
from __future__ import annotations

from dataclasses import dataclass

from isa.config import ArchConfig
from isa.encoding import Instr

from .errors import ErrorKind, FirmwareError

INJECTABLE = (ErrorKind.OUT_OF_BOUNDS, ErrorKind.DEADLOCK, ErrorKind.TIMEOUT)
_PAST_DRAM = 0xFFFF_FFFF
"""The last 32-bit DRAM address: a box starting there ends past every configurable DRAM (at most 4 GiB)."""


@dataclass(frozen=True)
class Injection:
    """One armed fault: the kind of error the next run will hit."""

    kind: ErrorKind

    def __post_init__(self) -> None:
        if self.kind not in INJECTABLE:
            raise FirmwareError(f"cannot inject a {self.kind.value} error (injectable: "
                                f"{', '.join(k.value for k in INJECTABLE)})")


def inject(injection: Injection, program: list[Instr], config: ArchConfig,
           watchdog: int | None) -> tuple[list[Instr], int | None]:
    """The program and watchdog a run with `injection` uses."""
    program = list(program)
    if injection.kind is ErrorKind.TIMEOUT:
        return program, 1
    if injection.kind is ErrorKind.OUT_OF_BOUNDS:
        loads = [i for i, instr in enumerate(program) if instr.mnemonic == "LOAD"]
        if not loads:
            raise FirmwareError("cannot inject out-of-bounds: the program has no LOAD")
        at = min(loads, key=lambda i: abs(i - len(program) // 2))
        program[at] = program[at].replace(dram=_PAST_DRAM)
        return program, watchdog
    signalled = {instr.signal_sem for instr in program if instr.signal_count}
    idle = next((s for s in range(config.semaphores) if s not in signalled), None)
    if idle is None:
        raise FirmwareError("cannot inject a deadlock: every semaphore is signalled")
    program[-1] = program[-1].replace(wait_sem=idle, wait_count=1)
    return program, watchdog
