"""The host runtime end to end: heterogeneous partitions, concurrency, faults, memory, back-pressure.

The oracle is the interpreter running the graph the partitions compute together (the network
lowered and quantized for the NPU): NPU partitions are bit-exact to it, and the float border
conversions are exact, so every response must equal it.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest
from nets import digits, quantization, sin_net

from firmware_runtime import ErrorKind, Injection, NpuDevice
from glowsdk.errors import GlowError
from glowsdk.reference.evaluator import evaluate
from glowsdk.runtime import (
    CpuDeviceManager,
    HostManager,
    NetworkRefused,
    NpuDeviceManager,
    QueueFull,
    RequestFailed,
)

REQUESTS = 1000
"""Issue 9: 1,000 concurrent requests across 4 simulated NPUs and the CPU."""


def make_host(npus: int = 4, heap: int = 1 << 20, **options) -> HostManager:
    devices = [NpuDeviceManager(NpuDevice(name=f"npu{i}", heap_bytes=heap)) for i in range(npus)]
    return HostManager(devices + [CpuDeviceManager()], **options)


def assert_matches(plan, inputs, response) -> None:
    want = evaluate(plan.graph, inputs)
    assert set(response.outputs) == set(want)
    for name, value in want.items():
        np.testing.assert_array_equal(response.outputs[name], value)


def test_the_op_the_npu_cannot_run_goes_to_the_cpu():
    with make_host() as host:
        plan = host.add_network("sin", sin_net(), quantization(sin_net()))
        kinds = [(p.kind, sorted(p.ops)) for p in plan.partitions]
        assert [k for k, _ in kinds] == ["npu", "cpu", "npu"]
        assert "Sin" in kinds[1][1] and "Sin" not in kinds[0][1] + kinds[2][1]
        assert plan.partitions[1].depends == {0} and plan.partitions[2].depends == {1}
        inputs = sin_net().random_inputs(7)
        response = host.run("sin", inputs).result(timeout=60)
        assert_matches(plan, inputs, response)
        assert response.devices[1] == "cpu0" and response.devices[0].startswith("npu")


def test_many_concurrent_requests_are_all_correct_and_none_lost_or_mixed():
    with make_host(queue_size=32) as host:
        plan = host.add_network("sin", sin_net(), quantization(sin_net()))
        replicas = host.networks["sin"].placement.replicas
        assert {len(replicas[p.index]) for p in plan.partitions if p.kind == "npu"} == {4}   # duplicated
        inputs = [sin_net().random_inputs(seed) for seed in range(REQUESTS)]
        futures = [host.run("sin", x) for x in inputs]
        responses = [f.result(timeout=120) for f in futures]
        for x, response in zip(inputs, responses):
            assert_matches(plan, x, response)
        runs = {d.name: d.runs for d in host.devices}
        assert sum(runs.values()) == REQUESTS * len(plan.partitions)   # each partition ran once per request
        assert runs["cpu0"] == REQUESTS and min(runs[f"npu{i}"] for i in range(4)) > 0
        assert all(d.failures == 0 and d.pending == 0 for d in host.devices)


@pytest.mark.parametrize("kind", [ErrorKind.OUT_OF_BOUNDS, ErrorKind.DEADLOCK])
def test_a_device_fault_is_retried_on_another_device(kind):
    with make_host(queue_size=8) as host:
        plan = host.add_network("digits", digits(), quantization(digits()))
        host.devices[1].device.arm(Injection(kind))
        inputs = [digits().random_inputs(seed) for seed in range(24)]
        responses = [f.result(timeout=60) for f in [host.run("digits", x) for x in inputs]]
        for x, response in zip(inputs, responses):
            assert_matches(plan, x, response)
        assert sum(r.retries for r in responses) == 1
        assert host.devices[1].failures == 1


def test_without_retry_the_faulty_request_fails_clearly_and_the_host_keeps_serving():
    with make_host(npus=2, queue_size=4, retry=False) as host:
        plan = host.add_network("digits", digits(), quantization(digits()))
        start = [d.device.allocator.holes() for d in host.devices[:2]]
        host.devices[0].device.arm(Injection(ErrorKind.OUT_OF_BOUNDS))
        inputs = [digits().random_inputs(seed) for seed in range(12)]
        futures = [host.run("digits", x) for x in inputs]
        failed = [f.exception(timeout=60) for f in futures if f.exception(timeout=60) is not None]
        assert len(failed) == 1 and isinstance(failed[0], RequestFailed)
        error = failed[0].device_error
        assert (error.kind, error.device) == (ErrorKind.OUT_OF_BOUNDS, "npu0")
        assert error.network.startswith("digits/p0") and error.instruction > 0
        assert str(failed[0]).startswith("request on network 'digits' failed: device error (out-of-bounds) on npu0")
        for x, future in zip(inputs, futures):
            if future.exception() is None:
                assert_matches(plan, x, future.result())
        again = digits().random_inputs(99)
        assert_matches(plan, again, host.run("digits", again).result(timeout=60))
        host.remove_network("digits")
        assert [d.device.allocator.holes() for d in host.devices[:2]] == [
            ((0, d.device.allocator.capacity),) for d in host.devices[:2]]
        assert start != [d.device.allocator.holes() for d in host.devices[:2]]
        with pytest.raises(GlowError, match="no network named 'digits'"):
            host.run("digits", again)


def test_a_network_larger_than_one_device_is_split_across_devices():
    with make_host(heap=2048, max_replicas=1) as host:   # digits' weights alone take 2176 bytes
        plan = host.add_network("digits", digits(), quantization(digits()))
        npu_parts = [p for p in plan.partitions if p.kind == "npu"]
        assert len(npu_parts) >= 2 and all(p.memory_bytes <= 2048 for p in npu_parts)
        used = {host.networks["digits"].placement.replicas[p.index][0][0].name for p in npu_parts}
        assert len(used) >= 2
        for seed in range(4):
            inputs = digits().random_inputs(seed)
            assert_matches(plan, inputs, host.run("digits", inputs).result(timeout=60))


def test_a_network_that_fits_nowhere_is_refused_and_nothing_stays_loaded():
    with make_host(heap=1024) as host:
        with pytest.raises(NetworkRefused, match=r"network 'digits': partition \d+ \(.*Conv.*\) needs \d+ bytes of "
                                                 r"NPU memory, and the largest NPU device holds 1024"):
            host.add_network("digits", digits(), quantization(digits()))
        assert host.networks == {}
        assert all(d.device.stats().used == 0 for d in host.devices[:4])


class GatedCpu(CpuDeviceManager):
    """A CPU device whose runs wait for a gate: holds requests in flight for the back-pressure tests."""

    def __init__(self) -> None:
        super().__init__("gated")
        self.gate = threading.Event()

    def execute(self, key, inputs):
        assert self.gate.wait(timeout=60)
        return super().execute(key, inputs)


@pytest.mark.parametrize("policy", ["reject", "block"])
def test_back_pressure_refuses_past_the_queue_bound(policy):
    device = GatedCpu()
    with HostManager([device], queue_size=2, when_full=policy, block_timeout=0.05) as host:
        plan = host.add_network("digits", digits())
        inputs = [digits().random_inputs(seed) for seed in range(3)]
        held = [host.run("digits", x) for x in inputs[:2]]
        with pytest.raises(QueueFull, match=f"all 2 request slots are taken \\(policy '{policy}'\\)"):
            host.run("digits", inputs[2])
        device.gate.set()
        for x, future in zip(inputs, held):
            response = future.result(timeout=60)
            np.testing.assert_allclose(response.outputs["logits"], evaluate(plan.graph, x)["logits"], rtol=1e-5,
                                       atol=1e-5)
        assert host.run("digits", inputs[2]).result(timeout=60).devices == {0: "gated"}
