"""The synchronisation hardware on SimPy: counting semaphores and bounded in-order instruction queues.

Both create a SimPy event only when a unit must block, so an instruction that finds its
semaphore already signalled or its queue not full costs no extra event. Tokens are counts only:
checked mode takes the ordering they give from the program (`sim.races`), not from this hardware.
"""
from __future__ import annotations

from collections import deque

import simpy

from isa.behaviour import ExecutionFault

from .steps import Step

SEMAPHORE_MAX = 65535


class Semaphores:
    """Counters s0..s(n-1): a wait takes `count` once the counter holds it; a signal adds."""

    def __init__(self, env: simpy.Environment, count: int) -> None:
        self.env = env
        self.value = [0] * count
        self.waiters: list[list[tuple[int, simpy.Event]]] = [[] for _ in range(count)]

    def acquire(self, sem: int, count: int) -> simpy.Event | None:
        """None when the wait is satisfied (and taken) now; else an event triggered when it is."""
        if self.value[sem] >= count:
            self.value[sem] -= count
            return None
        event = self.env.event()
        self.waiters[sem].append((count, event))
        return event

    def release(self, sem: int, count: int) -> None:
        """Add `count`; wake, in arrival order, every waiter that is now satisfied."""
        value = self.value[sem] + count
        if value > SEMAPHORE_MAX:
            raise ExecutionFault(f"signal s{sem} by {count} overflows its counter ({self.value[sem]} + {count} > "
                                 f"{SEMAPHORE_MAX})")
        self.value[sem] = value
        waiting = self.waiters[sem]
        for entry in list(waiting):
            need, event = entry
            if self.value[sem] >= need:
                waiting.remove(entry)
                self.value[sem] -= need
                event.succeed()


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
