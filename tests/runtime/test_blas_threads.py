"""Simulated devices leave the process's BLAS thread count as they found it (issue 22).

The simulator holds BLAS to one thread while it runs. That limit is process-wide and the
runtime's device threads simulate concurrently: a limit taken and restored per simulation,
restored out of order, left the whole process on one BLAS thread after the runtime tests.
"""
from __future__ import annotations

import threading

import pytest
import threadpoolctl
from nets import quantization, sin_net
from threadpoolctl import threadpool_info, threadpool_limits

from firmware_runtime import NpuDevice
from glowsdk.runtime import CpuDeviceManager, HostManager, NpuDeviceManager
from sim.simulator import ONE_BLAS_THREAD


def blas_threads() -> list[int]:
    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


def release_control() -> None:
    """Leave OpenBLAS's shared pool to whichever thread sets it next, as at the start of a process
    (threadpoolctl 3.8 ties it to the thread that set it last and ignores the others)."""
    release = getattr(getattr(threadpoolctl, "OpenBLASController", None), "clear_controlling_thread", None)
    if release is not None:
        release(force=True)


@pytest.fixture
def before() -> list[int]:
    """The BLAS thread counts before the test, set to 2 where the library allows it (a one-core
    host starts at 1, where a limit of 1 left behind would not show)."""
    if not blas_threads():
        pytest.skip("numpy's BLAS is not one threadpoolctl can see on this host: there is no limit to check")
    limit = threadpool_limits(limits=2, user_api="blas")
    release_control()
    yield blas_threads()
    limit.restore_original_limits()
    release_control()


def test_overlapping_simulations_restore_the_count_found_before_the_first(before):
    """The order that stranded the limit: A enters, B enters (and records A's 1), A leaves, B leaves."""
    entered, a_left = threading.Barrier(2), threading.Event()
    seen = {}

    def simulation(name: str) -> None:
        with ONE_BLAS_THREAD:
            entered.wait()
            seen[name] = blas_threads()
            if name == "b":
                a_left.wait()
                seen["b after a left"] = blas_threads()
        if name == "a":
            a_left.set()

    threads = [threading.Thread(target=simulation, args=(n,)) for n in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert seen == {"a": [1] * len(before), "b": [1] * len(before), "b after a left": [1] * len(before)}
    assert blas_threads() == before


def test_concurrent_requests_on_simulated_devices_leave_the_count_as_it_was(before):
    """The runtime tests' pattern: requests spread over four simulated NPUs and the CPU at once."""
    devices = [NpuDeviceManager(NpuDevice(name=f"npu{i}", heap_bytes=1 << 20)) for i in range(4)]
    with HostManager(devices + [CpuDeviceManager()], queue_size=32) as host:
        host.add_network("sin", sin_net(), quantization(sin_net()))
        futures = [host.run("sin", sin_net().random_inputs(seed)) for seed in range(200)]
        for future in futures:
            future.result(timeout=120)
        assert min(d.runs for d in host.devices if d.name.startswith("npu")) > 0  # they did overlap
    assert blas_threads() == before
