"""Running a compiled program on several threads of this process (`threads` compile option).

The caller's thread and every worker that joins a run run the module's thread
entry (codegen/module.py); the heavy kernels are cut into chunks the threads take
until none are left, so no thread waits for one that is not on a core
(codegen/threads.py). The threads are a persistent pool living in the
machine code (codegen/pool.py): `ThreadPool` starts `threads - 1` Python threads
once, each of which enters `glowsdk_worker` and stays there (ctypes releases the
GIL for the whole foreign call), and every run is one `glowsdk_run` call from
the caller's thread. `close` (also when the pool is collected) stops and joins
the workers before the machine code may go away.

Workers are pinned, worker i to the i-th CPU this process may run on (Linux;
option `pin_threads`, default on), the caller's thread is not. Unpinned, a worker
woken after an idle spell was often placed on the caller's CPU, where the two
took turns at every barrier until the scheduler moved one away: on the 2-vCPU
development machine the first runs of a 0.2 ms MLP after a pause took 3.3, 3.0
and 2.3 ms, pinned 1.2, 0.4 and 0.2 ms.
"""
from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Callable

import numpy as np

from ...errors import UnsupportedError
from .codegen.pool import POOL_BYTES, RUN, STOP, WORKER
from .codegen.threads import MAX_THREADS
from .image import aligned_bytes


def thread_count(value: Any) -> int:
    """The `threads` option checked: a whole number from 1 to MAX_THREADS."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_THREADS:
        raise UnsupportedError(f"the cpu backend's threads option must be a whole number from 1 to "
                               f"{MAX_THREADS}, got {value!r}")
    return value


class ThreadPool:
    """`threads - 1` workers parked in the machine code of `jit`, plus the caller as thread 0."""

    def __init__(self, jit: Any, threads: int, pin: bool = True) -> None:
        self.threads = threads
        self._state = aligned_bytes(POOL_BYTES)
        self._run = jit.functions[RUN]
        worker, stop, state = jit.functions[WORKER], jit.functions[STOP], self._state.ctypes.data
        cpus = sorted(os.sched_getaffinity(0)) if pin and hasattr(os, "sched_setaffinity") else []
        workers = [threading.Thread(target=_pinned(worker, cpus[index % len(cpus)]) if cpus else worker,
                                    args=(state, index), daemon=True, name=f"glowsdk-cpu-{index}")
                   for index in range(1, threads)]
        for thread in workers:
            thread.start()
        self._closer = weakref.finalize(self, _stop, jit, stop, state, self._state, workers)

    def run(self, constants: int, activations: int, placeholders: int) -> int:
        """Run the program once on every thread; 0, or the status of a thread that failed."""
        return self._run(self._state.ctypes.data, constants, activations, placeholders, self.threads)

    def close(self) -> None:
        """Stop and join the workers (idempotent)."""
        self._closer()


def _pinned(worker: Callable[[int, int], int], cpu: int) -> Callable[[int, int], int]:
    """`worker`, entered on a thread that first binds itself to `cpu`."""
    def enter(state: int, index: int) -> int:
        os.sched_setaffinity(0, {cpu})
        return worker(state, index)
    return enter


def _stop(jit: Any, stop: Any, state: int, buffer: np.ndarray, workers: list[threading.Thread]) -> None:
    """Make the workers return and wait for them; `jit` and `buffer` stay referenced until then."""
    stop(state)
    for thread in workers:
        thread.join()
