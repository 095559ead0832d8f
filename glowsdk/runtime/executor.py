"""The Executor (paper 6.1-6.2): one request through the partition DAG, asynchronously.

A request starts every partition whose inputs it already has; when a partition completes on its
device (a callback on that device's worker), its outputs join the request's tensors and every
partition whose inputs are now all there is dispatched. Nothing blocks a thread while it waits.
Each partition goes to the replica with the least work queued. The request's device time is the
longest chain of partition times through the DAG (simulated seconds on NPUs, wall seconds on the
CPU), which is its latency on otherwise idle devices.

Retry policy: a device error (`DeviceFault`) moves the partition to a replica on another device
that has not failed for this request, when `retry` is on and one exists; otherwise the request
fails with `RequestFailed`, which names the device error. Any other error fails the request.

A failed request's future fails at once, but the request stays in flight (`on_done` is not
called) until every partition it had submitted has settled: a branch still running on another
device holds its network there, so `remove_network` waits for it rather than evicting a network
that runs. Nothing more is dispatched for a request whose future is done.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from firmware_runtime import DeviceError, DeviceFault

from ..errors import GlowError
from .devices import DeviceManager, PartitionRun
from .partitioner import PartitionPlan
from .provisioner import Placement


class RequestFailed(GlowError):
    """A request that could not complete; `device_error` is the device's record when a device failed."""

    def __init__(self, message: str, device_error: DeviceError | None = None) -> None:
        super().__init__(message)
        self.device_error = device_error


@dataclass
class Response:
    """A completed request: the network's outputs, its device time, wall time, and where each part ran."""

    outputs: dict[str, np.ndarray]
    device_seconds: float
    wall_seconds: float
    devices: dict[int, str] = field(default_factory=dict)
    retries: int = 0


class RequestRun:
    """The state of one request in flight."""

    def __init__(self, plan: PartitionPlan, placement: Placement, inputs: Mapping[str, np.ndarray], *,
                 retry: bool, on_done: Callable[[], None]) -> None:
        self.plan, self.placement, self.retry, self.on_done = plan, placement, retry, on_done
        self.values: dict[str, np.ndarray] = dict(inputs)
        self.future: Future = Future()
        self.finish: dict[int, float] = {}
        self.failed_on: dict[int, set[int]] = {}
        self.devices: dict[int, str] = {}
        self.retries = 0
        self.started = time.perf_counter()
        self._lock = threading.Lock()
        self._dispatched: set[int] = set()
        self._outstanding = 0
        """Partitions submitted to a device and not yet settled."""
        self._answered = False
        self._settled = False

    def start(self) -> Future:
        missing = sorted({n for p in self.plan.partitions for n in p.inputs} - self._produced() - set(self.values))
        if missing:
            self._fail(RequestFailed(f"network '{self.plan.network}' needs input '{missing[0]}'"))
            return self.future
        self._dispatch_ready()
        return self.future

    def _produced(self) -> set[str]:
        return {n for p in self.plan.partitions for n in p.outputs}

    def _dispatch_ready(self) -> None:
        with self._lock:
            ready = [p for p in self.plan.partitions if p.index not in self._dispatched
                     and p.depends <= set(self.finish)]
            self._dispatched.update(p.index for p in ready)
        for part in ready:
            self._dispatch(part.index)

    def _dispatch(self, index: int) -> None:
        tried = self.failed_on.get(index, set())
        replicas = [r for r in self.placement.replicas[index] if id(r[0]) not in tried]
        if not replicas:
            self._fail(RequestFailed(f"network '{self.plan.network}': partition {index} has no replica left"))
            return
        device, key = min(replicas, key=lambda r: r[0].pending)
        part = self.plan.partitions[index]
        with self._lock:
            if self._answered:   # the request already failed: run nothing more for it
                return
            self._outstanding += 1
            feeds = {n: self.values[n] for n in part.inputs}
        try:
            future = device.submit(key, feeds)
        except RuntimeError as err:   # the device was shut down
            with self._lock:
                self._outstanding -= 1
            self._fail(RequestFailed(f"network '{self.plan.network}': {device.name}: {err}"))
            return
        future.add_done_callback(lambda f: self._completed(index, device, f))

    def _completed(self, index: int, device: DeviceManager, future: Future) -> None:
        with self._lock:
            self._outstanding -= 1
        try:
            error = future.exception()
            if error is not None:
                self._failed(index, device, error)
                return
            run: PartitionRun = future.result()
            part = self.plan.partitions[index]
            with self._lock:
                self.values.update(run.outputs)
                self.finish[index] = max((self.finish[d] for d in part.depends), default=0.0) + run.seconds
                self.devices[index] = run.device
                complete = len(self.finish) == len(self.plan.partitions)
            if complete:
                self._succeed()
            else:
                self._dispatch_ready()
        finally:
            self._settle()   # this may have been the last partition of a request that another branch failed

    def _failed(self, index: int, device: DeviceManager, error: BaseException) -> None:
        if isinstance(error, DeviceFault):
            self.failed_on.setdefault(index, set()).add(id(device))
            others = [r for r in self.placement.replicas[index] if id(r[0]) not in self.failed_on[index]]
            if self.retry and others:
                self.retries += 1
                self._dispatch(index)
                return
            self._fail(RequestFailed(f"request on network '{self.plan.network}' failed: {error}", error.error))
            return
        self._fail(error if isinstance(error, GlowError) else
                   RequestFailed(f"request on network '{self.plan.network}' failed: {type(error).__name__}: {error}"))

    def _succeed(self) -> None:
        outputs = {ph.name: self.values[ph.name] for ph in self.plan.graph.output_placeholders()}
        self._answer(Response(outputs, max(self.finish.values(), default=0.0), time.perf_counter() - self.started,
                              dict(self.devices), self.retries))

    def _fail(self, error: BaseException) -> None:
        self._answer(None, error)

    def _answer(self, response: Response | None, error: BaseException | None = None) -> None:
        """Give the request its one answer; its slot is freed first when nothing of it is left on a device."""
        with self._lock:
            if self._answered:
                return
            self._answered = True
        self._settle()
        if error is None:
            self.future.set_result(response)
        else:
            self.future.set_exception(error)

    def _settle(self) -> None:
        """Call `on_done` once: when the request is answered and none of its partitions is still on a device."""
        with self._lock:
            if self._settled or not self._answered or self._outstanding:
                return
            self._settled = True
        self.on_done()
