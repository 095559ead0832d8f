"""The architect's view of a run: energy (total, per layer, per component), area, SRAM/DRAM access counts and
stall cycles by root cause per layer, as JSON-ready data and as text.

The counts come from `sim.accesses` and the vector-engine work in each ISA record's timing; energies and areas
from `sim.energy`'s table; stalls from `sim.stalls`. Layers are the binary's debug ranges; what
runs outside every layer (the program's prologue) is in the totals only.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from isa.config import ArchConfig
from isa.sections import DebugRange, Region
from isa.schema import Engine
from glowsdk.table import format_table

from .accesses import as_tree, step_accesses
from .energy import COMPONENTS, EnergyTable, area_um2, energy_pj, table_json
from .stalls import CAUSES, StallCauses
from .steps import Step


def _vector_work(step: Step) -> tuple[int, int]:
    """(simple lane operations, multiplying lane operations) of one vector-engine instruction."""
    if step.engine is not Engine.VECTOR or step.problem:
        return 0, 0
    timing = step.instr.spec.timing
    work = timing.work(step.instr, step.registers) if timing.work else 0
    return (0, work) if timing.multiplies else (work, 0)


class _Span:
    """Counts over a range of instructions."""

    def __init__(self) -> None:
        self.accesses: Counter = Counter()
        self.macs = self.ops = self.muls = 0

    def add(self, step: Step, accesses: Counter) -> None:
        self.accesses.update(accesses)
        self.macs += step.macs
        ops, muls = _vector_work(step)
        self.ops += ops
        self.muls += muls

    def energy(self, config: ArchConfig, table: EnergyTable) -> dict[str, float]:
        return energy_pj(self.accesses, self.macs, self.ops, self.muls, config, table)


def architect_report(config: ArchConfig, steps: list[Step], layers: list[DebugRange], start, end, waits,
                     cycles: int, table: EnergyTable, weights: Region | None) -> dict[str, Any]:
    """Energy, area, access counts and stall causes of a run, per layer and in total."""
    per_step = [step_accesses(s, config, weights) for s in steps]
    whole = _Span()
    for step, counts in zip(steps, per_step):
        whole.add(step, counts)
    causes = StallCauses(steps, start, end, waits)
    rows = []
    for layer in layers:
        span = _Span()
        for index in range(layer.start, min(layer.stop, len(steps))):
            span.add(steps[index], per_step[index])
        energy = span.energy(config, table)
        rows.append({"name": layer.name, "kind": layer.kind, "macs": span.macs,
                     "energy_pj": {"total": sum(energy.values()), **energy},
                     "accesses_bytes": as_tree(span.accesses),
                     "stall_cycles": causes.layer(layer.start, min(layer.stop, len(steps)))})
    energy = whole.energy(config, table)
    joules = sum(energy.values()) * 1e-12
    area = area_um2(config, table)
    return {
        "energy_table": table_json(table),
        "energy_pj": {"total": joules * 1e12, **energy},
        "pj_per_mac": joules * 1e12 / whole.macs if whole.macs else None,
        "inferences_per_joule": 1.0 / joules if joules else None,
        "average_power_w": joules / (cycles / (config.clock_ghz * 1e9)) if cycles else None,
        "area_mm2": {"total": sum(area.values()) / 1e6, **{k: v / 1e6 for k, v in area.items()}},
        "accesses_bytes": as_tree(whole.accesses),
        "stall_causes": list(CAUSES),
        "layers": rows,
    }


def _uj(pj: float) -> str:
    return f"{pj / 1e6:.3f}"


SHORT = {"dram_bandwidth": "DRAM bw", "dram_latency": "DRAM lat", "matrix": "matrix", "vector": "vector",
         "dispatch": "dispatch"}


def format_architect(report: dict[str, Any], origins: dict[str, tuple[str, str]] | None = None) -> str:
    """Energy and area headline, then per layer: energy by component; access counts and matrix-engine stalls.
    `origins` (layer -> ONNX node, op) names each layer after the model's node, as the other tables do."""
    origins = origins or {}

    def named(row: dict) -> list[str]:
        return [origins.get(row["name"], ("-", ""))[0], row["name"]]

    e, a = report["energy_pj"], report["area_mm2"]
    lines = [f"energy        {e['total'] / 1e9:.4g} mJ per inference ({report['energy_table']['node']}; leakage not "
             f"modelled); uJ: " + ", ".join(f"{c} {_uj(e[c])}" for c in COMPONENTS)]
    if report["pj_per_mac"]:
        lines.append(f"              {report['pj_per_mac']:.3f} pJ/MAC, {report['inferences_per_joule']:,.1f} "
                     f"inferences/J, {report['average_power_w']:.3f} W average")
    lines += [f"area          {a['total']:.3f} mm^2: " + ", ".join(f"{k} {v:.3f}" for k, v in a.items() if k != "total"),
              ""]
    layers = report["layers"]
    lines.append(format_table(["ONNX node", "layer", "energy (uJ)", *(f"{c} (uJ)" for c in COMPONENTS)],
                              [[*named(r), _uj(r["energy_pj"]["total"]), *(_uj(r["energy_pj"][c]) for c in COMPONENTS)]
                               for r in layers]))
    rows = []
    for row in layers:
        acc = row["accesses_bytes"]

        def moved(memories: tuple[str, ...], direction: str) -> str:
            return f"{sum(sum(acc.get(m, {}).get(direction, {}).values()) for m in memories):,}"

        stalls = row["stall_cycles"].get("matrix", {})
        rows.append([*named(row), moved(("spad", "acc"), "read"), moved(("spad", "acc"), "write"),
                     moved(("dram",), "read"), moved(("dram",), "write"), *(f"{stalls.get(c, 0):,}" for c in CAUSES)])
    lines += ["", format_table(["ONNX node", "layer", "SRAM read (B)", "SRAM written (B)", "DRAM read (B)", "DRAM written (B)",
                                *(f"stall: {SHORT[c]}" for c in CAUSES)], rows,
                               "stall: the matrix engine's stall cycles by root cause (a wait on a semaphore is booked "
                               "to what the signalling\ninstruction waited for, sim/stalls.py); `--report json` has "
                               "every engine, buffer and operand")]
    return "\n".join(lines)
