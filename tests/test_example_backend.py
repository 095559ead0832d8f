"""The vendor guide's worked example, installed as a vendor ships it and used through the entry point.

The fixture pip-installs vendor_guide/example_backend (the imaginary TinyVec-1:
float32 element-wise, MatMul and 2-D Conv only) offline into a folder of its own
(tests/plugin_install.py). Its outputs are compared with the interpreter's;
through the host runtime, what the chip cannot run falls back to the CPU.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from plugin_install import environment_with, install_plugin

import glowsdk
from glowsdk.backends import get_backend
from glowsdk.cli.main import main
from glowsdk.compiler.backend import Backend
from glowsdk.errors import UnsupportedOpsError
from glowsdk.runtime import CpuDeviceManager

PACKAGE = Path(__file__).resolve().parent.parent / "vendor_guide" / "example_backend"


@pytest.fixture(scope="module")
def tinyvec_site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the example is installed (tests/plugin_install.py); built from a copy so the guide's folder stays clean."""
    return install_plugin(request, tmp_path_factory, PACKAGE, "tinyvec_backend")


@pytest.fixture(scope="module")
def tinyvec(tinyvec_site: Path) -> Backend:
    return get_backend("tinyvec")


def conv_mlp(seed: int = 0) -> glowsdk.Network:
    """Conv -> Relu -> Conv(stride 2) -> Relu -> MatMul + bias: nothing TinyVec-1 lacks once lowered."""
    return glowsdk.load(conv_mlp_model(seed))


def conv_mlp_model(seed: int = 0) -> onnx.ModelProto:
    """`conv_mlp`'s ONNX model."""
    rng = np.random.default_rng(seed)
    weights = {"w1": rng.standard_normal((4, 2, 3, 3)), "b1": rng.standard_normal(4),
               "w2": rng.standard_normal((3, 4, 3, 3)), "w3": rng.standard_normal((27, 5)),
               "b3": rng.standard_normal(5), "shape": np.array([2, 27])}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Reshape", ["r2", "shape"], ["f"]),
             helper.make_node("MatMul", ["f", "w3"], ["m"]),
             helper.make_node("Add", ["m", "b3"], ["y"])]
    graph = helper.make_graph(
        nodes, "conv_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 2, 7, 7))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a.astype(np.int64 if k == "shape" else np.float32), k) for k, a in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _interpreter(network: glowsdk.Network, feeds: dict) -> dict:
    return glowsdk.compile(network, target="interpreter").run(feeds)


def test_listed_through_its_entry_point(tinyvec: Backend, tinyvec_site: Path) -> None:
    listed = subprocess.run([sys.executable, "-m", "glowsdk", "backends"], capture_output=True, text=True,
                            timeout=120, env=environment_with(tinyvec_site))
    assert listed.returncode == 0, listed.stderr
    assert "tinyvec  (tinyvec_backend:TinyVecBackend)" in listed.stdout
    assert "primitives (9 of" in listed.stdout.split("tinyvec  (")[1]
    assert "flags: --clock-mhz MHZ (run, compile)" in listed.stdout.split("tinyvec  (")[1]
    assert tinyvec.device_info().extra["lanes"] == 16


def test_the_flag_it_declares_reaches_its_compile(tinyvec: Backend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture) -> None:
    # the CLI names no target: --clock-mhz exists because TinyVecBackend.flags declares it
    path = tmp_path / "conv_mlp.onnx"
    onnx.save(conv_mlp_model(), path)
    seen = []
    compile_ = type(tinyvec).compile
    monkeypatch.setattr(type(tinyvec), "compile", lambda self, f, o: seen.append(dict(o.extra)) or compile_(self, f, o))
    assert main(["run", str(path), "--target", "tinyvec", "--clock-mhz", "800", "--fallback", "none"]) == 0
    assert seen == [{"clock_mhz": 800}]
    with pytest.raises(SystemExit):
        main(["compile", "--help"])
    assert "tinyvec target: the chip's clock in MHz" in " ".join(capsys.readouterr().out.split())
    assert main(["run", str(path), "--target", "interpreter", "--clock-mhz", "800"]) == 2
    assert "--clock-mhz is a flag of target tinyvec, not interpreter" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:  # argparse's: a COUNT is a whole number >= 1
        main(["run", str(path), "--target", "tinyvec", "--clock-mhz", "0"])
    assert refused.value.code == 2 and "--clock-mhz: '0' is not a whole number >= 1" in capsys.readouterr().err
    assert len(seen) == 1


def test_a_network_it_runs_whole_matches_the_interpreter(tinyvec: Backend) -> None:
    network = conv_mlp()
    compiled = glowsdk.compile(network, target="tinyvec")
    feeds = network.random_inputs(seed=1)
    got, want = compiled.run(feeds), _interpreter(network, feeds)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)
    loaded = compiled.compiled
    kinds = {op.instr.kind for op in loaded.ops}
    assert kinds == {"Conv", "MatMul", "Max", "Add"}  # Relu lowered to Max; the Reshape became a tensorview
    assert loaded.cycles > 0 and loaded.program.plan.activation_bytes > 0


def test_a_whole_light_model_is_refused_naming_what_is_missing(tinyvec: Backend) -> None:
    with pytest.raises(UnsupportedOpsError, match="tinyvec") as caught:
        glowsdk.compile(glowsdk.load("squeezenet", random_weights=0), target="tinyvec", fallback=None)
    assert {"MaxPool", "Concat"} <= set(caught.value.ops) and "Conv" not in caught.value.ops


def test_a_whole_light_model_runs_with_the_default_fallback(tinyvec: Backend) -> None:
    network = glowsdk.load("squeezenet", random_weights=0)
    compiled = glowsdk.compile(network, target="tinyvec").compiled
    assert {p.backend for p in compiled.partitions} == {"tinyvec", "cpu"}
    feeds = network.random_inputs(seed=2)
    want = glowsdk.compile(network, target="interpreter").run(feeds)
    for name, value in compiled.execute(feeds).items():
        np.testing.assert_allclose(value, want[name], rtol=1e-4, atol=1e-5)


def test_squeezenet_on_the_host_runtime_falls_back_to_the_cpu(tinyvec: Backend) -> None:
    from tinyvec_backend import TinyVecDevice, TinyVecHost

    network = glowsdk.load("squeezenet", random_weights=0)
    host = TinyVecHost([TinyVecDevice(), CpuDeviceManager()])
    try:
        plan = host.add_network("squeezenet", network)
        on = {kind: {op for p in plan.partitions if p.kind == kind for op in p.ops} for kind in ("tinyvec", "cpu")}
        assert {"Conv", "Max"} <= on["tinyvec"] <= set(tinyvec.primitives)  # Relu is Max; Softmax's Sub, Div
        assert {"MaxPool", "Concat", "Exp", "ReduceMax"} <= on["cpu"] and not on["cpu"] & set(tinyvec.primitives)
        feeds = network.random_inputs(seed=2)
        response = host.run("squeezenet", feeds).result(timeout=300)
    finally:
        host.close()
    want = _interpreter(network, feeds)
    for name, value in want.items():
        np.testing.assert_allclose(response.outputs[name], value, rtol=1e-5, atol=1e-6)
    assert set(response.devices.values()) == {"tinyvec0", "cpu0"} and response.device_seconds > 0


def test_conformance_matrix(tinyvec_site: Path, tmp_path: Path) -> None:
    report = tmp_path / "tinyvec.json"
    run = subprocess.run([sys.executable, "-m", "glowsdk", "conformance", "--target", "tinyvec", "--suite",
                          "primitives", "--json", str(report), "--strict"], capture_output=True, text=True,
                         timeout=300, env=environment_with(tinyvec_site))
    assert run.returncode == 0, run.stdout + run.stderr
    matrix = json.loads(report.read_text())["primitives"]["matrix"]
    for name in ("Add", "Sub", "Mul", "Div", "Max", "Min", "MatMul", "Reshape"):
        assert matrix[name]["float32"] == "pass", name
    assert matrix["Conv"]["float32"] == "partial"  # the 1-D variant is refused, the 2-D ones pass
    assert matrix["Add"]["float16"] == matrix["MaxPool"]["float32"] == "unsupported"
    assert re.search(r"partial +Conv float32: refused: 1-D$", run.stdout, re.M), run.stdout
