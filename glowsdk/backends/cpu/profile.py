"""Where a compiled network's time goes, kernel by kernel (compile with the `profile` option).

The module counts each step's cycles (codegen/counters.py); this converts them
to milliseconds per run with the cycle counter's rate, measured against the
host clock, and adds each Conv and MatMul step's achieved GFLOP/s (multiply-adds
x 2 from the instruction's shapes). `glowsdk bench --profile` prints the table.
"""
from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ...errors import GlowError
from ...table import format_table
from .codegen.counters import COUNTERS, CYCLES
from .codegen.threads import instruction_flops

CALIBRATION_SECONDS = 0.05


@dataclass(frozen=True)
class StepTime:
    """One step's share of a run: its name and kinds, milliseconds per run, FLOP per run, and the model
    (ONNX) node it computes with that node's op type ("-" and "" when it comes from none)."""

    name: str
    kinds: str
    milliseconds: float
    flops: int
    node: str = "-"
    op: str = ""

    @property
    def gflops(self) -> float | None:
        return self.flops / self.milliseconds / 1e6 if self.flops and self.milliseconds else None

    def as_dict(self) -> dict[str, Any]:
        return {"onnx_node": self.node, "onnx_op": self.op, "step": self.name, "kinds": self.kinds,
                "ms": self.milliseconds, "flops": self.flops, "gflops": self.gflops}


def cycles_per_second(compiled: Any) -> float:
    """The cycle counter's rate, from the module's `glowsdk_cycles` against the host clock."""
    clock = compiled.jit.functions[CYCLES]
    start_cycles, start = clock(), time.perf_counter()
    time.sleep(CALIBRATION_SECONDS)
    return (clock() - start_cycles) / (time.perf_counter() - start)


def profile_steps(compiled: Any, feeds: Mapping[str, np.ndarray], runs: int = 10) -> list[StepTime]:
    """Run `compiled` (a CpuFunction built with the profile option) `runs` times after one warm-up;
    each step's mean time per run, slowest first."""
    if COUNTERS not in compiled.jit.functions or not compiled.steps:
        raise GlowError("cpu profile: compile with the profile option (glowsdk bench --profile) to count cycles")
    compiled.execute(feeds)
    counters = (ctypes.c_int64 * len(compiled.steps)).from_address(compiled.jit.functions[COUNTERS]())
    ctypes.memset(counters, 0, ctypes.sizeof(counters))
    for _ in range(runs):
        compiled.execute(feeds)
    rate = cycles_per_second(compiled)
    times = [StepTime(step.name, "+".join(i.kind for i in step.instrs), 1e3 * counters[i] / rate / runs,
                      sum(instruction_flops(instr) for instr in step.instrs), *_model_node(compiled, step.instrs))
             for i, step in enumerate(compiled.steps)]
    return sorted(times, key=lambda t: -t.milliseconds)


def _model_node(compiled: Any, instrs: list) -> tuple[str, str]:
    """The model node a step computes: that of its first instruction that came from one (a fused
    step's head, the Conv or MatMul, comes first)."""
    for instr in instrs:
        origin = getattr(compiled, "origins", {}).get(instr.name)
        if origin is not None:
            return origin.name, origin.op_type
    return "-", ""


def format_profile(times: list[StepTime], top: int = 25) -> str:
    """The `top` slowest steps as a table, then the time per kind and the total."""
    total = sum(t.milliseconds for t in times) or 1.0
    rows = [[t.node, t.op, t.name, t.kinds, f"{t.milliseconds:.3f}", f"{100 * t.milliseconds / total:.1f}",
             f"{t.gflops:.1f}" if t.gflops else ""] for t in times[:top]]
    by_kind: dict[str, list[StepTime]] = {}
    for t in times:
        by_kind.setdefault(t.kinds.split("+")[0], []).append(t)
    kinds = sorted(by_kind.items(), key=lambda item: -sum(t.milliseconds for t in item[1]))
    kind_rows = []
    for kind, steps in kinds:
        ms, flops = sum(t.milliseconds for t in steps), sum(t.flops for t in steps)
        kind_rows.append([kind, len(steps), f"{ms:.3f}", f"{100 * ms / total:.1f}",
                          f"{flops / ms / 1e6:.1f}" if flops and ms else ""])
    kind_rows.append(["TOTAL", len(times), f"{total:.3f}", "100.0", ""])
    return (format_table(["ONNX node", "op", "step", "kinds", "ms/run", "%", "GFLOP/s"], rows,
                         "ONNX node: the model node the step computes (its first); step: the kernel; kinds: "
                         "the instructions fused into it; %: of the run") + "\n\n"
            + format_table(["first kind", "steps", "ms/run", "%", "GFLOP/s"], kind_rows))
