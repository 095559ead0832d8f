"""The HostManager (paper 6.2): the one interface a user of several devices sees.

    host = HostManager([NpuDeviceManager(NpuDevice(name=f"npu{i}")) for i in range(4)] + [CpuDeviceManager()])
    host.add_network("digits", network, quantization=config)
    response = host.run("digits", {"image": x}).result()

`add_network` partitions the network (Partitioner), then compiles and loads the partitions
(Provisioner); a network that fits nowhere is refused there, with the reason. `run` returns a
Future of a `Response` at once; the Executor drives the request through the partition DAG.
`remove_network` stops new requests for the network, waits for those in flight (a failed request
is in flight until none of its partitions is still on a device), and unloads it. A name is
reserved while its network is being added: a second `add_network` of it is refused at once.

Back-pressure: at most `queue_size` requests are in flight. When all slots are taken, `run`
either waits for one (`when_full="block"`, for at most `block_timeout` seconds, then QueueFull)
or raises QueueFull at once (`when_full="reject"`). Either way nothing is dropped silently.
"""
from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Self

import numpy as np

from ..backends.registry import get_backend
from ..errors import GlowError
from ..graph.function import Function
from ..quantization import QuantizationConfig, calibration_random, collect_profile
from .devices import DeviceManager, NpuDeviceManager
from .executor import RequestRun
from .partitioner import NPU, PartitionPlan, partition
from .provisioner import Placement, Provisioner

POLICIES = ("block", "reject")


class QueueFull(GlowError):
    """A request refused by back-pressure: every request slot is taken."""


@dataclass
class _Network:
    plan: PartitionPlan
    placement: Placement
    in_flight: int = 0
    removing: bool = False


class HostManager:
    """Owns the devices; adds, runs and removes networks."""

    def __init__(self, devices: Sequence[DeviceManager], *, queue_size: int = 64, when_full: str = "block",
                 block_timeout: float | None = None, retry: bool = True, max_replicas: int | None = None) -> None:
        if when_full not in POLICIES:
            raise GlowError(f"unknown back-pressure policy '{when_full}' (known: {', '.join(POLICIES)})")
        if queue_size < 1:
            raise GlowError(f"queue_size must be at least 1, got {queue_size}")
        names = [d.name for d in devices]
        if len(set(names)) != len(names):
            raise GlowError(f"device names must be unique, got {', '.join(names)}")
        npus = [d for d in devices if isinstance(d, NpuDeviceManager)]
        configs = {d.device.config.name for d in npus}
        if len(configs) > 1:
            raise GlowError(f"every NPU must have the same architecture preset, got {', '.join(sorted(configs))}")
        self.devices = list(devices)
        self.queue_size, self.when_full, self.block_timeout, self.retry = queue_size, when_full, block_timeout, retry
        self.provisioner = Provisioner(self.devices, next(iter(configs), None), max_replicas)
        self.networks: dict[str, _Network] = {}
        self._adding: set[str] = set()
        """Names whose `add_network` is under way (reserved, not yet in `networks`)."""
        self._slots = threading.Semaphore(queue_size)
        self._lock = threading.Condition()

    # -- networks ------------------------------------------------------------------------------
    def add_network(self, name: str, network: Function | object,
                    quantization: QuantizationConfig | None = None) -> PartitionPlan:
        """Partition, compile and load a network (a Function or a `glowsdk.api.Network`).

        NPU partitions are int8: without `quantization`, the network is profiled on two seeded random
        calibration inputs (fine for throughput, not for accuracy: give a real profile).
        """
        function = network if isinstance(network, Function) else network.function
        with self._lock:
            if name in self.networks or name in self._adding:
                raise GlowError(f"a network named '{name}' is already added")
            self._adding.add(name)
        try:
            npu = None
            if self.provisioner.of_kind(NPU):
                npu = get_backend("npu")
                if quantization is None:
                    quantization = QuantizationConfig(collect_profile(network, calibration_random(network, 2)))
            plan = partition(name, function, quantization, npu, self.provisioner.compile)
            placement = self.provisioner.provision(plan)
            with self._lock:
                self.networks[name] = _Network(plan, placement)
        finally:
            with self._lock:
                self._adding.discard(name)
        return plan

    def remove_network(self, name: str) -> None:
        """Refuse new requests for `name`, wait for its requests in flight, then unload it everywhere."""
        with self._lock:
            entry = self._entry(name)
            entry.removing = True
            self._lock.wait_for(lambda: entry.in_flight == 0)
            del self.networks[name]
        self.provisioner.release(entry.placement)

    def _entry(self, name: str) -> _Network:
        entry = self.networks.get(name)
        if entry is None or entry.removing:
            raise GlowError(f"no network named '{name}' (added: {', '.join(self.networks) or 'none'})")
        return entry

    # -- requests ------------------------------------------------------------------------------
    def run(self, name: str, inputs: Mapping[str, np.ndarray]) -> Future:
        """Start a request; the Future holds its `Response`, or RequestFailed. QueueFull per the policy."""
        with self._lock:
            entry = self._entry(name)
        blocking = self.when_full == "block"
        if not self._slots.acquire(blocking=blocking, timeout=self.block_timeout if blocking else None):
            raise QueueFull(f"request for '{name}' refused: all {self.queue_size} request slots are taken "
                            f"(policy '{self.when_full}')")
        with self._lock:
            if entry.removing:
                self._slots.release()
                raise GlowError(f"network '{name}' is being removed")
            entry.in_flight += 1

        def done() -> None:
            with self._lock:
                entry.in_flight -= 1
                self._lock.notify_all()
            self._slots.release()

        return RequestRun(entry.plan, entry.placement, inputs, retry=self.retry, on_done=done).start()

    def close(self) -> None:
        """Remove every network and stop the devices' workers; the first error, if any, after all of it."""
        errors: list[GlowError] = []
        for name in list(self.networks):
            try:
                self.remove_network(name)
            except GlowError as err:
                errors.append(err)
        for device in self.devices:
            device.shutdown()
        if errors:
            raise errors[0]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
