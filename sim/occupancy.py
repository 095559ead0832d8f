"""SRAM occupancy over time: how much of each SRAM holds data that will still be read.

Data becomes live when an instruction starts writing it and stays live until the end of the last
instruction that reads it before it is overwritten (data never read is never live). The memories
are tracked in granules (16 bytes of scratchpad, 4 words of accumulator), so a granule counts as
occupied while any of its bytes is live; the figure is exact for the 16-byte-aligned buffers a
compiler allocates. Lifetimes are collected as arrays and swept once at the end.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from isa.config import ArchConfig
from isa.program import Extent

GRANULE = {"spad": 16, "acc": 4}
"""Tracking granule in elements: bytes of scratchpad, int32 words of accumulator."""
ELEMENT_BYTES = {"spad": 1, "acc": 4}
_UNWRITTEN = -1


@dataclass(frozen=True)
class Usage:
    """One SRAM's live bytes over time: a step function (bytes from `times[k]` on) and its peak."""

    times: np.ndarray
    live_bytes: np.ndarray
    peak_bytes: int
    peak_cycle: int
    capacity_bytes: int


class Occupancy:
    """Per granule: when its current data was written and when it was last read."""

    def __init__(self, config: ArchConfig) -> None:
        sizes = {"spad": config.scratchpad_bytes, "acc": config.accumulator_bytes // 4}
        self.capacity = {m: n * ELEMENT_BYTES[m] for m, n in sizes.items()}
        granules = {m: -(-n // GRANULE[m]) for m, n in sizes.items()}
        self.written = {m: np.full(n, _UNWRITTEN, np.int64) for m, n in granules.items()}
        self.last_read = {m: np.full(n, _UNWRITTEN, np.int64) for m, n in granules.items()}
        self.lifetimes: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {m: [] for m in sizes}
        """Per memory: runs of granules as (written, last read, granule count) arrays."""

    @staticmethod
    def _granules(extent: Extent) -> slice:
        g = GRANULE[extent.memory]
        return slice(extent.start // g, -(-extent.stop // g))

    def _retire(self, memory: str, where: slice) -> None:
        """Record the lifetimes of the data in these granules, run-length encoded (buffers share theirs)."""
        born, last = self.written[memory][where], self.last_read[memory][where]
        lived = last > born
        if not lived.any():
            return
        born, last = born[lived], last[lived]
        change = np.empty(born.size, np.bool_)
        change[0] = True
        np.not_equal(born[1:], born[:-1], out=change[1:])
        change[1:] |= last[1:] != last[:-1]
        runs = np.flatnonzero(change)
        lengths = np.diff(runs, append=born.size)
        self.lifetimes[memory].append((born[runs], last[runs], lengths))

    def write(self, extents: list[Extent], cycle: int) -> None:
        """Writes begin at `cycle`: the data they replace is dead from its last read."""
        for x in extents:
            if x.write and x.memory in GRANULE:
                where = self._granules(x)
                self._retire(x.memory, where)
                self.written[x.memory][where] = cycle
                self.last_read[x.memory][where] = cycle

    def read(self, extents: list[Extent], cycle: int) -> None:
        """Reads end at `cycle`: what they read was live until then."""
        for x in extents:
            if not x.write and x.memory in GRANULE:
                where = self._granules(x)
                last = self.last_read[x.memory][where]
                np.maximum(last, np.where(self.written[x.memory][where] == _UNWRITTEN, _UNWRITTEN, cycle), out=last)

    def finish(self) -> dict[str, Usage]:
        """Each SRAM's live bytes over the run, ending every lifetime still open (call once, at the end)."""
        result = {}
        for memory in GRANULE:
            self._retire(memory, slice(None))
            runs = self.lifetimes[memory] or [(np.zeros(0, np.int64),) * 3]
            born, dead, count = (np.concatenate([run[k] for run in runs]) for k in range(3))
            # A granule freed at cycle t and one filled at t do not overlap: ends sort before starts.
            times = np.concatenate((dead, born))
            delta = np.concatenate((-count, count))
            order = np.lexsort((delta, times))
            times, level = times[order], np.cumsum(delta[order]) * GRANULE[memory] * ELEMENT_BYTES[memory]
            if times.size:
                last_of_cycle = np.append(times[1:] != times[:-1], True)
                times, level = times[last_of_cycle], level[last_of_cycle]
            peak_at = int(np.argmax(level)) if level.size else 0
            result[memory] = Usage(times, level, int(level[peak_at]) if level.size else 0,
                                   int(times[peak_at]) if times.size else 0, self.capacity[memory])
        return result
