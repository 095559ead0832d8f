"""Checked mode's race detector: vector clocks along the program's semaphore protocol, extents per engine.

Two instructions on different units are ordered only through semaphores: the producer signals when
it completes, the consumer waits before it starts (and the dispatcher's NOP/END waits order every
instruction dispatched after them). Which signals a wait consumes is not taken from the order in
which tokens happened to arrive, but from the program (`isa.program.semaphore_protocol`): each
semaphore hands out its tokens in program order, so the k-th wait takes the tokens after those of
the waits before it. Each unit keeps a vector clock, counting its instructions in its own slot; a
signal keeps the signaller's clock, a wait joins the clocks of the signals the protocol gives it,
and a dispatched instruction carries the dispatcher's clock. These clocks depend on the program
alone, never on the timing, so neither does the verdict.

The pairing holds in every run only if no signal can overtake an earlier one whose tokens an
earlier wait needs, and no wait can overtake the one before it on another unit; both are checked
with the same clocks (a signal, or a wait, not ordered after the one it must follow is a race on
the semaphore). Each engine's accesses (`isa.program.extents`: DRAM, scratchpad and accumulator
ranges, read or written) are kept, with their epochs, while some other engine still has not seen
them. When an instruction starts it is checked against the other engines' kept accesses it has not
seen: an overlap where either side writes is a race, whatever the timing happened to be.
"""
from __future__ import annotations

import numpy as np

from isa.program import Extent, semaphore_protocol
from isa.schema import Engine

from .errors import RaceError, describe
from .steps import ENGINES, Step

UNITS = (*ENGINES, Engine.CONTROL)
_SLOT = {unit: k for k, unit in enumerate(UNITS)}
_MEMORIES = ("dram", "spad", "acc")
_CODE = {m: k for k, m in enumerate(_MEMORIES)}

Clock = list[int]
PRUNE_EVERY = 64
"""Instructions started between two prunings of the kept accesses."""


def join(a: Clock, b: Clock) -> Clock:
    return [x if x >= y else y for x, y in zip(a, b)]


class _Accesses:
    """One engine's kept accesses as column arrays, ascending by epoch; rows before `first` are pruned."""

    _COLUMNS = (("epoch", np.int64), ("index", np.int64), ("memory", np.int8), ("start", np.int64),
                ("stop", np.int64), ("write", np.bool_))

    def __init__(self) -> None:
        self.first = self.rows = 0
        self.cols = {name: np.zeros(64, dtype) for name, dtype in self._COLUMNS}

    def add(self, epoch: int, index: int, extents: list[Extent]) -> None:
        need = self.rows + len(extents)
        if need > len(self.cols["epoch"]):
            live = need - self.first
            size = max(64, 2 * live)
            for name, dtype in self._COLUMNS:
                grown = np.zeros(size, dtype)
                grown[:self.rows - self.first] = self.cols[name][self.first:self.rows]
                self.cols[name] = grown
            self.rows -= self.first
            self.first = 0
        for x in extents:
            row = self.rows
            c = self.cols
            c["epoch"][row], c["index"][row], c["memory"][row] = epoch, index, _CODE[x.memory]
            c["start"][row], c["stop"][row], c["write"][row] = x.start, x.stop, x.write
            self.rows += 1

    def _after(self, epoch: int) -> int:
        return self.first + int(np.searchsorted(self.cols["epoch"][self.first:self.rows], epoch, "right"))

    def conflict(self, seen: int, extents: list[Extent]) -> tuple[int, Extent, Extent] | None:
        """(instruction index, its extent, the new extent) of an access after epoch `seen` that conflicts."""
        lo = self._after(seen)
        if lo == self.rows:
            return None
        c = {name: column[lo:self.rows] for name, column in self.cols.items()}
        for x in extents:
            hit = (c["memory"] == _CODE[x.memory]) & (c["start"] < x.stop) & (c["stop"] > x.start)
            if not x.write:
                hit &= c["write"]
            if hit.any():
                k = int(np.argmax(hit))
                theirs = Extent(_MEMORIES[c["memory"][k]], int(c["start"][k]), int(c["stop"][k]), bool(c["write"][k]))
                return int(c["index"][k]), theirs, x
        return None

    def prune(self, seen_by_all: int) -> None:
        self.first = self._after(seen_by_all)


class RaceChecker:
    """Vector clocks of every unit, the clock each signal left, and the kept accesses of every engine."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.protocol = semaphore_protocol([s.instr for s in steps])
        self.epochs = [0] * len(steps)
        """Each instruction's position on its unit, from 1: the value of its unit's own slot once it starts."""
        counts = dict.fromkeys(UNITS, 0)
        for step in steps:
            counts[step.engine] += 1
            self.epochs[step.index] = counts[step.engine]
        self.clocks: dict[Engine, Clock] = {unit: [0] * len(UNITS) for unit in UNITS}
        self.signalled: dict[int, Clock] = {}
        """signalling instruction -> its unit's clock when it signalled"""
        self.accesses = {engine: _Accesses() for engine in ENGINES}
        self.remaining = {engine: sum(1 for s in steps if s.engine is engine) for engine in ENGINES}
        self.started = 0

    def _seen(self, clock: Clock, step: Step) -> bool:
        """Whether `clock` has seen `step` (a unit sees all its own earlier instructions)."""
        return clock[_SLOT[step.engine]] >= self.epochs[step.index]

    def enter(self, step: Step, cycle: int, dispatched: Clock | None = None) -> None:
        """`step` has passed its wait: join what it was dispatched after and the signals the protocol gives its
        wait, and count it on its unit."""
        unit = step.engine
        own = join(self.clocks[unit], dispatched) if dispatched else list(self.clocks[unit])
        before = self.protocol.previous_wait.get(step.index)
        if before is not None and not self._seen(own, self.steps[before]):
            raise self._semaphore_race(step, self.steps[before], step.wait[0], cycle, "can overtake the wait of")
        for signal in self.protocol.consumes.get(step.index, ()):
            theirs = self.signalled.get(signal)
            if theirs is None:  # the checks at each signal make this unreachable; kept as the last word
                raise self._semaphore_race(step, self.steps[signal], step.wait[0], cycle, "went ahead before")
            own = join(own, theirs)
        own[_SLOT[unit]] = self.epochs[step.index]
        self.clocks[unit] = own

    def signal(self, step: Step, cycle: int) -> None:
        """`step` signals: keep its clock; it must follow every earlier signal whose tokens it could take over."""
        own = self.clocks[step.engine]
        for earlier in self.protocol.follows.get(step.index, ()):
            if not self._seen(own, self.steps[earlier]):
                raise self._semaphore_race(step, self.steps[earlier], step.signal[0], cycle,
                                           "can overtake the signal of")
        self.signalled[step.index] = own

    @staticmethod
    def _semaphore_race(step: Step, other: Step, sem: int, cycle: int, how: str) -> RaceError:
        return RaceError(f"race at cycle {cycle}: {describe(step.index, step.mnemonic, step.layer)} on s{sem} {how} "
                         f"{describe(other.index, other.mnemonic, other.layer)}, with no semaphore ordering them, so "
                         f"which tokens a wait takes depends on timing", step.index, cycle)

    def start(self, step: Step, cycle: int) -> None:
        """Check `step` (entered) against every access its engine has not seen, then keep its own accesses."""
        engine = step.engine
        own = self.clocks[engine]
        for other in ENGINES:
            if other is engine:
                continue
            found = self.accesses[other].conflict(own[_SLOT[other]], step.extents)
            if found:
                index, theirs, mine = found
                first = self.steps[index]
                raise RaceError(f"race at cycle {cycle}: {describe(step.index, step.mnemonic, step.layer)} on the "
                                f"{engine.value} engine {mine}, and {describe(index, first.mnemonic, first.layer)} "
                                f"on the {other.value} engine {theirs}, with no semaphore ordering them",
                                step.index, cycle)
        if step.extents:
            self.accesses[engine].add(own[_SLOT[engine]], step.index, step.extents)
        self.remaining[engine] -= 1
        self.started += 1
        if self.started % PRUNE_EVERY == 0:
            self._prune()

    def _prune(self) -> None:
        """Drop the accesses every other engine has seen (a conflict check skips them anyway: this only bounds
        the arrays)."""
        for engine in ENGINES:
            others = [self.clocks[e][_SLOT[engine]] for e in ENGINES if e is not engine and self.remaining[e]]
            self.accesses[engine].prune(min(others) if others else 1 << 62)
