"""SCALE-Sim v3's double-buffered SRAMs, as it times them in USER bandwidth mode.

Read SRAM (ifmap, filter): the prefetch sequence is cut into *sets* of ceil(size / 100) elements.
Half the SRAM is the active window of sets, the other half the prefetch window. A demanded
address outside the active window slides both windows forward by the prefetch window's sets
(circularly: an operand demanded again in a later fold wraps around) and fetches
ceil(half / bandwidth) lines of `bandwidth` words, one line a cycle plus one cycle of latency,
chained after the previous fetch (so DRAM time accumulates independently of compute time). The
request's extra cycles follow v3's rule exactly: each fetch moves the request's completion to
the fetch's end, and when that is later than the request it adds the difference twice.

Write SRAM (ofmap): words fill lines of `bandwidth`; once more than half the SRAM holds data,
the filled lines drain at a line per cycle; a write finding the SRAM full waits for the drain.

Both are replicas of the timing v3 computes, written to be fast: a request line is checked
against the window with one vectorised lookup, and only the rare misses take the per-address path.
"""
from __future__ import annotations

import numpy as np

from .streams import IDLE


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


class ReadBuffer:
    """An ifmap or filter SRAM of `size` words fed at `bandwidth` words per cycle."""

    def __init__(self, size: int, bandwidth: int, prefetch: np.ndarray) -> None:
        self.bandwidth = bandwidth
        self.active_size = _ceil(size, 2)
        self.prefetch_size = size - self.active_size
        per_set = _ceil(size, 100)
        self.valid = prefetch[prefetch != IDLE]
        self.per_set = per_set
        self.sets = len(self.valid) // per_set + 1  # v3 always closes a last (possibly empty) set
        self.active_sets = min(_ceil(self.active_size, per_set), self.sets)
        self.prefetch_sets = min(_ceil(self.prefetch_size, per_set), self.sets - self.active_sets)
        fetch_lines = _ceil(len(prefetch), bandwidth)
        first_lines = min(_ceil(self.active_size, bandwidth), fetch_lines)
        self.words_fetched = first_lines * bandwidth
        self.dram_start = -first_lines
        self.last_fetch = -1
        """Completion cycle of the latest DRAM fetch (the first fills the active half before cycle 0)."""
        self.start_set = 0
        self.distinct = len(self.valid) == 0 or int(np.bincount(self.valid).max()) == 1
        """No address occurs twice in the prefetch order (then a window move is a plain indexed update)."""
        self.held = np.zeros(int(self.valid.max(initial=0)) + 1, np.int32)
        """Per address, how many of its occurrences lie in the active window's sets."""
        self.window: set[int] = set()
        self._move_window()

    def _move_window(self) -> None:
        sets = {(self.start_set + i) % self.sets for i in range(self.active_sets)}
        for change, moved in ((-1, self.window - sets), (1, sets - self.window)):
            if moved:
                parts = [self.valid[s * self.per_set:(s + 1) * self.per_set] for s in moved]
                moved_addresses = np.concatenate(parts)
                if self.distinct:
                    self.held[moved_addresses] += change
                else:  # bincount, not np.add.at: a move touches half the SRAM, and add.at is ~100x slower
                    self.held += change * np.bincount(moved_addresses, minlength=len(self.held)).astype(np.int32)
        self.window = sets

    def _hits(self, addresses: np.ndarray) -> np.ndarray:
        inside = addresses < len(self.held)
        hit = np.zeros(len(addresses), bool)
        hit[inside] = self.held[addresses[inside]] > 0
        return hit

    def misses(self, block: np.ndarray) -> np.ndarray:
        """Per row of `block`, whether any demanded address is outside the current active window."""
        wanted = block != IDLE
        miss = wanted.copy()
        miss[wanted] = ~self._hits(block[wanted])
        return miss.any(axis=1)

    def _advance(self) -> None:
        self.start_set = (self.start_set + self.prefetch_sets) % self.sets
        lines = _ceil(self.prefetch_size, self.bandwidth)
        self.words_fetched += lines * self.bandwidth
        self.last_fetch += lines + 1
        self._move_window()

    def serve(self, row: np.ndarray, cycle: int) -> int:
        """Serve one request line at `cycle`; returns its stall cycles (v3's count, may be negative)."""
        addresses = row[row != IDLE]
        offset = 1
        at = 0
        while at < len(addresses):
            hit = self._hits(addresses[at:])
            if hit.all():
                break
            at += int(np.argmin(hit))
            while not self._hits(addresses[at:at + 1])[0]:
                if self.prefetch_sets == 0:
                    raise AssertionError("an address outside the prefetch sequence")
                self._advance()
                late = self.last_fetch - (cycle + offset)
                offset += late
                if late > 0:
                    offset += late
            at += 1
        return offset - 1


class WriteBuffer:
    """The ofmap SRAM of `size` words draining to DRAM at `bandwidth` words per cycle."""

    def __init__(self, size: int, bandwidth: int) -> None:
        self.size, self.bandwidth = size, bandwidth
        self.drain_size = size - _ceil(size, 2)
        self.free = size
        self.lines: list[int] = []
        """Valid words of each closed line not yet drained, in order."""
        self.open_words = 0
        self.drained_lines = 0
        self.drain_end = 0
        self.words_written = 0
        self.dram_start: int | None = None
        self.dram_stop = 0

    def _close_line(self) -> None:
        self.lines.append(self.open_words)
        self.open_words = 0

    def _drain(self, start: int) -> int:
        lines = _ceil(self.drain_size, self.bandwidth)
        batch = self.lines[self.drained_lines:self.drained_lines + lines]
        words = (len(batch) - 1) * self.bandwidth + batch[-1]  # v3 counts a full width for all but the last line
        self.words_written += words
        self.free += words
        self.drained_lines += len(batch)
        # a line a cycle from `start`; v3's write port adds no latency
        self.dram_start = start if self.dram_start is None else self.dram_start
        self.dram_stop = start + len(batch) - 1
        return self.dram_stop

    def absorbs(self, count: int) -> bool:
        """Whether `count` more words neither start a drain nor wait for one, whatever the cycle."""
        return self.free - count >= self.size - self.drain_size

    def absorb(self, count: int) -> None:
        """Add `count` words to the lines without any drain decision (see `absorbs`)."""
        words = self.open_words + count
        self.lines.extend([self.bandwidth] * (words // self.bandwidth))
        self.open_words = words % self.bandwidth
        self.free -= count

    def serve(self, count: int, cycle: int) -> int:
        """Write `count` words requested at `cycle`; returns the stall cycles."""
        if self.absorbs(count) or (cycle < self.drain_end and self.free - count > 0):
            self.absorb(count)
            return 0
        now = cycle
        for _ in range(count):
            self.open_words += 1
            self.free -= 1
            if self.open_words == self.bandwidth:
                self._close_line()
            if now < self.drain_end:
                if self.free <= 0:
                    now = self.drain_end
            elif self.free < self.size - self.drain_size:
                if self.open_words:
                    self._close_line()
                self.drain_end = self._drain(now)
        return now - cycle

    def flush(self, cycle: int) -> None:
        """Drain everything left after the last request (v3's end-of-layer drain)."""
        if self.open_words:
            self._close_line()
        while self.drained_lines < len(self.lines):
            cycle = self._drain(cycle) + 1
