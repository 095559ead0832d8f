"""The datasheet's timing model for everything but DRAM: cycles per instruction, from the ISA table.

Each record of the ISA table carries its timing (`isa.behaviour.Timing`): the matrix engine's
SCALE-Sim closed forms (`isa.families.matrix`), a vector instruction's pipeline fill plus its work
spread over the lanes, one cycle for control and configuration. LOAD and STORE have no static cost:
their time is the DRAM's (`sim.dram`). The formulas the compiler's tilers share are exported here.
"""
from __future__ import annotations

from isa.behaviour import Registers, vector_cycles
from isa.config import ArchConfig
from isa.encoding import Instr
from isa.families.matrix import ARRAY_MODELS, grouped_matmul_cycles, matmul_cycles, matmul_cycles_by_fold

__all__ = ["ARRAY_MODELS", "grouped_matmul_cycles", "macs", "matmul_cycles", "matmul_cycles_by_fold", "static_cycles",
           "vector_cycles"]


def static_cycles(instr: Instr, registers: Registers, config: ArchConfig, array_model: str = "closed") -> int | None:
    """Cycles `instr` occupies its engine, or None for a DRAM transfer (timed dynamically); `array_model` is one
    of `ARRAY_MODELS`."""
    cycles = instr.spec.timing.cycles
    return None if cycles is None else cycles(instr, registers, config, array_model)


def macs(instr: Instr) -> int:
    """Multiply-accumulates an instruction performs (the matrix engine's)."""
    count = instr.spec.timing.macs
    return 0 if count is None else count(instr)
