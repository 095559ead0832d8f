"""Static cycle counts of the op lists a layer's pipeline emits, before they are instructions in a program.

The prefetch planners (prefetch.py, pieces.py, operands_ahead.py) place loads in the gaps of the layer's static
timing: they need each step's load, product and vector cycles from its ops alone.
"""
from __future__ import annotations

from isa.config import ArchConfig
from isa.encoding import Instr, make_instr
from isa.program import with_registers
from sim.timing import matmul_cycles, static_cycles

from .instructions import Op
from .pipeline import Step


def vector_cycles(ops: list[Op], config: ArchConfig) -> int:
    """The cycles a list of vector-engine operations occupies it."""
    return sum(static_cycles(instr, registers, config) or 0
               for instr, registers in with_registers(as_instrs(ops), config))


def load_cycles(program: list[Instr], config: ArchConfig, transfer: str = "LOAD") -> float:
    """The DRAM cycles of a program's LOADs (or STOREs), each paying the request latency, at full bandwidth."""
    size, total = 1, 0.0
    for instr in program:
        if instr.mnemonic == "CONFIG_" + transfer:
            size = instr.elem_bytes
        elif instr.mnemonic == transfer:
            total += config.dram_latency_cycles + instr.planes * instr.rows * instr.cols * size / \
                config.dram_bytes_per_cycle
    return total


def products_cycles(step: Step, config: ArchConfig) -> int:
    """The array's cycles for a step's products, each in its CONFIG_MATMUL's dataflow."""
    total, flow = 0, config.reset_dataflow
    for op in step.matmuls:
        if op.mnemonic == "CONFIG_MATMUL":
            flow = op.fields["dataflow"]
        elif op.mnemonic == "MATMUL":
            total += matmul_cycles(op.fields["rows"], op.fields["k"], op.fields["n"], flow, config)
    return total


def as_instrs(ops: list[Op]) -> list[Instr]:
    """The ops as the instructions they encode (to read their registers and extents)."""
    return [make_instr(op.mnemonic, **op.fields) for op in ops]


def step_times(loads: list[float], arrays: list[float], after: dict[int, float],
               extra: dict[int, float] | None = None) -> tuple[list[float], list[float]]:
    """The double-buffered pipeline's static timing of a layer's steps (pipeline.py): a step's loads start once the
    loads before them are done and the step two back has left the array (its slot), its matrix work once they are in
    and the step before is done. `loads` and `arrays` are each step's load and matrix cycles, `after` the load cycles
    a step's tile adds after it (its residual operands), `extra` load cycles inserted before a step's loads. Returns,
    by step, when the load engine is done with what comes before the step's loads, and when its matrix work ends."""
    extra = extra or {}
    free: list[float] = []
    ends: list[float] = []
    loaded = 0.0
    for g, (load, array) in enumerate(zip(loads, arrays)):
        free.append(loaded)
        loaded = max(loaded, ends[g - 2] if g >= 2 else 0.0) + extra.get(g, 0.0) + load
        ends.append(max(loaded, ends[-1] if ends else 0.0) + array)
        loaded += after.get(g, 0.0)
    return free, ends
