"""Run a program on the simulated NPU: the entry point for tests, tools and the CLI.

`simulate` takes decoded instructions, a configuration and an initial DRAM image (address ->
bytes) and returns a `SimResult` holding the final memories, the timeline and the reports.
`checked=True` adds race detection (`sim.races`); out-of-bounds accesses, static and dynamic
faults and deadlock are detected in every mode, since the machine cannot run past them.
`ideal_dram=True` makes every LOAD and STORE take one cycle (unbounded bandwidth, no latency),
which isolates the compute engines' timing.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Sequence

import threadpoolctl
from threadpoolctl import threadpool_limits

from isa.config import ArchConfig
from isa.encoding import Instr
from isa.roofline import Workload
from isa.sections import DebugRange

from .machine import Machine
from .memory import DramImage, Memories
from .results import SimResult
from .steps import prepare


class _OneBlasThread:
    """Hold BLAS to one thread while any simulation runs, and give back the count found before the first.

    MATMUL's products are small, and spinning BLAS threads on a busy machine cost far more. The
    limit is process-wide, so simulations on several threads (the runtime's devices) share it: the
    first to enter sets it, the last to leave restores it, under one lock. A `threadpool_limits`
    block per simulation did not do: one entering while another ran recorded that one's limit of
    1 as the count to restore, and threadpoolctl (3.8 here) lets only the thread that took control
    of a shared (pthreads) OpenBLAS pool change it, silently ignoring the others, so the whole
    process could stay on one BLAS thread. Here the first and last simulation may be on different threads, so control
    is released around each change, and no device thread keeps it (it would silence the main
    thread's own limits for as long as the device lives).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._limit: threadpool_limits | None = None

    def __enter__(self) -> None:
        with self._lock:
            if self._running == 0:
                _release_blas_control()
                self._limit = threadpool_limits(limits=1, user_api="blas")
                _release_blas_control()
            self._running += 1

    def __exit__(self, *exc_info) -> None:
        with self._lock:
            self._running -= 1
            if self._running == 0:
                _release_blas_control()
                self._limit.restore_original_limits()
                _release_blas_control()
                self._limit = None


def _release_blas_control() -> None:
    """Let any thread set OpenBLAS's shared pool next (a threadpoolctl without `clear_controlling_thread`
    does not tie the pool to a thread)."""
    release = getattr(getattr(threadpoolctl, "OpenBLASController", None), "clear_controlling_thread", None)
    if release is not None:
        release(force=True)


ONE_BLAS_THREAD = _OneBlasThread()


def simulate(program: Sequence[Instr], config: ArchConfig, *, dram: DramImage | None = None,
             layers: Sequence[DebugRange] = (), workloads: Sequence[Workload | None] | None = None,
             checked: bool = False, ideal_dram: bool = False, array_model: str = "closed",
             progress: Callable[[int, int], None] | None = None) -> SimResult:
    """Execute `program` from reset on `config`, DRAM initialised from `dram`; raises a SimError on a fault,
    a race (checked mode) or deadlock. `workloads` (one per layer, isa.roofline) give the roofline bound;
    `progress` is told (instructions completed, in all) now and then; `array_model` is a `sim.timing.ARRAY_MODELS`
    name (the matrix engine's closed form, or fold by fold)."""
    began = time.perf_counter()
    steps = prepare(program, config, layers, array_model)
    reach = [x.stop for s in steps for x in s.extents if x.memory == "dram" and x.stop <= config.dram_bytes]
    memories = Memories(config, max(reach, default=0), dram)
    with ONE_BLAS_THREAD:
        timeline = Machine(steps, config, memories, checked=checked, ideal_dram=ideal_dram,
                           progress=progress).run()
    return SimResult(config, steps, timeline, memories, list(layers), checked=checked, ideal_dram=ideal_dram,
                     wall_seconds=time.perf_counter() - began,
                     workloads=None if workloads is None else list(workloads))
