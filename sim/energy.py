"""Energy and area: a per-action energy table and per-component areas, applied to a run's counts.

Dynamic energy = sum over actions of count x energy per action (the Accelergy method: actions
counted by the simulator, energies from a table). The default table is the 45 nm one of
M. Horowitz, "Computing's energy problem (and what we can do about it)", ISSCC 2014, with the
assumptions marked in `EnergyTable`; vendor_guide/energy_area.md lists every entry with its
source. SRAM energy per byte grows with the array's size as a power law through Horowitz's 8 KiB,
32 KiB and 1 MiB points. Leakage is not modelled. A TOML file overrides any entry
(`glowsdk simulate --energy-table FILE`).
"""
from __future__ import annotations

import math
import tomllib
from collections import Counter
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from isa.config import ArchConfig

from .errors import SimInputError

COMPONENTS = ("matrix", "vector", "scratchpad", "accumulator", "dram", "dma")


@dataclass(frozen=True)
class EnergyTable:
    """Energy per action (pJ) and area per component (um^2) at one technology node."""

    node: str = "45 nm (Horowitz, ISSCC 2014)"
    mac_pj: float = 0.3
    """int8 multiply (0.2 pJ) + int32 accumulate (0.1 pJ)."""
    vector_op_pj: float = 0.1
    """one int32 lane operation (a 32-bit add)."""
    vector_mul_pj: float = 3.1
    """one int32 lane multiply (REQUANT, VDIV): a 32-bit multiply."""
    sram_8kib_pj_per_byte: float = 1.25
    """an 8 KiB SRAM access: 10 pJ per 64 bits."""
    sram_size_exponent: float = 0.4746
    """energy grows as size^x: 10 pJ (8 KiB) -> 100 pJ (1 MiB) per 64 bits gives x = ln 10 / ln 128."""
    dram_pj_per_byte: float = 162.5
    """DRAM: 1.3 nJ per 64 bits (the low end of Horowitz's 1.3-2.6 nJ)."""
    dma_pj_per_byte: float = 0.125
    """DMA engine and on-chip interconnect: assumption, 1 pJ per 64 bits moved."""
    mac_um2: float = 419.0
    """8-bit multiplier (282 um^2) + 32-bit adder (137 um^2); pipeline registers not included."""
    vector_lane_um2: float = 3632.0
    """32-bit multiplier (3495 um^2) + 32-bit adder (137 um^2)."""
    sram_um2_per_byte: float = 3.95
    """45 nm 6T bitcell 0.346 um^2 (Mistry et al., IEDM 2007) x 8 bits / 70 % array efficiency (assumption)."""
    dma_engine_um2: float = 50_000.0
    """per DMA engine: assumption."""
    control_um2: float = 100_000.0
    """dispatcher, queues and semaphores: assumption."""

    def sram_pj_per_byte(self, size_bytes: int) -> float:
        """Energy of one byte read or written in an SRAM of `size_bytes` (reads and writes cost the same)."""
        return self.sram_8kib_pj_per_byte * (size_bytes / 8192) ** self.sram_size_exponent


DEFAULT_TABLE = EnergyTable()


def load_energy_table(path: str | Path) -> EnergyTable:
    """Entries of a TOML file replace the defaults; unknown keys and non-numbers are one-line errors."""
    where = str(path)
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise SimInputError(f"{where}: cannot read ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, ValueError, RecursionError) as exc:
        raise SimInputError(f"{where}: not a valid TOML energy table ({' '.join(str(exc).split())[:120]})") from None
    known = {f.name: f for f in fields(EnergyTable)}
    changes = {}
    for key, value in data.items():
        if key not in known:
            raise SimInputError(f"{where}: unknown key {key!r} (known: {', '.join(known)})")
        if key == "node":
            if not isinstance(value, str):
                raise SimInputError(f"{where}: key 'node': expected a string")
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise SimInputError(f"{where}: key {key!r} = {value!r} is not a non-negative number")
        changes[key] = value if key == "node" else float(value)
    return replace(DEFAULT_TABLE, **changes)


def area_um2(config: ArchConfig, table: EnergyTable) -> dict[str, float]:
    """Area per component (um^2); DRAM is off chip."""
    return {"matrix": config.macs_per_cycle * table.mac_um2,
            "vector": config.vector_lanes * table.vector_lane_um2,
            "scratchpad": config.scratchpad_bytes * table.sram_um2_per_byte,
            "accumulator": config.accumulator_bytes * table.sram_um2_per_byte,
            "dma": 2 * table.dma_engine_um2,
            "control": table.control_um2}


def energy_pj(accesses: Counter, macs: int, vector_ops: int, vector_muls: int, config: ArchConfig,
              table: EnergyTable) -> dict[str, float]:
    """Energy per component (pJ) of the actions counted: MACs, vector operations, SRAM/DRAM/DMA bytes."""
    by_memory = Counter()
    moved = 0
    for (memory, _direction, kind), n in accesses.items():
        by_memory[memory] += n
        if kind in ("weights", "activations"):
            moved += n
    return {"matrix": macs * table.mac_pj,
            "vector": vector_ops * table.vector_op_pj + vector_muls * table.vector_mul_pj,
            "scratchpad": by_memory["spad"] * table.sram_pj_per_byte(config.scratchpad_bytes),
            "accumulator": by_memory["acc"] * table.sram_pj_per_byte(config.accumulator_bytes),
            "dram": by_memory["dram"] * table.dram_pj_per_byte,
            "dma": moved * table.dma_pj_per_byte}


def table_json(table: EnergyTable) -> dict:
    return asdict(table)
