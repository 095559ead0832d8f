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
against the window with one vectorised lookup, only the rare misses take the per-address path, and
a window move costs the positions it passes, not the addresses there are.
"""
from __future__ import annotations

import numpy as np

from .streams import IDLE


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


class ReadBuffer:
    """An ifmap or filter SRAM of `size` words fed at `bandwidth` words per cycle.

    The window's sets are a run of positions in the prefetch sequence repeated end to end (the
    wrap-around): it holds an address when that address occurs between the window's first and
    last position. So each address keeps the position of its first occurrence at or after the
    window's start; moving the window updates the addresses whose occurrences it passes, and a
    lookup compares with the window's end.
    """

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
        self.first_set = 0
        """The window's first set, counted on through the wrap-arounds (set k is set k % sets)."""
        self.end = self._set_start(self.active_sets)
        """The position just past the window's last set."""
        self.next_use, self.following = _occurrences(self.valid)
        self.never = np.iinfo(np.int64).max
        """`next_use` of an address the prefetch sequence does not hold."""

    def _set_start(self, k: int) -> int:
        """The position where set k starts in the repeated prefetch sequence."""
        period, s = divmod(k, self.sets)
        return period * len(self.valid) + min(s * self.per_set, len(self.valid))

    def _hits(self, addresses: np.ndarray) -> np.ndarray:
        inside = addresses < len(self.next_use)
        hit = np.zeros(len(addresses), bool)
        hit[inside] = self.next_use[addresses[inside]] < self.end
        return hit

    def misses(self, block: np.ndarray) -> np.ndarray:
        """Per row of `block`, whether any demanded address is outside the current active window."""
        wanted = block != IDLE
        miss = wanted.copy()
        miss[wanted] = ~self._hits(block[wanted])
        return miss.any(axis=1)

    def _slide(self, windows: int) -> None:
        """Move the window on by `windows` prefetch windows of sets (their fetches are timed by `serve`)."""
        start = self._set_start(self.first_set)
        self.first_set += windows * self.prefetch_sets
        moved_past = self._set_start(self.first_set)
        # the last occurrence of each address the window's start passes gives its next one after the start;
        # the positions passed are runs of the sequence, one more at each wrap-around
        count = len(self.valid)
        while start < moved_past:
            at = start % count
            run = min(moved_past - start, count - at)
            following = self.following[at:at + run]
            last = np.flatnonzero(following >= moved_past - start + at)
            self.next_use[self.valid[at:at + run][last]] = following[last] + (start - at)
            start += run
        self.end = self._set_start(self.first_set + self.active_sets)

    def _windows_to(self, address: int) -> int:
        """How many prefetch windows the window moves on until it holds `address` (a miss: at least one).
        The prefetch window is no larger than the active one, so the windows passed leave no gap."""
        wanted = self.next_use[address] if address < len(self.next_use) else self.never
        if wanted == self.never or self.prefetch_sets == 0:
            raise AssertionError("an address outside the prefetch sequence")
        windows = 1
        while self._set_start(self.first_set + windows * self.prefetch_sets + self.active_sets) <= wanted:
            windows += 1
        return windows

    def serve(self, row: np.ndarray, cycle: int) -> int:
        """Serve one request line at `cycle`; returns its stall cycles (v3's count, may be negative)."""
        addresses = row[row != IDLE]
        offset = 1
        at = 0
        lines = _ceil(self.prefetch_size, self.bandwidth)
        while at < len(addresses):
            hit = self._hits(addresses[at:])
            if hit.all():
                break
            at += int(np.argmin(hit))
            windows = self._windows_to(int(addresses[at]))
            self._slide(windows)
            for _ in range(windows):  # each prefetch window is fetched after the one before, one line a cycle
                self.words_fetched += lines * self.bandwidth
                self.last_fetch += lines + 1
                late = self.last_fetch - (cycle + offset)
                offset += late
                if late > 0:
                    offset += late
            at += 1
        return offset - 1


def _occurrences(sequence: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per address, the position of its first occurrence in `sequence` (the int64 maximum for an address
    that never occurs); per position, the position of the same address's next occurrence, in the
    sequence repeated end to end (past its end where it wraps around)."""
    first = np.full(int(sequence.max(initial=0)) + 1, np.iinfo(np.int64).max, np.int64)
    order = np.argsort(sequence, kind="stable")  # positions grouped by address, ascending within a group
    grouped = sequence[order]
    opens = np.empty(len(order), bool)
    opens[:1] = True
    opens[1:] = grouped[1:] != grouped[:-1]
    closes = np.roll(opens, -1)
    group_first = order[opens][np.cumsum(opens) - 1]
    following = np.empty(len(order), np.int64)
    following[order] = np.where(closes, group_first + len(sequence), np.roll(order, -1))
    first[grouped[opens]] = order[opens]
    return first, following


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
