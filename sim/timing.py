"""The datasheet's timing model for everything but DRAM: cycles per instruction, from the ISA table.

Each row of the ISA table gets its rule here, by mnemonic or by family, and the module checks at
import that no row is left without one. Matrix-engine cycles are the SCALE-Sim closed forms, built
from the per-fold cost of the dataflow; vector instructions cost a pipeline fill plus their work
spread over the lanes. LOAD and STORE have no static cost: their time is the DRAM's (`sim.dram`).
"""
from __future__ import annotations

from typing import Callable

from isa.config import ArchConfig
from isa.encoding import Instr
from isa.program import LUT_BYTES, ProgramError, Registers, pool_output
from isa.table import INSTRUCTIONS


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def matmul_folds(rows: int, k: int, n: int, dataflow: str, config: ArchConfig) -> int:
    """Array passes of one MATMUL: K x N folds weight-stationary, P x N folds output-stationary."""
    r, c = config.array_rows, config.array_cols
    spread = _ceil(k, r) if dataflow == "ws" else _ceil(rows, r)
    return spread * _ceil(n, c)


def matmul_cycles(rows: int, k: int, n: int, dataflow: str, config: ArchConfig) -> int:
    """Stall-free MATMUL cycles (SCALE-Sim): folds x per-fold cost, minus the one overlapped cycle.

    Weight-stationary, a fold preloads R rows of weights, skews P input rows in over R + C - 2 cycles
    of fill and drain: 2R + C + P - 2. Output-stationary, a fold streams K steps of both operands
    through the R + C - 2 cycles of skew: R + C + K - 2.
    """
    r, c = config.array_rows, config.array_cols
    per_fold = 2 * r + c + rows - 2 if dataflow == "ws" else r + c + k - 2
    return matmul_folds(rows, k, n, dataflow, config) * per_fold - 1


def matmul_cycles_by_fold(rows: int, k: int, n: int, dataflow: str, config: ArchConfig) -> int:
    """Stall-free MATMUL cycles fold by fold, each fold filling and draining over only the PEs it uses.

    A weight-stationary fold with kr weight rows and nc columns preloads kr rows, streams the P
    inputs skewed over its kr rows and nc columns, and its sums still cross all R rows to the
    array's edge: kr + P + R + nc - 2. An output-stationary fold of pr x nc results streams K steps
    skewed over its pr rows and nc columns: K + pr + nc - 2. Summed over the folds (the kr add up
    to K, the nc to N, the pr to P), less the one overlapped cycle. When every fold is full (R
    divides K, or P, and C divides N) this is `matmul_cycles`; otherwise it is smaller.
    """
    r, c = config.array_rows, config.array_cols
    n_folds = _ceil(n, c)
    if dataflow == "ws":
        k_folds = _ceil(k, r)
        return n_folds * k + k_folds * n + k_folds * n_folds * (rows + r - 2) - 1
    p_folds = _ceil(rows, r)
    return n_folds * rows + p_folds * n + p_folds * n_folds * (k - 2) - 1


ARRAY_MODELS = {"closed": matmul_cycles, "folds": matmul_cycles_by_fold}
"""The matrix engine's timing models: every fold as a full one (the datasheet's closed form, SCALE-Sim's), or
fold by fold (partial folds fill and drain faster)."""


def _matmul(i: Instr, r: Registers, config: ArchConfig, array_model: str = "closed") -> int:
    """A MATMUL's cycles; a dataflow the array does not have is a static fault (a ProgramError)."""
    if r["dataflow"] not in config.dataflows:
        raise ProgramError(f"MATMUL in the {r['dataflow']} dataflow, but the array of architecture '{config.name}' "
                           f"is {config.dataflow}-only")
    return ARRAY_MODELS[array_model](i.rows, i.k, i.n, r["dataflow"], config)


def vector_cycles(work: int, config: ArchConfig) -> int:
    """Pipeline fill plus `work` elements over the lanes."""
    return config.vector_pipeline_cycles + _ceil(work, config.vector_lanes)


def _pool_work(i: Instr, r: Registers) -> int:
    oh, ow = pool_output(i, r)
    return oh * ow * i.channels * r["kh"] * r["kw"]


DIVIDE_CYCLES = 4
"""Lane-cycles per VDIV element: the divider is iterative (radix-4 over a 64-bit dividend, pipelined)."""

VECTOR_WORK: dict[str, Callable[[Instr, Registers], int]] = {
    "vector-binary": lambda i, r: i.rows * i.cols,
    "vector-immediate": lambda i, r: i.count,
    "REQUANT": lambda i, r: i.rows * i.cols,
    "CLAMP": lambda i, r: i.count,
    "LUT": lambda i, r: i.count,
    "LUT_LOAD": lambda i, r: LUT_BYTES,
    "POOL": _pool_work,
    "REDUCE": lambda i, r: i.rows * i.cols,
    "LUT32": lambda i, r: i.count,
    "VDIV": lambda i, r: DIVIDE_CYCLES * i.rows * i.cols,
    "VMAC": lambda i, r: i.rows * i.cols,
}
"""Elements of work per vector-engine instruction (the datasheet's timing table)."""

CycleRule = Callable[[Instr, Registers, ArchConfig], "int | None"]


def _vector(i: Instr, r: Registers, config: ArchConfig) -> int:
    rule = VECTOR_WORK.get(i.mnemonic) or VECTOR_WORK[i.spec.family]
    return vector_cycles(rule(i, r), config)


def _one(i: Instr, r: Registers, config: ArchConfig) -> int:
    return 1


CYCLES: dict[str, CycleRule] = {
    "control": _one,
    "dma-config": _one,
    "matrix-config": _one,
    "vector-config": _one,
    "LUT_LOAD": _vector,
    "dma": lambda i, r, config: None,
    "matrix": lambda i, r, config: _matmul(i, r, config),
    "vector-binary": _vector,
    "vector-immediate": _vector,
    "vector-unary": _vector,
    "vector-divide": _vector,
    "vector-mac": _vector,
}
"""Rule per mnemonic or family: an instruction's cycles on its engine, None when DRAM decides."""

_MISSING = [s.mnemonic for s in INSTRUCTIONS if s.mnemonic not in CYCLES and s.family not in CYCLES]
if _MISSING:
    raise ImportError(f"sim.timing: no timing rule for {', '.join(_MISSING)}")


def static_cycles(instr: Instr, registers: Registers, config: ArchConfig, array_model: str = "closed") -> int | None:
    """Cycles `instr` occupies its engine, or None for a DRAM transfer (timed dynamically); `array_model` is one
    of `ARRAY_MODELS`."""
    if instr.mnemonic == "MATMUL" and array_model != "closed":
        return _matmul(instr, registers, config, array_model)
    rule = CYCLES.get(instr.mnemonic) or CYCLES[instr.spec.family]
    return rule(instr, registers, config)


def macs(instr: Instr) -> int:
    """Multiply-accumulates an instruction performs (MATMUL only)."""
    return instr.rows * instr.k * instr.n if instr.mnemonic == "MATMUL" else 0
