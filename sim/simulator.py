"""Run a program on the simulated NPU: the entry point for tests, tools and the CLI.

`simulate` takes decoded instructions, a configuration and an initial DRAM image (address ->
bytes) and returns a `SimResult` holding the final memories, the timeline and the reports.
`checked=True` adds race detection (`sim.races`); out-of-bounds accesses, static and dynamic
faults and deadlock are detected in every mode, since the machine cannot run past them.
`ideal_dram=True` makes every LOAD and STORE take one cycle (unbounded bandwidth, no latency),
which isolates the compute engines' timing.
"""
from __future__ import annotations

import time
from typing import Sequence

from threadpoolctl import threadpool_limits

from isa.config import ArchConfig
from isa.encoding import Instr
from isa.sections import DebugRange

from .machine import Machine
from .memory import DramImage, Memories
from .results import SimResult
from .steps import prepare


def simulate(program: Sequence[Instr], config: ArchConfig, *, dram: DramImage | None = None,
             layers: Sequence[DebugRange] = (), checked: bool = False, ideal_dram: bool = False) -> SimResult:
    """Execute `program` from reset on `config`, DRAM initialised from `dram`; raises a SimError on a fault,
    a race (checked mode) or deadlock."""
    began = time.perf_counter()
    steps = prepare(program, config, layers)
    reach = [x.stop for s in steps for x in s.extents if x.memory == "dram" and x.stop <= config.dram_bytes]
    memories = Memories(config, max(reach, default=0), dram)
    # One BLAS thread: MATMUL's products are small, and spinning BLAS threads on a busy machine cost far more.
    with threadpool_limits(limits=1, user_api="blas"):
        timeline = Machine(steps, config, memories, checked=checked, ideal_dram=ideal_dram).run()
    return SimResult(config, steps, timeline, memories, list(layers), checked=checked, ideal_dram=ideal_dram,
                     wall_seconds=time.perf_counter() - began)
