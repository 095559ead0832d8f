"""Device memory comes back on every failure path: a branch failing while another runs, remove_network
after a failed request, close(), and two add_network calls of one name at once."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from nets import digits, quantization
from onnx import TensorProto, helper, numpy_helper

import glowsdk
from firmware_runtime import ErrorKind, Injection, NpuDevice
from glowsdk.errors import GlowError
from glowsdk.runtime import (
    CpuDeviceManager,
    HostManager,
    NpuDeviceManager,
    RequestFailed,
)


def branch_net() -> glowsdk.api.Network:
    """Two branches from the input: conv -> relu on the NPU, Sin -> conv (Sin on the CPU); an Add joins them.
    Partition 0 (CPU, Sin) and partition 1 (NPU, the first conv) run at the same time."""
    rng = np.random.default_rng(3)
    weights = [numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32) * 0.3, "w"),
               numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32) * 0.3, "w2"),
               numpy_helper.from_array(np.zeros(4, np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Sin", ["x"], ["s"]),
             helper.make_node("Conv", ["s", "w2", "b"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["r", "c2"], ["y"])]
    graph = helper.make_graph(nodes, "branches", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 2, 6, 6))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], weights)
    return glowsdk.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))


class GatedNpu(NpuDevice):
    """An NPU whose runs, once started (the network marked running), wait for a gate."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.gate = threading.Event()
        self.started = threading.Event()

    def _run(self, net, inputs, injection):
        self.started.set()
        assert self.gate.wait(timeout=60)
        return super()._run(net, inputs, injection)


class FailingCpu(CpuDeviceManager):
    """A CPU whose runs fail once the NPU branch is running (so the failure lands while it runs)."""

    def __init__(self, npu: GatedNpu) -> None:
        super().__init__("cpu0")
        self.npu = npu

    def execute(self, key, inputs):
        assert self.npu.started.wait(timeout=60)
        raise RuntimeError("the host ran out of patience")


def npu_used(host: HostManager) -> list[int]:
    return [d.device.stats().used for d in host.devices if isinstance(d, NpuDeviceManager)]


def wait_until(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_branch_failing_while_another_runs_leaks_nothing():
    npu = GatedNpu(name="npu0", heap_bytes=1 << 20)
    cpu = FailingCpu(npu)
    host = HostManager([NpuDeviceManager(npu), cpu], retry=False)
    plan = host.add_network("m", branch_net(), quantization(branch_net()))
    assert [(p.kind, p.depends) for p in plan.partitions[:2]] == [("cpu", set()), ("npu", set())]
    assert npu.stats().used > 0
    future = host.run("m", branch_net().random_inputs(0))
    with pytest.raises(RequestFailed, match="RuntimeError: the host ran out of patience"):
        future.result(timeout=60)
    assert npu.running is not None   # the NPU branch is still on the device
    assert host.networks["m"].in_flight == 1   # ... so the request still holds its network

    removed: list[BaseException | None] = []

    def remove() -> None:
        try:
            host.remove_network("m")
            removed.append(None)
        except BaseException as err:   # noqa: BLE001 - the test reports whatever remove_network raised
            removed.append(err)

    remover = threading.Thread(target=remove)
    remover.start()
    wait_until(lambda: "m" not in host.networks or host.networks["m"].removing)
    assert not removed   # remove_network waits for the branch still running
    npu.gate.set()
    remover.join(timeout=60)
    assert removed == [None]
    assert npu_used(host) == [0]
    assert npu.allocator.holes() == ((0, npu.allocator.capacity),)
    assert cpu.loaded == {} and all(not d.resident for d in host.devices)
    host.close()
    assert npu_used(host) == [0]


def test_close_after_a_failed_request_gives_every_byte_back():
    npu = GatedNpu(name="npu0", heap_bytes=1 << 20)
    host = HostManager([NpuDeviceManager(npu), FailingCpu(npu)], retry=False)
    host.add_network("m", branch_net(), quantization(branch_net()))
    future = host.run("m", branch_net().random_inputs(1))
    assert isinstance(future.exception(timeout=60), RequestFailed)
    closer = threading.Thread(target=host.close)
    closer.start()
    wait_until(lambda: "m" not in host.networks or host.networks["m"].removing)
    npu.gate.set()
    closer.join(timeout=60)
    assert not closer.is_alive()
    assert npu_used(host) == [0] and host.networks == {}


def test_remove_network_after_failures_on_every_npu_frees_everything():
    devices = [NpuDeviceManager(NpuDevice(name=f"npu{i}", heap_bytes=1 << 20)) for i in range(2)]
    with HostManager(devices + [CpuDeviceManager()], retry=False) as host:
        host.add_network("digits", digits(), quantization(digits()))
        for d in devices:
            d.device.arm(Injection(ErrorKind.OUT_OF_BOUNDS))
        futures = [host.run("digits", digits().random_inputs(seed)) for seed in range(6)]
        assert sum(f.exception(timeout=60) is not None for f in futures) == 2
        host.remove_network("digits")
        assert npu_used(host) == [0, 0]
    assert npu_used(host) == [0, 0]


def test_two_add_network_of_one_name_at_once_one_wins_and_nothing_leaks():
    devices = [NpuDeviceManager(NpuDevice(name=f"npu{i}", heap_bytes=1 << 20)) for i in range(2)]
    host = HostManager(devices + [CpuDeviceManager()])
    config = quantization(digits())
    start = threading.Barrier(2)
    results: list[object] = []

    def add() -> None:
        start.wait()
        try:
            results.append(host.add_network("m", digits(), config))
        except GlowError as err:
            results.append(err)

    threads = [threading.Thread(target=add) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    errors = [r for r in results if isinstance(r, GlowError)]
    assert len(results) == 2 and len(errors) == 1
    assert str(errors[0]) == "a network named 'm' is already added" and "\n" not in str(errors[0])
    used = npu_used(host)
    host.remove_network("m")
    assert npu_used(host) == [0, 0] and sum(used) > 0
    assert devices[0].device.networks == {} and host.devices[2].loaded == {}
    host.close()
