"""The instruction stream under construction: instructions, their semaphores, and the layer each belongs to.

Layers run one after another: each ends with its last STORE signalling `DONE` and a NOP that waits
for it, a dispatcher barrier, so the next layer's loads see every byte this one wrote. Inside a layer
the engines overlap freely, ordered only by the semaphores the pipelines place (`pipeline.py`); every
signal a layer makes is consumed inside it, so its semaphores are back at zero at each barrier and
can be reused by the next layer, except those that carry work across a barrier on purpose (PREFETCH,
STORED, HANDOFF: prefetch.py, kept_inputs.py, handoff.py), which no other use shares.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from isa.encoding import Instr, make_instr
from isa.sections import DebugRange

from .instructions import END, NOP, Op

DONE = 0
"""The semaphore a layer's last STORE signals and its closing barrier waits on."""


@dataclass
class Sync:
    """A wait and a signal for one instruction; counts 0 mean none."""

    wait: int = 0
    wait_count: int = 0
    signal: int = 0
    signal_count: int = 0

    def fields(self) -> dict[str, int]:
        return {"wait_sem": self.wait if self.wait_count else 0, "wait_count": self.wait_count,
                "signal_sem": self.signal if self.signal_count else 0, "signal_count": self.signal_count}


@dataclass
class Emitter:
    """Appends instructions and records which layer produced which instruction range."""

    instructions: list[Instr] = field(default_factory=list)
    debug: list[DebugRange] = field(default_factory=list)
    _layer_start: int = 0

    def emit(self, op: Op, sync: Sync | None = None) -> int:
        """Append one instruction, its field values checked as it is encoded; its index."""
        self.instructions.append(make_instr(op.mnemonic, **op.fields, **(sync or Sync()).fields()))
        return len(self.instructions) - 1

    def set_sync(self, index: int, wait: tuple[int, int] | None = None,
                 signal: tuple[int, int] | None = None) -> None:
        """Add a wait or signal to an instruction already emitted (it must have none of that kind)."""
        instr = self.instructions[index]
        values: dict[str, Any] = instr.fields()
        if wait is not None and wait[1]:
            assert values["wait_count"] == 0, "instruction already waits"
            values["wait_sem"], values["wait_count"] = wait
        if signal is not None and signal[1]:
            assert values["signal_count"] == 0, "instruction already signals"
            values["signal_sem"], values["signal_count"] = signal
        self.instructions[index] = instr.replace(**values)

    def extend(self, instructions: list[Instr]) -> None:
        """Append instructions built elsewhere (two layers' interleaved: overlap.py)."""
        self.instructions.extend(instructions)

    def begin_layer(self) -> None:
        self._layer_start = len(self.instructions)

    @property
    def layer_start(self) -> int:
        """Where the layer being emitted starts."""
        return self._layer_start

    def end_layer(self, name: str, kind: str, dones: int = 1) -> None:
        """Close the layer with its barrier (waiting for the DONE signal its last STORE made: one from each of
        the `dones` layers it runs at once)."""
        self.emit(NOP(), Sync(wait=DONE, wait_count=dones))
        self.debug.append(DebugRange(self._layer_start, len(self.instructions), name, kind))

    def finish(self) -> list[Instr]:
        self.emit(END())
        return self.instructions

