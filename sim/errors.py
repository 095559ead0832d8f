"""What stops a simulation: machine faults, races and deadlock, each one line naming the instruction.

Every message says when (the cycle), which instruction (its index and mnemonic) and, when the
binary's debug table names one, the layer it belongs to, so a compiler writer can go straight
from the message to the code that emitted the instruction.
"""
from __future__ import annotations

from glowsdk.errors import GlowError


def describe(index: int, mnemonic: str, layer: str | None) -> str:
    """`instruction 7 (MATMUL, layer 'conv1')`: how every simulator message names an instruction."""
    return f"instruction {index} ({mnemonic}" + (f", layer '{layer}')" if layer else ")")


class SimError(GlowError):
    """A simulation stopped; `index` is the instruction it names first, `cycle` when it happened.

    The message is the only positional argument, so the exception survives SimPy re-raising it.
    """

    def __init__(self, message: str, index: int = -1, cycle: int = -1) -> None:
        super().__init__(message)
        self.index, self.cycle = index, cycle


class Fault(SimError):
    """The machine faulted: an access outside a memory, an illegal dynamic value, a semaphore overflow."""

    @classmethod
    def at(cls, what: str, index: int, mnemonic: str, layer: str | None, cycle: int) -> Fault:
        return cls(f"fault at cycle {cycle}: {describe(index, mnemonic, layer)}: {what}", index, cycle)


class RaceError(SimError):
    """Two engines touch the same bytes, at least one writing, with no semaphore ordering them."""


class DeadlockError(SimError):
    """Every unit waits (on a semaphore, a full queue or an empty one) while instructions remain."""


class SimInputError(GlowError):
    """What the simulation was given is wrong: an input's name, shape or dtype, a DRAM image."""
