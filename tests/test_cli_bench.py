"""`glowsdk bench`: timings of both sides, the ratio, FLOP counts from the model's dims, the output
check against onnxruntime, and the one-line errors."""
from __future__ import annotations

import json
import sys

import numpy as np
import onnx
import pytest
from cpu.mlp_util import mlp
from onnx import helper, numpy_helper

import glowsdk
from glowsdk.cli import bench
from glowsdk.cli.main import main


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("GLOWSDK_CACHE_DIR", str(tmp_path / "cache"))


def saved(tmp_path, model: onnx.ModelProto, name: str = "m.onnx") -> str:
    path = tmp_path / name
    onnx.save(model, path)
    return str(path)


def test_bench_against_onnxruntime_writes_table_and_json(tmp_path, capsys):
    report = tmp_path / "bench.json"
    args = [saved(tmp_path, mlp(batch=3)), "--target", "cpu", "--peer", "onnxruntime", "--repeat", "3",
            "--json", str(report)]
    assert main(["bench", *args]) == 0
    out = capsys.readouterr().out
    assert "onnxruntime" in out and "outputs agree" in out
    data = json.loads(report.read_text())
    glow, peer = data["sides"]
    assert [glow["name"], peer["name"]] == ["glowsdk cpu", "onnxruntime"]
    assert len(glow["seconds"]) == len(peer["seconds"]) == 3
    assert glow["best_ms"] == pytest.approx(1e3 * min(glow["seconds"]))
    assert data["ratio"] == pytest.approx(glow["median_ms"] / peer["median_ms"])
    assert data["batch"] == 3 and data["agrees"] and data["difference"] < bench.AGREEMENT
    assert data["flops"] == 2 * 3 * (16 * 32 + 32 * 5)  # Gemm 3x16 @ 16x32, then 3x32 @ 32x5
    assert peer["throughput_per_s"] == pytest.approx(3 / (peer["median_ms"] / 1e3))
    assert main(["bench", *args]) == 0  # again: the compile comes from the cache
    assert json.loads(report.read_text())["from_cache"]


def test_conv_flops_count_every_multiply_add():
    weights = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 8, 8])],
                              initializer=[weights])
    network = glowsdk.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert bench.network_flops(network.function) == 2 * (4 * 8 * 8) * (3 * 3 * 3)


def test_bench_on_the_interpreter_without_a_peer(tmp_path, capsys):
    assert main(["bench", saved(tmp_path, mlp()), "--target", "interpreter", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "glowsdk interpreter" in out and "ratio" not in out


def test_outputs_that_disagree_fail_the_bench(tmp_path, capsys, monkeypatch):
    real = bench.onnxruntime_runner

    def shifted(proto, threads):
        run = real(proto, threads)
        return lambda feeds: {k: v + 1.0 for k, v in run(feeds).items()}

    monkeypatch.setattr(bench, "onnxruntime_runner", shifted)
    assert main(["bench", saved(tmp_path, mlp()), "--peer", "onnxruntime", "--repeat", "1"]) == 1
    captured = capsys.readouterr()
    assert "DISAGREE" in captured.out and "outputs differ from onnxruntime" in captured.err


def test_missing_onnxruntime_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import now raises ImportError
    assert main(["bench", saved(tmp_path, mlp()), "--peer", "onnxruntime", "--repeat", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "onnxruntime is not installed" in err and len(err.splitlines()) == 1


def test_a_sample_of_a_fast_model_counts_the_runs_that_last_the_minimum():
    from glowsdk.cli.bench import MAX_LOOPS, MIN_SAMPLE_SECONDS, runs_per_sample

    def model(durations):
        """A fake run taking the given durations in turn, on a fake clock."""
        now, left = [0.0], list(durations)
        return (lambda: now.__setitem__(0, now[0] + (left.pop(0) if left else durations[-1]))), (lambda: now[0])

    run, clock = model([2 * MIN_SAMPLE_SECONDS])
    assert runs_per_sample(run, clock) == 1
    run, clock = model([MIN_SAMPLE_SECONDS / 40.5])
    assert runs_per_sample(run, clock) == 41
    run, clock = model([MIN_SAMPLE_SECONDS * 0.555] + [MIN_SAMPLE_SECONDS / 100])  # one slow first run
    assert runs_per_sample(run, clock) == 46
    run, clock = model([0.0])
    assert runs_per_sample(run, clock) == MAX_LOOPS


def test_bench_profile_times_every_kernel(tmp_path, capsys):
    report = tmp_path / "bench.json"
    model = mlp(batch=2)
    assert main(["bench", saved(tmp_path, model), "--target", "cpu", "--repeat", "2", "--profile",
                 "--json", str(report)]) == 0
    assert "where the time goes" in capsys.readouterr().out
    steps = json.loads(report.read_text())["profile"]
    matmuls = [s for s in steps if s["kinds"].startswith("MatMul")]
    gemms = [n for n in model.graph.node if n.op_type == "Gemm"]
    assert len(matmuls) == len(gemms) and all(s["flops"] > 0 and s["ms"] > 0 for s in matmuls)
    # each named after the model's Gemm it computes (its name, or its first output's when it has none)
    assert sorted((s["onnx_node"], s["onnx_op"]) for s in matmuls) == sorted((g.name or g.output[0], "Gemm")
                                                                               for g in gemms)


def test_bench_profile_needs_a_target_that_counts_cycles(tmp_path, capsys):
    assert main(["bench", saved(tmp_path, mlp(batch=1)), "--target", "interpreter", "--repeat", "1",
                 "--profile"]) == 2
    assert "target interpreter counts no cycles per kernel" in capsys.readouterr().err
