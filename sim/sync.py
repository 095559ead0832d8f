"""The synchronisation hardware on SimPy: counting semaphores and bounded in-order instruction queues.

Both create a SimPy event only when a unit must block, so an instruction that finds its
semaphore already signalled or its queue not full costs no extra event. In checked mode each
semaphore also carries the vector clocks of its signals as tokens (`sim.races`).
"""
from __future__ import annotations

from collections import deque

import simpy

from .races import Clock, join
from .semantics import ExecutionFault
from .steps import Step

SEMAPHORE_MAX = 65535


class Semaphores:
    """Counters s0..s(n-1): a wait takes `count` once the counter holds it; a signal adds."""

    def __init__(self, env: simpy.Environment, count: int, checked: bool) -> None:
        self.env = env
        self.value = [0] * count
        self.waiters: list[list[tuple[int, simpy.Event]]] = [[] for _ in range(count)]
        self.tokens: list[deque[list]] | None = [deque() for _ in range(count)] if checked else None

    def _take(self, sem: int, count: int) -> Clock | None:
        self.value[sem] -= count
        if self.tokens is None:
            return None
        clock: Clock = []
        tokens = self.tokens[sem]
        while count:
            token = tokens[0]
            used = min(count, token[0])
            clock = join(clock, token[1]) if clock else token[1]
            token[0] -= used
            count -= used
            if not token[0]:
                tokens.popleft()
        return clock

    def acquire(self, sem: int, count: int) -> tuple[simpy.Event | None, Clock | None]:
        """(None, clock) when the wait is satisfied now; else an event whose value is the clock when it is."""
        if self.value[sem] >= count:
            return None, self._take(sem, count)
        event = self.env.event()
        self.waiters[sem].append((count, event))
        return event, None

    def release(self, sem: int, count: int, clock: Clock | None) -> None:
        """Add `count` (tokens carrying `clock`); wake, in arrival order, every waiter that is now satisfied."""
        value = self.value[sem] + count
        if value > SEMAPHORE_MAX:
            raise ExecutionFault(f"signal s{sem} by {count} overflows its counter ({self.value[sem]} + {count} > "
                                 f"{SEMAPHORE_MAX})")
        self.value[sem] = value
        if self.tokens is not None:
            self.tokens[sem].append([count, clock])
        waiting = self.waiters[sem]
        for entry in list(waiting):
            need, event = entry
            if self.value[sem] >= need:
                waiting.remove(entry)
                event.succeed(self._take(sem, need))


class InstrQueue:
    """One engine's queue of dispatched instructions; the head leaves when its engine starts it."""

    def __init__(self, env: simpy.Environment, depth: int) -> None:
        self.env = env
        self.depth = depth
        self.items: deque[Step] = deque()
        self._arrival: simpy.Event | None = None
        self._space: simpy.Event | None = None

    def full(self) -> bool:
        return len(self.items) >= self.depth

    def push(self, step: Step) -> None:
        self.items.append(step)
        if self._arrival is not None:
            event, self._arrival = self._arrival, None
            event.succeed()

    def pop(self) -> None:
        self.items.popleft()
        if self._space is not None:
            event, self._space = self._space, None
            event.succeed()

    def arrival(self) -> simpy.Event:
        """Triggered by the next push (the engine waits on an empty queue)."""
        self._arrival = self.env.event()
        return self._arrival

    def space(self) -> simpy.Event:
        """Triggered by the next pop (the dispatcher waits on a full queue)."""
        self._space = self.env.event()
        return self._space
