"""--fallback on the commands that time or check a model: `conformance --suite models` reports each model's
partitions and share of MACs on a partial chip, `bench` prints the partition table (and, with --profile,
each partition's time), `serve-bench` maps --fallback onto the host runtime's CPU partitions.

The partial chip is the MatMul/Add/Max plugin of tests/mac_chip_plugin (the `macarray` fixture
pip-installs it for this module); the serve-bench model is the runtime tests' conv -> Sin -> conv net.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from runtime.nets import sin_model
from test_partial_chip import macarray  # noqa: F401 - the fixture

from glowsdk.cli.main import main


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOWSDK_CACHE_DIR", str(tmp_path / "cache"))


def _two_layers(path: Path) -> str:
    """x[32,256] -> MatMul -> Tanh -> MatMul -> y: two products worth the chip, a Tanh it lacks."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((rng.standard_normal((256, 256)) / 16).astype(np.float32), f"w{k}")
               for k in (1, 2)]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Tanh", ["h"], ["t"], name="tanh"),
             helper.make_node("MatMul", ["t", "w2"], ["y"], name="fc2")]
    graph = helper.make_graph(nodes, "two_layers", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 256])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def test_conformance_models_reports_partitions_and_mac_share(macarray, tmp_path: Path,  # noqa: F811
                                                             capsys: pytest.CaptureFixture) -> None:
    report = tmp_path / "conformance.json"
    assert main(["conformance", "--target", "macarray", "--suite", "models", "--models", "squeezenet",
                 "--fallback", "cpu", "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert "parts (target/host)" in out and "MACs on target" in out
    models = json.loads(report.read_text())["models"]
    assert models["fallback"] == "cpu" and models["totals"]["pass"] == 2
    for case in models["cases"]:
        assert case["status"] == "pass", case
        assert case["partitions"] == case["target_partitions"] + case["host_partitions"]
        assert case["target_partitions"] >= 1 and case["host_partitions"] >= 1  # Conv as MatMul; the rest on the host
        assert 0.8 <= case["target_mac_share"] <= 1.0
        row = next(line for line in out.splitlines() if line.split()[:2] == ["squeezenet", case["check"]])
        assert f"{case['partitions']} ({case['target_partitions']}/{case['host_partitions']})" in row
        assert f"{100 * case['target_mac_share']:.1f}%" in row


def test_conformance_without_fallback_is_unchanged(macarray, tmp_path: Path,  # noqa: F811
                                                   capsys: pytest.CaptureFixture) -> None:
    report = tmp_path / "conformance.json"
    assert main(["conformance", "--target", "macarray", "--suite", "models", "--models", "squeezenet",
                 "--json", str(report)]) == 0
    assert "parts (target/host)" not in capsys.readouterr().out
    models = json.loads(report.read_text())["models"]
    assert "fallback" not in models
    for case in models["cases"]:
        assert case["status"] == "unsupported" and "partitions" not in case


def test_bench_with_fallback_prints_the_partition_table_and_partition_times(macarray, tmp_path: Path,  # noqa: F811
                                                                           capsys: pytest.CaptureFixture) -> None:
    report = tmp_path / "bench.json"
    assert main(["bench", _two_layers(tmp_path / "m.onnx"), "--target", "macarray", "--fallback", "cpu",
                 "--peer", "onnxruntime", "--repeat", "2", "--warmup", "1", "--profile", "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert out.count("partitions: 3 (2 on macarray, 1 on the host)") == 1, out
    assert "100.0% of the MACs on macarray" in out and "outputs agree" in out
    assert "each partition in the last timed run" in out and "last run ms" in out
    data = json.loads(report.read_text())
    assert [p["device"] for p in data["partitions"]] == ["macarray", "host", "macarray"]
    assert [p["backend"] for p in data["partitions"]] == ["macarray", "cpu", "macarray"]
    assert all(p["last_run_seconds"] > 0 for p in data["partitions"]) and data["agrees"]


def test_bench_fallback_none_and_backend_opt_are_one_line_errors(macarray, tmp_path: Path,  # noqa: F811
                                                                 capsys: pytest.CaptureFixture) -> None:
    model = _two_layers(tmp_path / "m.onnx")
    assert main(["bench", model, "--target", "macarray", "--fallback", "none", "--repeat", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "target 'macarray': unsupported op(s):" in err[0] and "Tanh" in err[0]
    assert main(["bench", model, "--target", "macarray", "--backend-opt", "tiles=4", "--repeat", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "takes no option tiles" in err[0]


def _serve(tmp_path: Path, fallback: str) -> tuple[int, Path]:
    model = tmp_path / "sin.onnx"
    onnx.save(sin_model(), model)
    report = tmp_path / "serve.json"
    code = main(["serve-bench", str(model), "--devices", "npu:1,cpu:1", "--requests", "4", "--concurrency", "2",
                 "--calibration-random", "2", "--fallback", fallback, "--check", "--json", str(report)])
    return code, report


def test_serve_bench_fallback_none_refuses_a_model_that_needs_the_host(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    code, report = _serve(tmp_path, "none")
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("warning:")]
    assert code == 2 and len(err) == 1, err
    assert "Sin" in err[0] and "the host fallback is off" in err[0] and not report.exists()


def test_serve_bench_fallback_interpreter_compiles_the_host_parts(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    code, report = _serve(tmp_path, "interpreter")
    assert code == 0, capsys.readouterr()
    data = json.loads(report.read_text())
    assert data["fallback"] == "interpreter" and data["mismatches"] == 0
    assert [(p["kind"], p["backend"]) for p in data["partitions"]] == [("npu", "npu"), ("cpu", "interpreter"),
                                                                      ("npu", "npu")]
