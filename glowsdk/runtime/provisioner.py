"""The Provisioner (paper 6.1): compiles each partition for its device kind and loads it on devices.

NPU partitions compile to `.npub` binaries for the NPUs' architecture preset; CPU partitions
compile as `fallback` says: "cpu" (the default) with the cpu backend, or the interpreter when the
cpu backend cannot run an op; "interpreter" with the interpreter; None refuses, on a host with
NPUs, a CPU partition that computes more than int8 <-> float conversions. Placement takes the
largest NPU partitions first, each on the NPU with the most free memory among those not yet
holding a partition of the same network (so a network larger than one device spreads out), then
duplicates every NPU partition on the other NPUs with room, idle ones first, up to
`max_replicas` copies: a small network ends up on every device, and requests spread over them.
CPU partitions go on every CPU device. If a partition finds no device with room now, everything
the network took is given back and the network is refused.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..backends.registry import get_backend
from ..compiler.backend import Backend, CompileOptions
from ..compiler.pipeline import compile_function
from ..errors import GlowError
from .devices import DeviceManager, NpuDeviceManager
from .partitioner import CONVERSIONS, CPU, NPU, NetworkRefused, Partition, PartitionPlan

HOST_BACKENDS: dict[str | None, tuple[str, ...]] = {"cpu": ("cpu", "interpreter"), "interpreter": ("interpreter",),
                                                    None: ("cpu", "interpreter")}
"""The backends that compile CPU partitions, tried in order, for each `fallback` (None: conversions only)."""


@dataclass
class Placement:
    """Where a network's partitions live: partition index -> (device, key) of each replica."""

    network: str
    replicas: dict[int, list[tuple[DeviceManager, str]]] = field(default_factory=dict)

    def copies(self) -> list[tuple[DeviceManager, str]]:
        return [r for rs in self.replicas.values() for r in rs]


class Provisioner:
    """Compiles partitions for, and loads them on, the host's devices."""

    def __init__(self, devices: list[DeviceManager], npu_config: str | None, max_replicas: int | None = None,
                 fallback: str | None = "cpu") -> None:
        if fallback not in HOST_BACKENDS:
            raise GlowError(f"unknown host fallback '{fallback}' (known: cpu, interpreter, or None to refuse)")
        self.devices = devices
        self.npu_config = npu_config
        self.max_replicas = max_replicas
        self.fallback = fallback

    def of_kind(self, kind: str) -> list[DeviceManager]:
        return [d for d in self.devices if d.kind == kind]

    def compile(self, partition: Partition) -> int | None:
        """Compile `partition` into its artefact and size it; None if a device of its kind is large enough,
        else the largest such capacity (the partitioner's `fit`)."""
        if partition.kind == NPU:
            npu: Backend = get_backend("npu")
            compiled = compile_function(partition.function, npu, CompileOptions(extra={"config": self.npu_config}))
            partition.artefact, partition.backend = compiled.binary, "npu"
            partition.memory_bytes = max(d.need(compiled.binary) for d in self.of_kind(NPU)
                                         if isinstance(d, NpuDeviceManager))
        else:
            computed = {k: n for k, n in partition.ops.items() if k not in CONVERSIONS}
            if self.fallback is None and computed and self.of_kind(NPU):
                ops = ", ".join(f"{k} x{n}" if n > 1 else k for k, n in computed.items())
                raise NetworkRefused(f"partition {partition.index} would run {ops} on the host CPU (the NPUs do "
                                     f"not run them in int8), and the host fallback is off (fallback none)")
            partition.artefact, partition.backend = compile_host(partition, HOST_BACKENDS[self.fallback])
            partition.memory_bytes = sum(int(np.asarray(c.value).nbytes)
                                         for c in partition.function.module.constants.values())
        capacities = [d.capacity_bytes for d in self.of_kind(partition.kind)]
        if not capacities:
            raise NetworkRefused(f"partition {partition.index} needs a {partition.kind.upper()} device, "
                                 f"and the host has none")
        return None if partition.memory_bytes <= max(capacities) else max(capacities)

    def provision(self, plan: PartitionPlan) -> Placement:
        """Load every partition of `plan` on its devices; NetworkRefused (all undone) if one finds no room."""
        placement = Placement(plan.network)
        try:
            npu_parts = sorted((p for p in plan.partitions if p.kind == NPU), key=lambda p: -p.memory_bytes)
            for part in npu_parts:
                self._place(placement, part, self._npu_order(placement, part, first=True), plan.network, limit=1)
            for part in npu_parts:
                self._place(placement, part, self._npu_order(placement, part, first=False), plan.network,
                            limit=(self.max_replicas or len(self.devices)) - 1, required=False)
            for part in plan.partitions:
                if part.kind == CPU:
                    self._place(placement, part, self.of_kind(CPU), plan.network, limit=len(self.devices))
        except Exception:
            self.release(placement)
            raise
        return placement

    def _npu_order(self, placement: Placement, part: Partition, first: bool) -> list[DeviceManager]:
        """NPUs not holding this partition: spreading the network (first copy) or idle devices (replicas) first."""
        mine = {id(d) for d, _ in placement.copies()}
        holding = {id(d) for d, _ in placement.replicas.get(part.index, [])}
        candidates = [d for d in self.of_kind(NPU) if id(d) not in holding]
        if first:
            return sorted(candidates, key=lambda d: (id(d) in mine, -d.free_bytes()))
        return sorted(candidates, key=lambda d: (len(d.resident), -d.free_bytes()))

    def _place(self, placement: Placement, part: Partition, order: list[DeviceManager], network: str, limit: int,
               required: bool = True) -> None:
        placed = placement.replicas.setdefault(part.index, [])
        for device in order:
            if limit <= 0:
                return
            if device.fits(part.artefact, part.memory_bytes):
                key = f"{network}/p{part.index}@{len(placed)}"
                device.load(key, part.artefact, part.memory_bytes)
                device.resident.add(key)
                placed.append((device, key))
                limit -= 1
        if required and not placed:
            free = ", ".join(f"{d.name} {d.free_bytes()}" for d in order) or "none"
            raise NetworkRefused(f"network '{network}': partition {part.index} needs {part.memory_bytes} bytes "
                                 f"of {part.kind.upper()} memory, and no device has room now (free bytes: {free})")

    @staticmethod
    def release(placement: Placement) -> None:
        """Unload every replica of a placement. A copy a device refuses to unload stays in the placement and
        does not keep the others loaded: the first refusal is raised after all the others are unloaded."""
        refused: list[str] = []
        for index, copies in list(placement.replicas.items()):
            kept = []
            for device, key in copies:
                try:
                    device.unload(key)
                except GlowError as err:
                    refused.append(str(err))
                    kept.append((device, key))
                    continue
                device.resident.discard(key)
            if kept:
                placement.replicas[index] = kept
            else:
                del placement.replicas[index]
        if refused:
            raise GlowError(f"network '{placement.network}': {len(refused)} partition copy(ies) could not be "
                            f"unloaded; the first: {refused[0]}")


def compile_host(partition: Partition, backends: tuple[str, ...] = HOST_BACKENDS["cpu"]) -> tuple[object, str]:
    """The partition compiled by the first of `backends` that takes it (by default the cpu backend,
    or the interpreter when the cpu backend refuses it)."""
    for name in backends[:-1]:
        try:
            return compile_function(partition.function, get_backend(name), CompileOptions()), name
        except GlowError:
            pass
    return compile_function(partition.function, get_backend(backends[-1]), CompileOptions()), backends[-1]

