"""`glowsdk serve-bench`: the report and its JSON, on the heterogeneous net (NPU, CPU, NPU)."""
from __future__ import annotations

import json

import onnx
from nets import sin_model

from glowsdk.cli.main import main


def test_serve_bench_reports_partitions_latency_and_utilisation(tmp_path, capsys):
    model = tmp_path / "sin.onnx"
    onnx.save(sin_model(), model)
    out = tmp_path / "report.json"
    code = main(["serve-bench", str(model), "--devices", "npu:2,cpu:1", "--requests", "24", "--concurrency", "4",
                 "--calibration-random", "2", "--check", "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    report = json.loads(out.read_text())
    assert report["requests"] == 24 and report["mismatches"] == 0
    assert [p["kind"] for p in report["partitions"]] == ["npu", "cpu", "npu"]
    assert "Sin" in report["partitions"][1]["ops"]
    runs = {d["device"]: d["runs"] for d in report["device_stats"]}
    assert runs["cpu0"] == 24 and runs["npu0"] + runs["npu1"] == 48
    assert max(d["utilisation"] for d in report["device_stats"]) == 1.0
    lat = report["latency_wall"]
    assert 0 < lat["p50"] <= lat["p99"]
    assert "check: 0 of 24 responses differ from the interpreter" in text


def test_serve_bench_refuses_a_bad_device_list(capsys):
    assert main(["serve-bench", "resnet50", "--devices", "gpu:2"]) == 2
    assert "--devices 'gpu:2': expected KIND:COUNT" in capsys.readouterr().err

