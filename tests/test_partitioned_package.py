"""A model the NPU runs only in part, compiled to one file: written, checked, read back and simulated.

The oracle is the reference evaluator on the quantized graph the partitions compute together
(`PartitionedFunction.function`): the NPU partitions on the simulator and the host partitions read
back from the file must reproduce it bit for bit, and every NPU partition also runs under --checked.
"""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from exported_models import exported_model

import glowsdk
from glowsdk.backends.registry import get_backend
from glowsdk.cli.main import main
from glowsdk.compiler.partition.hetero import PartitionedFunction
from glowsdk.compiler.partition.package import read_package
from glowsdk.compiler.passes import PassManager
from glowsdk.compiler.pipeline import prepare_function
from glowsdk.graph.serialize import function_from_data, function_to_data
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile
from glowsdk.reference.evaluator import evaluate

from npu_nets import NetBuilder


@pytest.mark.parametrize("model", ["squeezenet", "lstm", "transformer_encoder"])
def test_a_function_survives_the_round_trip_through_data(model: str) -> None:
    network = glowsdk.load(model, random_weights=0) if model == "squeezenet" else glowsdk.load(exported_model(model))
    graph, _ = prepare_function(network.function, get_backend("interpreter"), manager=PassManager(),
                                hook=lambda stage, fn: None)
    record, arrays = function_to_data(graph)
    back = function_from_data(json.loads(json.dumps(record)), arrays, "test")
    assert [n.kind for n in back.nodes] == [n.kind for n in graph.nodes]
    assert [n.origin for n in back.nodes] == [n.origin for n in graph.nodes]
    feeds = network.random_inputs(seed=3)
    if model == "transformer_encoder":
        feeds = {"tokens": np.random.default_rng(3).integers(0, 100, (1, 16))}
    want, got = evaluate(graph, feeds), evaluate(back, feeds)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)


def test_a_record_with_a_wrong_type_is_refused() -> None:
    graph, _ = prepare_function(glowsdk.load("squeezenet").function, get_backend("interpreter"),
                                manager=PassManager(), hook=lambda stage, fn: None)
    record, arrays = function_to_data(graph)
    record["nodes"][3]["types"][0]["shape"][0] += 1
    with pytest.raises(glowsdk.errors.GraphError, match="is stored with types"):
        function_from_data(record, arrays, "p.json")


def _sin_net():
    b = NetBuilder((1, 8, 16, 16))
    out = b.node("Sin", [b.conv("x", 8, 32)])
    return b.network(b.conv(b.conv(out, 32, 32), 32, 16, relu=False))


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory):
    network = _sin_net()
    quant = QuantizationConfig(collect_profile(network, calibration_random(network, 2)))
    compiled = glowsdk.compile(network, "npu", quantization=quant).compiled
    assert isinstance(compiled, PartitionedFunction)
    assert {p.backend for p in compiled.partitions} == {"npu", "cpu"}
    path = tmp_path_factory.mktemp("pkg") / "model.npub"
    compiled.save(str(path))
    return network, compiled, path


def test_simulate_runs_the_file_bit_exact_and_race_free(package, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    network, compiled, path = package
    feeds = network.random_inputs(seed=5)
    np.save(tmp_path / "x.npy", feeds["x"])
    assert main(["simulate", str(path), "--checked", "--input", f"x={tmp_path / 'x.npy'}",
                 "--output", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "partitioned model" in out and "NPU cycles" in out and "[checked]" in out
    want = evaluate(compiled.function, feeds)
    for name, value in want.items():
        np.testing.assert_array_equal(np.load(tmp_path / "out" / f"{name}.npy"), value)


def test_the_manifest_lists_every_partition(package) -> None:
    _, compiled, path = package
    read = read_package(path)
    assert read.target == "npu" and read.fallback == "cpu"
    assert [p.device for p in read.parts] == ["npu" if p.side == "target" else "host" for p in compiled.partitions]
    assert all((p.payload is None) == (p.device == "host") for p in read.parts)


def test_a_corrupt_member_is_one_line(package, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _, _, path = package
    bad = tmp_path / "bad.npub"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith(".json") and info.filename != "manifest.json":
                data = data.replace(b'"Sin"', b'"Sim"')
            dst.writestr(info, data)
    assert main(["simulate", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fails its SHA-256 check" in err[0] and str(bad) in err[0]


def test_a_newer_format_is_refused(package, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _, _, path = package
    bad = tmp_path / "newer.npub"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "manifest.json":
                manifest = json.loads(data)
                manifest["version"] = 99
                data = json.dumps(manifest).encode()
            dst.writestr(info, data)
    assert main(["simulate", str(bad)]) == 2
    assert "version 99" in capsys.readouterr().err
