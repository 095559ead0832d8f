"""The reference NPU's SimPy simulator: functional and timed execution of NPU programs and binaries.

`sim.simulator.simulate` runs decoded instructions from a DRAM image; `sim.binding.run_binary` runs
an `.npub` with inputs bound by name. One SimPy process per engine plus the dispatcher
(`sim.machine`) executes each instruction's integer semantics and times it by the datasheet, both
carried by its ISA record (`isa.table`; `sim.steps`, `sim.timing`, `sim.dram`); `sim.races` is checked mode's race detector; `sim.results`,
`sim.report` and `sim.trace` turn a run into reports and a Chrome trace; `sim.bench` times the
simulator on a ResNet-50-shaped program.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .errors import DeadlockError, Fault, RaceError, SimError, SimInputError

__all__ = ["DeadlockError", "Fault", "RaceError", "SimError", "SimInputError", "SimResult", "simulate"]

_LAZY = {"SimResult": "results", "simulate": "simulator"}

if TYPE_CHECKING:
    from .results import SimResult
    from .simulator import simulate


def __getattr__(name: str):
    """The simulator loads on first use: `sim.scalesim`, which shares none of it, does not wait for
    the ISA tables and SimPy to import."""
    if name not in _LAZY:
        raise AttributeError(f"module 'sim' has no attribute '{name}'")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
