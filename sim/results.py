"""What a simulation found: cycles and latency, per-layer roofline rows, per-unit accounts, SRAM peaks.

A layer is a range of the binary's debug table. Its cycles run from the first start to the last end
of its data-moving and computing instructions (configuration runs ahead on idle engines and does
not count; layers can overlap when DMA runs ahead); its ideal cycles are the MACs its MATMULs do
over R x C. Its roofline bound is the one of `isa.roofline`, from the workload the binary records
for it (a layer without one is free; a binary recording none has no bound): the compute and memory
terms, the larger of the two, and the ratio of the simulated cycles to it. Arithmetic intensity is
in ops per DRAM byte actually moved (2 per MAC), the unit of the datasheet's ridge point.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from isa.config import ArchConfig, config_hash
from isa.roofline import Workload, network_bound
from isa.schema import Engine
from isa.sections import DebugRange, Region

from .architect import architect_report
from .energy import DEFAULT_TABLE, EnergyTable
from .machine import STALLS, Timeline
from .memory import Memories
from .steps import ENGINES, Step

UNIT_NAMES = {Engine.CONTROL: "dispatcher", Engine.LOAD: "load DMA", Engine.STORE: "store DMA",
              Engine.MATRIX: "matrix", Engine.VECTOR: "vector"}


@dataclass(frozen=True)
class LayerRow:
    """One layer's (or the whole program's) timing against its roofline."""

    name: str
    kind: str
    first: int
    stop: int
    cycles: int
    macs: int
    ideal_cycles: float
    utilisation: float
    dram_read: int
    dram_written: int
    intensity: float | None
    bound: str
    """'compute' or 'memory' (the larger term), 'free', or '-' when the binary records no workloads"""
    compute_bound: float | None
    memory_bound: float | None
    roofline_cycles: float | None
    ratio: float | None
    """simulated cycles / roofline cycles (None when the bound is 0 or unknown)"""


@dataclass(frozen=True)
class UnitRow:
    """One unit's cycles: busy + stalled (by reason) + idle = the run's cycles."""

    unit: str
    instructions: int
    busy: int
    stalled: int
    idle: int
    stalls: dict[str, int]


class SimResult:
    """A finished run: the timeline, the final memories, and the reports derived from them."""

    def __init__(self, config: ArchConfig, steps: list[Step], timeline: Timeline, memories: Memories,
                 layers: list[DebugRange], *, checked: bool, ideal_dram: bool, wall_seconds: float,
                 workloads: list[Workload | None] | None = None) -> None:
        if workloads is not None and len(workloads) != len(layers):
            raise ValueError(f"{len(workloads)} workloads for {len(layers)} layers")
        self.config, self.steps, self.timeline, self.memories = config, steps, timeline, memories
        self.workloads = workloads
        self.layers, self.checked, self.ideal_dram, self.wall_seconds = layers, checked, ideal_dram, wall_seconds
        self.origins: dict[str, tuple[str, str]] = {}
        """Layer name -> (ONNX node name, op type) of the model node it implements, where the binary says."""
        self.macs = np.array([s.macs for s in steps], np.int64)
        self.works = np.array([s.engine is not Engine.CONTROL and not s.instr.spec.family.endswith("-config")
                               for s in steps], np.bool_)
        """Instructions that move or compute data; configuration runs ahead and does not delimit a layer."""
        self.read = np.array([s.dram_bytes if s.mnemonic == "LOAD" else 0 for s in steps], np.int64)
        self.written = np.array([s.dram_bytes if s.mnemonic == "STORE" else 0 for s in steps], np.int64)
        self.energy_table: EnergyTable = DEFAULT_TABLE
        self.weights: Region | None = None
        """The DRAM region holding the weights (the binary's constants), to tell weight reads from activations."""
        self._architect: dict[str, Any] | None = None

    def architect(self) -> dict[str, Any]:
        """Energy, area, access counts and stall causes (`sim.architect`), computed once."""
        if self._architect is None:
            t = self.timeline
            self._architect = architect_report(self.config, self.steps, self.layers, t.start, t.end, t.waits,
                                               self.cycles, self.energy_table, self.weights)
        return self._architect

    @property
    def cycles(self) -> int:
        return self.timeline.cycles

    @property
    def seconds(self) -> float:
        """Latency at the configuration's clock."""
        return self.cycles / (self.config.clock_ghz * 1e9)

    def _row(self, name: str, kind: str, first: int, stop: int, work: list[Workload | None] | None) -> LayerRow:
        """One row over instructions [first, stop) whose layers record `work` (None: no records)."""
        cfg = self.config
        span = slice(first, stop)
        timed = self.works[span] if self.works[span].any() else np.ones(stop - first, np.bool_)
        starts, ends = self.timeline.start[span][timed], self.timeline.end[span][timed]
        cycles = int(ends.max() - starts.min()) if stop > first else 0
        macs, read, written = (int(a[span].sum()) for a in (self.macs, self.read, self.written))
        ideal = macs / cfg.macs_per_cycle
        intensity = 2 * macs / (read + written) if read + written else None
        if work is None:
            return LayerRow(name, kind, first, stop, cycles, macs, ideal, ideal / cycles if cycles else 0.0, read,
                            written, intensity, "-", None, None, None, None)
        real = [w for w in work if w is not None]
        compute = sum(w.compute_cycles(cfg) for w in real)
        memory = sum(w.memory_cycles(cfg) for w in real)
        bound = network_bound(work, cfg)
        limit = "free" if not real else "compute" if compute >= memory else "memory"
        return LayerRow(name, kind, first, stop, cycles, macs, ideal, ideal / cycles if cycles else 0.0, read,
                        written, intensity, limit, compute, memory, bound, cycles / bound if bound else None)

    def layer_rows(self) -> list[LayerRow]:
        """A row per debug-table layer, in program order."""
        works = self.workloads
        return [self._row(r.name, r.kind, r.start, r.stop, None if works is None else [works[k]])
                for k, r in enumerate(self.layers)]

    def total_row(self) -> LayerRow:
        """The whole program; its bound is the network's (the sum of the layers' bounds)."""
        row = self._row("(total)", "", 0, len(self.steps), self.workloads)
        bound = row.roofline_cycles
        return LayerRow(**{**asdict(row), "cycles": self.cycles,
                           "utilisation": row.ideal_cycles / self.cycles if self.cycles else 0.0,
                           "ratio": self.cycles / bound if bound else None})

    def unit_rows(self) -> list[UnitRow]:
        rows = []
        for unit in (Engine.CONTROL, *ENGINES):
            stats = self.timeline.units[unit]
            stalled = sum(stats.stalls.values())
            rows.append(UnitRow(UNIT_NAMES[unit], stats.instructions, stats.busy, stalled,
                                max(0, self.cycles - stats.busy - stalled), dict(stats.stalls)))
        return rows

    def summary(self) -> dict[str, Any]:
        """Everything, as JSON-ready data."""
        cfg = self.config
        total = self.total_row()
        moved = total.dram_read + total.dram_written
        return {
            "config": {"name": cfg.name, "hash": config_hash(cfg)},
            "mode": {"checked": self.checked, "ideal_dram": self.ideal_dram},
            "cycles": self.cycles,
            "latency_seconds": self.seconds,
            "instructions": len(self.steps),
            "macs": total.macs,
            "utilisation": total.utilisation,
            "dram": {"bytes_read": total.dram_read, "bytes_written": total.dram_written,
                     "bytes_per_cycle": moved / self.cycles if self.cycles else 0.0,
                     "peak_bytes_per_cycle": cfg.dram_bytes_per_cycle},
            "sram": {memory: {"peak_bytes": u.peak_bytes, "capacity_bytes": u.capacity_bytes,
                              "peak_cycle": u.peak_cycle} for memory, u in self.timeline.usage.items()},
            "units": [asdict(r) for r in self.unit_rows()],
            "stall_reasons": list(STALLS),
            "layers": [asdict(r) for r in self.layer_rows()],
            "total": asdict(total),
            "architect": self.architect(),
            "simulator": {"wall_seconds": self.wall_seconds,
                          "instructions_per_second": len(self.steps) / self.wall_seconds if self.wall_seconds else 0.0},
        }
