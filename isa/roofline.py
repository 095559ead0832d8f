"""The roofline lower bound of an NPU binary: one formula, on the layers the binary executes.

A binary's layers are the ranges of its debug table. The compiler records, per layer, the work no
schedule can avoid (`Workload`): for a convolution or matrix layer, its MACs and the bytes it must
move at least once (every constant it reads: filters, int32 bias, requantize table; its inputs,
including the residual operand an epilogue adds; its output, after the fused element-wise chain).
The layer's bound is

    max(MACs / peak MACs per cycle, (weight + input + output bytes) / DRAM bytes per cycle)

where the peak is the array's R x C, or the vector engine's lanes for a depthwise convolution
(one input channel per group: the array cannot fill its columns with it). Every other layer
(pooling, element-wise, copies, softmax, lookup tables) records no workload and is free: its
bound is 0. The network's bound is the sum over the layers. Element-wise steps fused into a
convolution's epilogue are part of that layer, never layers of their own, so the bound counts no
DRAM round trip the binary does not make.

The records travel in the binary's metadata (key `roofline`, one entry per debug range, `null`
for a free layer), so `glowsdk compile --report`, `glowsdk simulate` and the benchmarks all
read the same numbers and compute the same bound (`vendor_guide/npu_architecture.md`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .config import ArchConfig

UNITS = ("array", "vector")
"""The unit whose peak bounds a layer's compute: the systolic array, or the vector lanes (depthwise)."""
METADATA_KEY = "roofline"
FIELDS = ("macs", "unit", "weight_bytes", "input_bytes", "output_bytes")


@dataclass(frozen=True)
class Workload:
    """What one convolution or matrix layer must do at least, whatever its tiling."""

    macs: int
    unit: str
    weight_bytes: int
    input_bytes: int
    output_bytes: int

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.input_bytes + self.output_bytes

    def compute_cycles(self, config: ArchConfig) -> float:
        peak = config.macs_per_cycle if self.unit == "array" else config.vector_lanes
        return self.macs / peak

    def memory_cycles(self, config: ArchConfig) -> float:
        return self.bytes / config.dram_bytes_per_cycle

    def cycles(self, config: ArchConfig) -> float:
        """The layer's lower bound."""
        return max(self.compute_cycles(config), self.memory_cycles(config))

    def limit(self, config: ArchConfig) -> str:
        """'compute' when the MAC term is the larger, else 'memory'."""
        return "compute" if self.compute_cycles(config) >= self.memory_cycles(config) else "memory"


def network_bound(workloads: list[Workload | None], config: ArchConfig) -> float:
    """The sum of the layers' bounds; free layers add nothing."""
    return sum(w.cycles(config) for w in workloads if w is not None)


def to_metadata(workloads: list[Workload | None]) -> list[dict[str, Any] | None]:
    """The metadata entry: one object (or null) per debug range, in order."""
    return [None if w is None else asdict(w) for w in workloads]


def from_metadata(metadata: dict[str, Any], layers: int) -> list[Workload | None] | None:
    """The records a binary carries (None if it carries none), checked against its `layers` debug ranges.

    Raises ValueError naming the first entry that is not a record this module writes."""
    entries = metadata.get(METADATA_KEY)
    if entries is None:
        return None
    if not isinstance(entries, list) or len(entries) != layers:
        raise ValueError(f"metadata '{METADATA_KEY}' must list one entry per debug range ({layers})")
    out: list[Workload | None] = []
    for index, entry in enumerate(entries):
        if entry is None:
            out.append(None)
            continue
        if not isinstance(entry, dict) or sorted(entry) != sorted(FIELDS) or entry["unit"] not in UNITS or any(
                type(entry[k]) is not int or entry[k] < 0 for k in FIELDS if k != "unit"):
            raise ValueError(f"metadata '{METADATA_KEY}' entry {index} is not a workload record "
                             f"({', '.join(FIELDS)}; unit one of {', '.join(UNITS)}; counts non-negative integers)")
        out.append(Workload(**entry))
    return out
