"""The machine as SimPy processes: the dispatcher and one process per engine, sharing DRAM and semaphores.

The dispatcher fetches one instruction per cycle in program order into its engine's bounded
queue (stalling while it is full) and runs NOP and END itself. Each engine takes its queue's head,
waits for its semaphore, executes it and signals: the instruction reads its sources as it starts,
holds the engine for its cycles (LOAD and STORE for their DRAM requests), and its results land in
the memories as it completes, just before its signal, so a consumer that does not wait for them
reads what was there before. Every cycle of every
unit is accounted as busy, stalled for a reason, or idle. When no event is left but instructions
are, the machine is deadlocked; the error says what each unit waits for.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import simpy

from isa.behaviour import ExecutionFault, Write
from isa.config import ArchConfig
from isa.schema import Engine

from .dram import Dram, profile
from .errors import DeadlockError, Fault, SimError, describe
from .memory import Datapath, Memories
from .occupancy import Occupancy, Usage
from .races import RaceChecker
from .steps import ENGINES, Step
from .sync import InstrQueue, Semaphores

PROGRESS_EVERY = 4096
"""Completed instructions between two progress reports (a ResNet-50 runs about 100,000).
"""

STALLS = ("semaphore", "queue_empty", "queue_full", "dram_bandwidth", "dram_latency")
"""Why a unit was not busy: waiting on a semaphore, on the dispatcher (its queue empty), on a full queue
(the dispatcher), on DRAM bandwidth (other traffic on the bus or in the request slots) or on DRAM
latency (its own requests in flight)."""
_STALL_COLUMN = {reason: column for column, reason in enumerate(STALLS)}


@dataclass
class UnitStats:
    """Cycles a unit (an engine or the dispatcher) was busy and stalled, per reason."""

    instructions: int = 0
    busy: int = 0
    stalls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STALLS, 0))


@dataclass
class Timeline:
    """What a run produced besides the memories: per-instruction times and per-unit accounts."""

    cycles: int
    start: np.ndarray
    end: np.ndarray
    units: dict[Engine, UnitStats]
    dram_groups: list[tuple[int, int, int, bool]]
    usage: dict[str, Usage]
    waits: np.ndarray
    """Per instruction, cycles stalled before it by reason: columns in `STALLS` order (see `sim.stalls`)."""


class Machine:
    """One run of a prepared program on a configuration."""

    def __init__(self, steps: list[Step], config: ArchConfig, memories: Memories, *, checked: bool = False,
                 ideal_dram: bool = False, progress: Callable[[int, int], None] | None = None) -> None:
        self.steps, self.config, self.memories = steps, config, memories
        self.progress = progress
        """Told (instructions completed, instructions in all) every PROGRESS_EVERY completions."""
        self.ideal_dram = ideal_dram
        self.env = simpy.Environment()
        self.queues = {engine: InstrQueue(self.env, config.queue_depth) for engine in ENGINES}
        self.semaphores = Semaphores(self.env, config.semaphores)
        self.dram = Dram(config)
        self.datapath = Datapath(memories)
        self.races = RaceChecker(steps) if checked else None
        self.dispatch_clocks: dict[int, list[int]] = {}
        self.occupancy = Occupancy(config)
        self.units = {unit: UnitStats() for unit in (*ENGINES, Engine.CONTROL)}
        self.start = np.full(len(steps), -1, np.int64)
        self.end = np.full(len(steps), -1, np.int64)
        self.waits = np.zeros((len(steps), len(STALLS)), np.int64)
        self.waiting: dict[Engine, tuple[str, Step] | None] = dict.fromkeys(self.units)
        self.pending: dict[Engine, list[Write]] = {engine: [] for engine in ENGINES}
        """The writes of each engine's instruction in flight, committed when it completes."""
        self.completed = 0

    def run(self) -> Timeline:
        for engine in ENGINES:
            mine = [s for s in self.steps if s.engine is engine]
            if mine:
                self.env.process(self._engine(engine, mine))
        self.env.process(self._dispatcher())
        try:
            self.env.run()
        except SimError as err:
            # SimPy re-raises a process's exception as a copy built from its message; the original is the cause.
            raise (err.__cause__ if isinstance(err.__cause__, SimError) else err) from None
        if self.completed < len(self.steps):
            raise self._deadlock()
        cycles = int(self.end.max()) if len(self.steps) else 0
        return Timeline(cycles, self.start, self.end, self.units, self.dram.groups, self.occupancy.finish(),
                        self.waits)

    def _stalled(self, unit: Engine, step: Step, reason: str, cycles: int) -> None:
        """Book `cycles` of `unit` stalled for `reason` to the unit and to the instruction it held up."""
        self.units[unit].stalls[reason] += cycles
        self.waits[step.index, _STALL_COLUMN[reason]] += cycles

    def _fault(self, step: Step, what: str) -> Fault:
        return Fault.at(what, step.index, step.mnemonic, step.layer, int(self.env.now))

    def _acquire(self, unit: Engine, step: Step):
        """Wait for the step's semaphore (a generator for `yield from`); a static fault stops the machine first."""
        if step.problem:
            raise self._fault(step, step.problem)
        sem, count = step.wait
        event = self.semaphores.acquire(sem, count) if count else None
        if event is not None:
            self.waiting[unit] = ("semaphore", step)
            began = self.env.now
            yield event
            self._stalled(unit, step, "semaphore", self.env.now - began)
            self.waiting[unit] = None
        if self.races:
            self.races.enter(step, int(self.env.now), self.dispatch_clocks.pop(step.index, None))

    def _signal(self, step: Step) -> None:
        sem, count = step.signal
        if count:
            if self.races:
                self.races.signal(step, int(self.env.now))
            try:
                self.semaphores.release(sem, count)
            except ExecutionFault as err:
                raise self._fault(step, str(err)) from None

    def _dispatcher(self):
        env, stats = self.env, self.units[Engine.CONTROL]
        for step in self.steps:
            if step.engine is Engine.CONTROL:
                yield from self._acquire(Engine.CONTROL, step)
                self.start[step.index] = env.now
                yield env.timeout(1)
                self._finish(Engine.CONTROL, step)
                continue
            queue = self.queues[step.engine]
            if queue.full():
                self.waiting[Engine.CONTROL] = ("queue_full", step)
                began = env.now
                yield queue.space()
                self._stalled(Engine.CONTROL, step, "queue_full", env.now - began)
                self.waiting[Engine.CONTROL] = None
            if self.races:
                self.dispatch_clocks[step.index] = self.races.clocks[Engine.CONTROL]
            queue.push(step)
            stats.busy += 1
            stats.instructions += 1
            yield env.timeout(1)

    def _engine(self, engine: Engine, mine: list[Step]):
        env, queue, stats = self.env, self.queues[engine], self.units[engine]
        for step in mine:
            if not queue.items:
                self.waiting[engine] = ("dispatch", step)
                began = env.now
                yield queue.arrival()
                self._stalled(engine, step, "queue_empty", env.now - began)
                self.waiting[engine] = None
            yield from self._acquire(engine, step)
            queue.pop()
            self._begin(engine, step)
            if step.cycles is None:
                yield from self._transfer(step, stats)
            else:
                yield env.timeout(step.cycles)
                stats.busy += step.cycles
            self.occupancy.read(step.extents, env.now)
            self._finish(engine, step)

    def _begin(self, engine: Engine, step: Step) -> None:
        """Checks, then the instruction reads its sources as it starts; its writes wait for its completion."""
        now = int(self.env.now)
        self.start[step.index] = now
        for extent in step.extents:
            problem = self.memories.check(extent)
            if problem:
                raise self._fault(step, problem)
        if self.races:
            self.races.start(step, now)
        try:
            self.pending[engine] = step.semantics(self.datapath, step.instr, step.registers)
        except ExecutionFault as err:
            raise self._fault(step, str(err)) from None
        self.occupancy.write(step.extents, now)

    def _finish(self, unit: Engine, step: Step) -> None:
        """The instruction's results land, then it signals."""
        if unit is not Engine.CONTROL:
            for write in self.pending[unit]:
                write.commit()
        self.end[step.index] = self.env.now
        self.units[unit].instructions += 1
        if unit is Engine.CONTROL:
            self.units[unit].busy += 1  # NOP and END take their cycle in the dispatcher
        self.completed += 1
        if self.progress is not None and self.completed % PROGRESS_EVERY == 0:
            self.progress(self.completed, len(self.steps))
        self._signal(step)

    def _transfer(self, step: Step, stats: UnitStats):
        """A LOAD's or STORE's DRAM requests, committed to the shared controller a window at a time."""
        env = self.env
        began = env.now
        if self.ideal_dram:
            yield env.timeout(1)
            stats.busy += 1
            return
        transfer = step.transfer
        cost = profile(transfer.box, self.config)
        burst = self.config.dma_burst_bytes
        pad_cycles = -(-step.pad_bytes // burst)
        sizes, window, is_write = cost.sizes, self.dram.window, transfer.into_dram
        ready, done = began, began
        for at in range(0, len(sizes), window):
            issue = self.dram.earliest_issue(ready)
            if issue > env.now:
                yield env.timeout(issue - env.now)
            last_issue, done = self.dram.commit(sizes[at:at + window], env.now, is_write)
            ready = last_issue + 1
        end = max(done, began + pad_cycles, began + 1)
        if end > env.now:
            yield env.timeout(end - env.now)
        took = end - began
        busy = min(max(cost.data_cycles, pad_cycles), took)
        shared = max(0, took - max(cost.unshared_cycles, pad_cycles))
        stats.busy += busy
        self._stalled(step.engine, step, "dram_bandwidth", shared)
        self._stalled(step.engine, step, "dram_latency", took - busy - shared)

    def _deadlock(self) -> DeadlockError:
        now = int(self.env.now)
        parts, first = [], None
        for unit, state in self.waiting.items():
            if state is None:
                continue
            kind, step = state
            name = describe(step.index, step.mnemonic, step.layer)
            if kind == "semaphore":
                sem, count = step.wait
                where = "dispatcher" if unit is Engine.CONTROL else f"{unit.value} engine"
                parts.append(f"{where}: {name} waits for s{sem} >= {count} (s{sem} = {self.semaphores.value[sem]})")
                first = step.index if first is None else min(first, step.index)
            elif kind == "queue_full":
                parts.append(f"dispatcher: {name} waits for room in the full {step.engine.value} queue")
            else:
                parts.append(f"{unit.value} engine: waits for {name} to be dispatched")
        if first is None:
            first = min(s.index for s in self.steps if self.end[s.index] < 0)
        return DeadlockError(f"deadlock at cycle {now} with {len(self.steps) - self.completed} instructions "
                             f"unfinished: {'; '.join(parts)}", first, now)
