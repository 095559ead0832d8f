"""DRAM as the datasheet times it: bursts, a bounded number of requests in flight, one data bus.

A transfer's bytes, in (plane, row, column, byte) order, are cut into requests at every jump in
address and every `dma_burst_bytes` boundary (vectorised, and cached per geometry by `profile`).
Requests from both DMA engines share one controller (`Dram`): request i issues no earlier than
one cycle after its engine's previous request and no earlier than the completion of request
i - `dram_max_outstanding` (so at most that many are in flight), its data phase starts
`dram_latency_cycles` after issue or when the bus frees, whichever is later (the bus serves
requests in issue order), and lasts ceil(bytes / `dram_bytes_per_cycle`) cycles. These are
max-plus recurrences; over a group of up to `dram_max_outstanding` requests both unroll into
running maxima, which numpy evaluates without a loop per request. Engines commit their requests
to the controller one group at a time, so the two engines' requests interleave group by group.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from isa.behaviour import Box
from isa.config import ArchConfig

_NEVER = -(1 << 60)
"""The completion time of the requests 'before the first': no constraint."""


def _merged(box: Box) -> tuple[list[tuple[int, int]], int]:
    """(count, stride) dimensions outermost first and the contiguous element size, after folding every
    inner dimension whose elements sit end to end into the element."""
    dims = [(box.planes, box.plane_stride), (box.rows, box.row_stride), (box.cols, box.col_stride)]
    dims = [d for d in dims if d[0] > 1]
    elem = box.elem
    while dims and dims[-1][1] == elem:
        count, _ = dims.pop()
        elem *= count
    return dims, elem


def _runs(box: Box) -> tuple[np.ndarray, np.ndarray]:
    """Start addresses and lengths of the maximal contiguous runs of the transfer, in order."""
    dims, elem = _merged(box)
    offsets = np.zeros(1, np.int64)
    for count, stride in dims:
        offsets = (offsets[:, None] + np.arange(count, dtype=np.int64) * stride).ravel()
    starts = offsets + box.address
    if len(starts) == 1:
        return starts, np.array([elem], np.int64)
    breaks = np.flatnonzero(starts[1:] != starts[:-1] + elem) + 1
    first = np.concatenate(([0], breaks))
    lengths = np.diff(np.concatenate((first, [len(starts)]))) * elem
    return starts[first], lengths


def _requests(box: Box, burst: int) -> np.ndarray:
    """The byte size of every DRAM request of a transfer, in issue order."""
    starts, lengths = _runs(box)
    first_burst = starts // burst
    last_burst = (starts + lengths - 1) // burst
    count = last_burst - first_burst + 1
    sizes = np.full(int(count.sum()), burst, np.int64)
    first_at = np.concatenate(([0], np.cumsum(count)[:-1]))
    last_at = first_at + count - 1
    head = np.minimum(lengths, (first_burst + 1) * burst - starts)
    sizes[first_at] = head
    multi = count > 1
    sizes[last_at[multi]] = (starts + lengths - 1)[multi] % burst + 1
    return sizes


class Dram:
    """The shared DRAM controller: the last `dram_max_outstanding` completions and the bus, in issue order."""

    def __init__(self, config: ArchConfig) -> None:
        self.latency = config.dram_latency_cycles
        self.bandwidth = config.dram_bytes_per_cycle
        self.window = config.dram_max_outstanding
        self.completions = np.full(self.window, _NEVER, np.int64)
        """Completion times of the last `window` requests, oldest first (the bus makes them ascend)."""
        self.bus_free = _NEVER
        self.groups: list[tuple[int, int, int, bool]] = []
        """(first data cycle, last data cycle + 1, bytes, is_write) per committed group, for the counter track."""

    def data_cycles(self, sizes: np.ndarray) -> np.ndarray:
        return -(-sizes // self.bandwidth)

    def earliest_issue(self, ready: int) -> int:
        """When the next request can issue if its engine is ready at `ready`: a slot must be free."""
        return max(ready, int(self.completions[0]))

    def commit(self, sizes: np.ndarray, ready: int, is_write: bool) -> tuple[int, int]:
        """Issue up to `window` requests of one engine, the first no earlier than `ready`.

        Returns (issue cycle of the last request, completion cycle of the last request).
        """
        m = len(sizes)
        data = self.data_cycles(sizes)
        steps = np.arange(m, dtype=np.int64)
        # issue_j = max(ready, completion of request j - window, issue_{j-1} + 1)
        bound = np.maximum(self.completions[:m], ready)
        issue = steps + np.maximum.accumulate(bound - steps)
        # done_j = max(issue_j + latency, done_{j-1}) + data_j
        through = np.cumsum(data)
        before = through - data
        done = through + np.maximum(self.bus_free, np.maximum.accumulate(issue + self.latency - before))
        self.completions = np.concatenate((self.completions[m:], done))
        self.bus_free = int(done[-1])
        self.groups.append((int(done[0] - data[0]), self.bus_free, int(sizes.sum()), is_write))
        return int(issue[-1]), self.bus_free


@dataclass(frozen=True, eq=False)
class Profile:
    """What a transfer costs the DRAM: request sizes, data-bus cycles, and its time on an idle DRAM."""

    sizes: np.ndarray
    data_cycles: int
    unshared_cycles: int
    """Cycles from the first issue to the last completion with no other traffic."""


@lru_cache(maxsize=4096)
def _profile(box: Box, config: ArchConfig) -> Profile:
    sizes = _requests(box, config.dma_burst_bytes)
    sizes.flags.writeable = False
    dram = Dram(config)
    ready, done = 0, 0
    for at in range(0, len(sizes), dram.window):
        last_issue, done = dram.commit(sizes[at:at + dram.window], ready, False)
        ready = last_issue + 1
    return Profile(sizes, int(dram.data_cycles(sizes).sum()), done)


def profile(box: Box, config: ArchConfig) -> Profile:
    """The cost of a transfer; it depends on the address only modulo the burst size, so it is cached so."""
    burst = config.dma_burst_bytes
    return _profile(Box(box.address % burst, box.planes, box.rows, box.cols, box.plane_stride, box.row_stride,
                        box.col_stride, box.elem), config)
