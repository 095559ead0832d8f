"""Reports, the Chrome trace, and `glowsdk simulate` on an .npub binary end to end."""
from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from glowsdk.cli.main import main as cli_main
from isa import PRESETS, assemble, config_hash, load_config
from isa.container import NpuBinary, write_npub
from isa.roofline import Workload, to_metadata
from isa.sections import Bindings, DebugRange, MemoryPlan, Region, TensorInfo
from sim.binding import load_binary, run_binary
from sim.errors import SimInputError
from sim.bench import resnet50_program
from sim.report import format_csv, format_json, format_text
from sim.simulator import simulate
from sim.trace import chrome_trace

DATASHEET = Path(__file__).resolve().parent.parent / "vendor_guide" / "npu_architecture.md"
EXAMPLE = re.findall(r"```asm\n(.*?)```", DATASHEET.read_text(), re.S)[0]
RNG = np.random.default_rng(7)
WEIGHTS = RNG.integers(-128, 128, (288, 60), dtype=np.int8)
BIAS = RNG.integers(-5000, 5000, 60).astype("<i4")
X_SCALE, X_ZP, Y_SCALE, Y_ZP = 0.05, -3, 0.1, 5
WORKLOADS = [Workload(256 * 288 * 60, "array", 288 * 60 + 4 * 60, 16 * 16 * 32, 16 * 16 * 60), None]
"""The convolution's work on its first debug range (the requantize-and-store range is part of it)."""


def example_binary(config_name: str = "default") -> NpuBinary:
    """The datasheet's convolution tile as a binary: weights and bias constant, x in, y out."""
    plan = MemoryPlan(constants=Region(0x100000, 0x4800 + 240), activations=Region(0x300000, 0),
                      inputs=Region(0x1000, 0x2000), outputs=Region(0x200000, 0x4000))
    tensors = [TensorInfo("w", "int8", (288, 60), 0x100000, 288 * 60),
               TensorInfo("bias", "int32", (60,), 0x104800, 240),
               TensorInfo("x", "int8", (1, 16, 16, 32), 0x1000, 8192, X_SCALE, X_ZP),
               TensorInfo("y", "int8", (1, 16, 16, 60), 0x200000, 15360, Y_SCALE, Y_ZP)]
    return NpuBinary(config_hash=config_hash(PRESETS[config_name]), plan=plan, instructions=assemble(EXAMPLE),
                     constants=WEIGHTS.tobytes() + bytes(0x4800 - WEIGHTS.nbytes) + BIAS.tobytes(), tensors=tensors,
                     bindings=Bindings(inputs={"x": 2}, outputs={"y": 3}),
                     debug=[DebugRange(0, 9, "conv", "Conv"), DebugRange(9, 13, "conv.requant", "Requantize")],
                     metadata={"model": "datasheet example", "roofline": to_metadata(WORKLOADS)})


def expected_output(x: np.ndarray) -> np.ndarray:
    """Quantize x, convolve (3x3, pad with the zero point), add bias, requantize with ReLU, dequantize."""
    q = np.clip(np.rint(x / X_SCALE) + X_ZP, -128, 127).astype(np.int64)[0]
    padded = np.pad(q, ((1, 1), (1, 1), (0, 0)), constant_values=X_ZP)
    total = np.zeros((16, 16, 60), np.int64) + BIAS
    for ky in range(3):
        for kx in range(3):
            tap = WEIGHTS[(ky * 3 + kx) * 32:(ky * 3 + kx + 1) * 32].astype(np.int64)
            total += padded[ky:ky + 16, kx:kx + 16] @ tap
    shift = 31 + 8
    t = total * 1518500250
    rounded = np.sign(t) * ((np.abs(t) + (1 << (shift - 1))) >> shift)
    y = np.clip(rounded + 5, 5, 127)
    return ((y - Y_ZP) * Y_SCALE).astype(np.float32)[None]


@pytest.fixture(scope="module")
def result():
    return simulate(assemble(EXAMPLE), PRESETS["default"], layers=example_binary().debug, workloads=WORKLOADS,
                    dram={0x100000: WEIGHTS.tobytes(), 0x104800: BIAS.tobytes()})


def test_layer_rows_and_totals(result):
    conv, requant = result.layer_rows()
    assert (conv.name, conv.kind, conv.macs, conv.dram_read, conv.dram_written) == ("conv", "Conv", 256 * 288 * 60,
                                                                                    17280 + 240 + 8192, 0)
    assert conv.ideal_cycles == 256 * 288 * 60 / 1024 and conv.bound == "compute"
    assert conv.roofline_cycles == max(conv.ideal_cycles, (17280 + 240 + 8192 + 15360) / 32)
    assert conv.ratio == conv.cycles / conv.roofline_cycles
    assert conv.utilisation == pytest.approx(conv.ideal_cycles / conv.cycles)
    assert requant.dram_written == 15360 and requant.bound == "free" and requant.roofline_cycles == 0
    assert requant.intensity == 0 and requant.ratio is None
    total = result.total_row()
    assert total.cycles == result.cycles and total.roofline_cycles == conv.roofline_cycles
    assert total.ratio == result.cycles / conv.roofline_cycles >= 1
    summary = result.summary()
    assert summary["sram"]["spad"]["peak_bytes"] == 18 * 18 * 32 + 288 * 60
    assert summary["sram"]["acc"]["peak_bytes"] == (256 * 60 + 60) * 4
    for row in result.unit_rows():
        assert row.busy + row.stalled + row.idle == result.cycles


def test_a_program_without_workloads_has_no_bound():
    bare = simulate(assemble(EXAMPLE), PRESETS["default"], layers=example_binary().debug)
    assert {r.bound for r in bare.layer_rows()} == {"-"} and bare.total_row().roofline_cycles is None
    assert "roofline      unknown" in format_text(bare)


def test_malformed_workloads_are_one_line_errors():
    binary = example_binary()
    for bad in ([None], [{"macs": -1, "unit": "array", "weight_bytes": 0, "input_bytes": 0, "output_bytes": 0}, None],
                [{"macs": 1, "unit": "gpu", "weight_bytes": 0, "input_bytes": 0, "output_bytes": 0}, None], "x"):
        binary.metadata["roofline"] = bad
        with pytest.raises(SimInputError, match="metadata 'roofline'"):
            run_binary(binary, PRESETS["default"], {})


def test_text_json_and_csv_reports(result):
    text = format_text(result)
    assert "the run takes" in text and "bound" in text
    assert "cycles        " in text and "peak spad" in text and "dram_latency" in text
    assert re.search(r"^- +conv +Conv +[\d,]+ +4\.42 M", text, re.M)  # '-': a hand-written program has no ONNX nodes
    data = json.loads(format_json(result))
    assert data["cycles"] == result.cycles and [r["name"] for r in data["layers"]] == ["conv", "conv.requant"]
    assert {u["unit"] for u in data["units"]} == {"dispatcher", "load DMA", "store DMA", "matrix", "vector"}
    rows = list(csv.DictReader(io.StringIO(format_csv(result))))
    assert [r["name"] for r in rows] == ["conv", "conv.requant", "(total)"]
    assert int(rows[-1]["cycles"]) == result.cycles


def test_chrome_trace_has_a_track_per_unit_and_counters(result):
    trace = json.loads(json.dumps(chrome_trace(result)))
    events = trace["traceEvents"]
    threads = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert sorted(threads.values()) == sorted(["dispatcher", "load DMA", "store DMA", "matrix", "vector"])
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == len(result.steps)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in slices)
    matmul = next(e for e in slices if e["name"] == "MATMUL")
    assert threads[matmul["tid"]] == "matrix" and matmul["args"]["layer"] == "conv"
    assert matmul["dur"] == pytest.approx((result.timeline.end[8] - result.timeline.start[8]) / 1000)
    counters = [e for e in events if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {"DRAM bandwidth (B/cycle)", "SRAM live bytes"}
    # The bandwidth track integrates to the bytes moved.
    bandwidth = [e for e in counters if e["name"].startswith("DRAM")]
    step = (bandwidth[1]["ts"] - bandwidth[0]["ts"]) * 1000
    moved = sum(e["args"]["read"] + e["args"]["write"] for e in bandwidth) * step
    assert moved == pytest.approx(17280 + 240 + 8192 + 15360, rel=0.01)
    assert max(e["args"]["spad"] for e in counters if e["name"] == "SRAM live bytes") == 18 * 18 * 32 + 288 * 60


def test_run_binary_quantizes_inputs_and_dequantizes_outputs(tmp_path):
    path = tmp_path / "conv.npub"
    write_npub(path, example_binary())
    binary, config = load_binary(str(path), None)
    assert config.name == "default"
    x = RNG.standard_normal((1, 16, 16, 32)).astype(np.float32) * 3
    run = run_binary(binary, config, {"x": x}, checked=True)
    assert run.generated == []
    np.testing.assert_array_equal(run.outputs["y"], expected_output(x))
    random = run_binary(binary, config, {}, seed=3)
    assert random.generated == ["x"] and random.outputs["y"].shape == (1, 16, 16, 60)


@pytest.mark.parametrize("scale", [1e-50, 2.0 ** -140])
def test_run_binary_refuses_a_scale_that_is_zero_in_float32(scale):
    # issue 22: a TensorInfo built in code (the reader refuses such a file) made quantize divide by 0.0
    binary = example_binary()
    binary.tensors[2] = TensorInfo("x", "int8", (1, 16, 16, 32), 0x1000, 8192, scale, X_ZP)
    x = np.zeros((1, 16, 16, 32), np.float32)
    with pytest.raises(SimInputError, match=r"input 'x': tensor 'x' has quantization scale .*, 0 or not finite"):
        run_binary(binary, PRESETS["default"], {"x": x})


def test_glowsdk_simulate(tmp_path, capsys):
    path = tmp_path / "conv.npub"
    write_npub(path, example_binary())
    x = RNG.standard_normal((1, 16, 16, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    trace = tmp_path / "trace.json"
    code = cli_main(["simulate", str(path), "--input", f"x={tmp_path / 'x.npy'}", "--output", str(tmp_path / "out"),
                     "--report", "json", "--trace", str(trace), "--checked", "--config", "default"])
    out = capsys.readouterr()
    assert code == 0, out.err
    report = json.loads(out.out)
    assert report["mode"]["checked"] and report["macs"] == 256 * 288 * 60
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), expected_output(x))
    assert json.loads(trace.read_text())["traceEvents"]
    assert cli_main(["simulate", str(path), "--report", "csv"]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("onnx_node,onnx_op,name,kind,first,stop,cycles") and "input x: random, seed 0" in out.err
    assert cli_main(["simulate", str(path)]) == 0
    assert "NPU simulation: 14 instructions on architecture 'default'" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--config", "edge"], "header, byte 16: built for architecture configuration"),
    (["--input", "nope=X"], "input 'nope': the binary has no such input (inputs: x)"),
    (["--input", "x=BAD"], "input 'x': shape [3] does not match tensor 'x' [1, 16, 16, 32]"),
])
def test_glowsdk_simulate_refuses_bad_requests(tmp_path, capsys, args, message):
    path = tmp_path / "conv.npub"
    write_npub(path, example_binary())
    np.save(tmp_path / "bad.npy", np.zeros(3, np.float32))
    np.save(tmp_path / "X.npy", np.zeros((1, 16, 16, 32), np.float32))
    args = [a.replace("BAD", str(tmp_path / "bad.npy")).replace("=X", f"={tmp_path / 'X.npy'}") for a in args]
    assert cli_main(["simulate", str(path), *args]) == 2
    assert message in capsys.readouterr().err


def test_a_binary_for_a_custom_machine_needs_its_configuration(tmp_path, capsys):
    custom = tmp_path / "wide.toml"
    custom.write_text('preset = "default"\narray_cols = 64\n')
    binary = example_binary()
    binary.config_hash = config_hash(load_config(custom))
    write_npub(tmp_path / "wide.npub", binary)
    assert cli_main(["simulate", str(tmp_path / "wide.npub")]) == 2
    assert "which is no preset (edge, default, server); give its configuration file with --config" in \
        capsys.readouterr().err
    assert cli_main(["simulate", str(tmp_path / "wide.npub"), "--config", str(custom)]) == 0


def test_resnet50_shaped_program_runs_race_free():
    """The benchmark program (coarse tiles, to stay quick): every layer, the MACs of ResNet-50, no race."""
    config = PRESETS["default"]
    program, layers, _ = resnet50_program(config)
    result = simulate(program, config, layers=layers, checked=True)
    assert len(layers) == 71 and result.total_row().macs == pytest.approx(4.1e9, rel=0.03)
    assert all(row.cycles > 0 for row in result.layer_rows())
