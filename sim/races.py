"""Checked mode's race detector: vector clocks carried by semaphores, extents kept per engine.

Two instructions on different engines are ordered only through semaphores: the producer signals
when it completes, the consumer waits before it starts (and the dispatcher's NOP/END waits order
every instruction dispatched after them). Each unit keeps a vector clock; a signal deposits the
signaller's clock with its tokens, a wait joins the clocks of the tokens it takes (oldest first),
and a dispatched instruction carries the dispatcher's clock. An instruction of engine E at
epoch e of engine F "happened before" the current one on E when E's clock has seen F's epoch e.

Each engine's accesses (`isa.program.extents`: DRAM, scratchpad and accumulator ranges, read or
written) are kept, with their epochs, while some other engine still has not seen them; that
covers every instruction still in flight and every completed one not yet ordered. When an
instruction starts, it is checked against the other engines' kept accesses it has not seen: an
overlap where either side writes is a race, whatever the timing happened to be.
"""
from __future__ import annotations

import numpy as np

from isa.program import Extent
from isa.schema import Engine

from .errors import RaceError, describe
from .steps import ENGINES, Step

UNITS = (*ENGINES, Engine.CONTROL)
_SLOT = {unit: k for k, unit in enumerate(UNITS)}
_MEMORIES = ("dram", "spad", "acc")
_CODE = {m: k for k, m in enumerate(_MEMORIES)}

Clock = list[int]


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
    """Vector clocks of every unit and the kept accesses of every engine."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.clocks: dict[Engine, Clock] = {unit: [0] * len(UNITS) for unit in UNITS}
        self.accesses = {engine: _Accesses() for engine in ENGINES}
        self.remaining = {engine: sum(1 for s in steps if s.engine is engine) for engine in ENGINES}

    def clock(self, unit: Engine) -> Clock:
        """A unit's clock as of now: what its signals carry and what the dispatcher hands on."""
        return list(self.clocks[unit])

    def observe(self, unit: Engine, clock: Clock) -> None:
        """`unit` has waited for (or been dispatched after) everything `clock` has seen."""
        self.clocks[unit] = join(self.clocks[unit], clock)

    def start(self, step: Step, cycle: int) -> None:
        """Check `step` against every access its engine has not seen, then keep its own accesses."""
        engine = step.engine
        own = self.clocks[engine]
        own[_SLOT[engine]] += 1
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
        self._prune()

    def _prune(self) -> None:
        for engine in ENGINES:
            others = [self.clocks[e][_SLOT[engine]] for e in ENGINES if e is not engine and self.remaining[e]]
            self.accesses[engine].prune(min(others) if others else 1 << 62)
