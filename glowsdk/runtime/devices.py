"""Device managers (paper 6.1): one per device, each running one thing at a time on its own worker.

A DeviceManager loads partitions under a key, runs them (`submit` returns a Future), and keeps
the hardware's account: busy time in the device's own clock (simulated seconds on an NPU, wall
seconds on the CPU), runs, failures, work queued. A vendor adds a device type by subclassing it:
`kind`, `capacity_bytes`, `free_bytes`, `fits`, `load`, `unload` and `execute` (see
vendor_guide/runtime.md).
"""
from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from firmware_runtime import NpuDevice
from isa.container import NpuBinary, pack_npub

from ..compiler.backend import CompiledFunction


@dataclass(frozen=True)
class PartitionRun:
    """A partition's outputs and the time it took on the device's clock."""

    outputs: dict[str, np.ndarray]
    seconds: float
    device: str


class DeviceManager(ABC):
    """The host's handle on one device."""

    kind: str

    def __init__(self, name: str) -> None:
        self.name = name
        self.busy_seconds = 0.0
        self.runs = 0
        self.failures = 0
        self.pending = 0
        self.resident: set[str] = set()
        """Keys of the partitions loaded here (kept by the provisioner)."""
        self._lock = threading.Lock()
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"glowsdk-{name}")

    @property
    @abstractmethod
    def capacity_bytes(self) -> int:
        """Memory the device offers to networks."""

    @abstractmethod
    def free_bytes(self) -> int:
        """Memory still free."""

    @abstractmethod
    def fits(self, artefact: object, need: int) -> bool:
        """Whether `artefact`, needing `need` bytes, could be loaded now."""

    @abstractmethod
    def load(self, key: str, artefact: object, need: int) -> None:
        """Make a compiled partition, needing `need` bytes, resident under `key`."""

    @abstractmethod
    def unload(self, key: str) -> None:
        """Free what `load` took."""

    @abstractmethod
    def execute(self, key: str, inputs: Mapping[str, np.ndarray]) -> PartitionRun:
        """Run a loaded partition (on the worker thread); raise on a device error."""

    def submit(self, key: str, inputs: Mapping[str, np.ndarray]) -> Future:
        """Queue a run; the future holds its PartitionRun or its error."""
        with self._lock:
            self.pending += 1
        return self._worker.submit(self._account, key, inputs)

    def _account(self, key: str, inputs: Mapping[str, np.ndarray]) -> PartitionRun:
        try:
            run = self.execute(key, inputs)
        except Exception:
            with self._lock:
                self.failures += 1
                self.pending -= 1
            raise
        with self._lock:
            self.busy_seconds += run.seconds
            self.runs += 1
            self.pending -= 1
        return run

    def shutdown(self) -> None:
        self._worker.shutdown(wait=True)


class NpuDeviceManager(DeviceManager):
    """A simulated NPU driven through its firmware (`firmware_runtime.NpuDevice`)."""

    kind = "npu"

    def __init__(self, device: NpuDevice) -> None:
        super().__init__(device.name)
        self.device = device

    @property
    def capacity_bytes(self) -> int:
        return self.device.allocator.capacity

    def free_bytes(self) -> int:
        return self.device.stats().free

    def need(self, binary: NpuBinary) -> int:
        """Device DRAM the binary takes once placed (each region in its own aligned block)."""
        return sum(self.device.allocator.rounded(r.size) for r in binary.plan.regions().values())

    def fits(self, artefact: object, need: int) -> bool:
        """Each region in a hole, placed largest first as the allocator would find them."""
        holes = sorted((size for _, size in self.device.allocator.holes()), reverse=True)
        for region in sorted((self.device.allocator.rounded(r.size) for r in artefact.plan.regions().values()),
                             reverse=True):
            at = next((i for i, size in enumerate(holes) if size >= region), None)
            if at is None:
                return False
            holes[at] -= region
            holes.sort(reverse=True)
        return True

    def load(self, key: str, artefact: object, need: int) -> None:
        self.device.load(key, pack_npub(artefact))

    def unload(self, key: str) -> None:
        self.device.unload(key)

    def execute(self, key: str, inputs: Mapping[str, np.ndarray]) -> PartitionRun:
        run = self.device.run(key, inputs)
        return PartitionRun(run.outputs, run.seconds, self.name)


class HeldDeviceManager(DeviceManager):
    """A device holding compiled functions in memory of a fixed size: the accounting the CPU and a plugin
    device whose compiled functions execute themselves (vendor_guide/example_backend) share."""

    def __init__(self, name: str, memory_bytes: int) -> None:
        super().__init__(name)
        self.memory_bytes = memory_bytes
        self.loaded: dict[str, tuple[CompiledFunction, int]] = {}

    @property
    def capacity_bytes(self) -> int:
        return self.memory_bytes

    def free_bytes(self) -> int:
        return self.memory_bytes - sum(need for _, need in self.loaded.values())

    def fits(self, artefact: object, need: int) -> bool:
        return need <= self.free_bytes()

    def load(self, key: str, artefact: object, need: int) -> None:
        self.loaded[key] = (artefact, need)

    def unload(self, key: str) -> None:
        del self.loaded[key]


class CpuDeviceManager(HeldDeviceManager):
    """The host CPU: partitions compiled by the cpu backend (or the interpreter), timed by the wall clock."""

    kind = "cpu"

    def __init__(self, name: str = "cpu0", memory_bytes: int = 8 << 30) -> None:
        super().__init__(name, memory_bytes)

    def execute(self, key: str, inputs: Mapping[str, np.ndarray]) -> PartitionRun:
        compiled, _ = self.loaded[key]
        began = time.perf_counter()
        outputs = compiled.execute(dict(inputs))
        return PartitionRun(outputs, time.perf_counter() - began, self.name)
