"""The reference NPU's SimPy simulator: functional and timed execution of NPU programs and binaries.

`sim.simulator.simulate` runs decoded instructions from a DRAM image; `sim.binding.run_binary` runs
an `.npub` with inputs bound by name. One SimPy process per engine plus the dispatcher
(`sim.machine`) executes each instruction's integer semantics and times it by the datasheet, both
carried by its ISA record (`isa.table`; `sim.steps`, `sim.timing`, `sim.dram`); `sim.races` is checked mode's race detector; `sim.results`,
`sim.report` and `sim.trace` turn a run into reports and a Chrome trace; `sim.bench` times the
simulator on a ResNet-50-shaped program.
"""
from .errors import DeadlockError, Fault, RaceError, SimError, SimInputError
from .results import SimResult
from .simulator import simulate

__all__ = ["DeadlockError", "Fault", "RaceError", "SimError", "SimInputError", "SimResult", "simulate"]
