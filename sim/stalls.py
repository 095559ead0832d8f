"""Stall cycles per layer and engine, each booked to its root cause.

The machine records, per instruction, the cycles its engine waited before and during it, by
reason (`sim.machine.STALLS`). A wait on a semaphore is not a cause by itself: the cause is the
instruction whose signal ended the wait (the latest to finish of the signals the wait consumes,
by the program's semaphore protocol), and that one's own cause if it was itself late because it
waited longer than it worked. A transfer that ends a wait books it to DRAM: to latency in the
share of the transfer spent waiting for its own requests, to bandwidth in the rest (moving data
at the bus's rate, or queued behind other traffic); a computation books it to its engine. So a
matrix engine waiting for a semaphore signalled by a bandwidth-bound LOAD is booked as DRAM
bandwidth. An engine waiting for the dispatcher (its queue empty) is booked as `dispatch`.
"""
from __future__ import annotations

import numpy as np

from isa.program import semaphore_protocol
from isa.schema import Engine

from .machine import STALLS
from .steps import ENGINES, Step

CAUSES = ("dram_bandwidth", "dram_latency", "matrix", "vector", "dispatch")
ENGINE_NAMES = {Engine.LOAD: "load DMA", Engine.STORE: "store DMA", Engine.MATRIX: "matrix", Engine.VECTOR: "vector"}
_COLUMN = {reason: k for k, reason in enumerate(STALLS)}
_CHAIN = 32
"""How far a chain of late signals is followed before its last link is taken as the cause."""


class StallCauses:
    """Root causes of every instruction's waits in one run."""

    def __init__(self, steps: list[Step], start: np.ndarray, end: np.ndarray, waits: np.ndarray) -> None:
        self.steps, self.start, self.end, self.waits = steps, start, end, waits
        self.consumes = semaphore_protocol([s.instr for s in steps]).consumes
        self._roots: dict[int, dict[str, float]] = {}

    def _blamed(self, index: int) -> int | None:
        """The signal that ended instruction `index`'s semaphore wait: the latest to finish of those it takes."""
        signals = self.consumes.get(index, ())
        return max(signals, key=lambda s: self.end[s]) if signals else None

    def root(self, index: int, depth: int = 0) -> dict[str, float]:
        """Shares of the causes that made instruction `index` finish when it did (summing to 1)."""
        if index in self._roots:
            return self._roots[index]
        step = self.steps[index]
        worked = int(self.end[index] - self.start[index])
        waited = int(self.waits[index, _COLUMN["semaphore"]])
        blamed = self._blamed(index) if waited > worked and depth < _CHAIN else None
        if blamed is not None:
            shares = self.root(blamed, depth + 1)
        elif step.engine in (Engine.LOAD, Engine.STORE):
            latency = int(self.waits[index, _COLUMN["dram_latency"]])
            part = latency / worked if worked else 0.0
            shares = {"dram_latency": part, "dram_bandwidth": 1.0 - part}
        elif step.engine is Engine.MATRIX:
            shares = {"matrix": 1.0}
        elif step.engine is Engine.VECTOR:
            shares = {"vector": 1.0}
        else:
            shares = {"dispatch": 1.0}
        self._roots[index] = shares
        return shares

    def booked(self, index: int) -> dict[str, float]:
        """Instruction `index`'s stall cycles by root cause."""
        out = dict.fromkeys(CAUSES, 0.0)
        row = self.waits[index]
        waited = int(row[_COLUMN["semaphore"]])
        if waited:
            blamed = self._blamed(index)
            for cause, share in (self.root(blamed) if blamed is not None else {"dispatch": 1.0}).items():
                out[cause] += waited * share
        out["dispatch"] += int(row[_COLUMN["queue_empty"]])
        out["dram_bandwidth"] += int(row[_COLUMN["dram_bandwidth"]])
        out["dram_latency"] += int(row[_COLUMN["dram_latency"]])
        return out

    def layer(self, first: int, stop: int) -> dict[str, dict[str, int]]:
        """{engine: {cause: cycles}} over instructions first..stop-1 (engines that stalled only)."""
        table: dict[str, dict[str, float]] = {}
        for index in range(first, stop):
            step = self.steps[index]
            if step.engine not in ENGINES or not self.waits[index].any():
                continue
            row = table.setdefault(ENGINE_NAMES[step.engine], dict.fromkeys(CAUSES, 0.0))
            for cause, cycles in self.booked(index).items():
                row[cause] += cycles
        return {engine: {cause: round(c) for cause, c in row.items()} for engine, row in table.items()}
