"""Many simulated devices back only the DRAM they use; `serve-bench --check` compares floats with a tolerance."""
from __future__ import annotations

import json
import resource
import subprocess
import sys

import numpy as np
import onnx
import pytest
from nets import digits, quantization, sin_model
from onnx import TensorProto, helper

from firmware_runtime import BackedDram, Block, FirmwareError, NpuDevice
from glowsdk.cli.main import main
from glowsdk.cli.serve import outputs_match
from glowsdk.runtime import CpuDeviceManager, HostManager, NpuDeviceManager
from isa.config import PRESETS


def test_a_device_backs_only_its_allocated_blocks():
    device = NpuDevice(PRESETS["server"], name="npu0")   # 4 GiB of DRAM configured
    assert device.dram.backed_bytes == 0
    with HostManager([NpuDeviceManager(device), CpuDeviceManager()]) as host:
        host.add_network("digits", digits(), quantization(digits()))
        used = device.stats().used
        assert 0 < used < 1 << 20 and device.dram.backed_bytes == used
        host.remove_network("digits")
        assert device.dram.backed_bytes == 0 == device.stats().used


def test_backed_dram_views_lie_in_one_block_and_freed_blocks_come_back_zeroed():
    dram = BackedDram("npu0")
    block = Block(128, 64, "net")
    dram.back(block)
    dram.view(130, 4)[:] = 7
    assert dram.view(128, 64)[2:6].tolist() == [7] * 4
    with pytest.raises(FirmwareError, match=r"DRAM \[0xb0, 0xd0\) is not inside one allocated block"):
        dram.view(176, 32)
    with pytest.raises(FirmwareError, match="not inside one allocated block"):
        dram.view(0, 1)
    dram.drop(block)
    dram.back(block)
    assert not dram.view(128, 64).any()


MEMORY_LIMIT = 8 << 30
"""An address-space limit far below what 40 devices of 2 GiB DRAM would take if each were backed whole."""


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def test_serve_bench_on_many_devices_fits_in_a_few_gigabytes(tmp_path):
    model = tmp_path / "sin.onnx"
    onnx.save(sin_model(), model)
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "glowsdk", "serve-bench", str(model), "--devices", "npu:40,cpu:1",
                           "--requests", "20", "--calibration-random", "2", "--check", "--json", str(out)],
                          capture_output=True, text=True, timeout=600, preexec_fn=_limit_memory, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["requests"] == 20 and report["mismatches"] == 0
    assert len([d for d in report["device_stats"] if d["kind"] == "npu"]) == 40


def sin_only(tmp_path) -> str:
    """x -> Sin -> y: run whole on the CPU, where the cpu backend's sin differs from numpy's by ulps."""
    graph = helper.make_graph([helper.make_node("Sin", ["x"], ["y"])], "sin",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 256))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "sin_only.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return str(path)


def test_serve_bench_check_accepts_float_rounding_of_the_cpu_kernels(tmp_path, capsys):
    code = main(["serve-bench", sin_only(tmp_path), "--devices", "cpu:1", "--requests", "8", "--check"])
    assert code == 0
    assert "check: 0 of 8 responses differ from the interpreter" in capsys.readouterr().out


def test_outputs_match_is_exact_for_integers_and_relative_for_floats():
    want = np.sin(np.linspace(-3, 3, 101, dtype=np.float32))
    assert outputs_match(want + np.float32(6e-8), want)
    assert outputs_match(np.nextafter(want, np.float32(2)), want)   # one ulp everywhere
    assert not outputs_match(want * np.float32(1.001), want)
    assert not outputs_match(want[:-1], want)
    ints = np.arange(-5, 5, dtype=np.int8)
    assert outputs_match(ints.copy(), ints) and not outputs_match(ints + np.int8(1), ints)
    special = np.array([np.nan, np.inf, 1.0], np.float32)
    assert outputs_match(special.copy(), special)
    assert not outputs_match(np.array([0.0, np.inf, 1.0], np.float32), special)
    assert not outputs_match(np.array([np.nan, -np.inf, 1.0], np.float32), special)
