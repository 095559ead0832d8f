"""A profile says which graph it was made for (format version 2, "graph.fingerprint"), and quantizing
another model with it is a one-line error; version 1 files are still read, and checked the same way."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glowsdk
from glowsdk.cli.main import main
from glowsdk.errors import GlowError
from glowsdk.quantization import (
    QuantizationConfig,
    collect_profile,
    load_profile,
    save_profile,
)
from glowsdk.zoo.digits import digits_model_path


def chain(*ops: str, name: str = "chain") -> onnx.ModelProto:
    """x -> Conv -> each of `ops` in turn (unary ONNX ops) -> y."""
    rng = np.random.default_rng(1)
    weights = [numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32) * 0.3, "w")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["t0"], pads=[1, 1, 1, 1])]
    for i, op in enumerate(ops):
        nodes.append(helper.make_node(op, [f"t{i}"], [f"t{i + 1}"]))
    nodes.append(helper.make_node("Identity", [f"t{len(ops)}"], ["y"]))
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 2, 6, 6))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def profile_of(model) -> object:
    network = glowsdk.load(model)
    return collect_profile(network, [network.random_inputs(0), network.random_inputs(1)])


def quantize(model, profile) -> None:
    glowsdk.compile(glowsdk.load(model), "interpreter", quantization=QuantizationConfig(profile))


def test_the_profile_file_records_the_graph_fingerprint(tmp_path):
    profile = profile_of(chain("Relu", "Neg"))
    save_profile(profile, tmp_path / "p.json")
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["version"] == 2 and data["graph"] == {"fingerprint": profile.fingerprint}
    assert len(profile.fingerprint) == 64 and int(profile.fingerprint, 16) >= 0
    assert load_profile(tmp_path / "p.json").fingerprint == profile.fingerprint
    quantize(chain("Relu", "Neg"), load_profile(tmp_path / "p.json"))


def test_a_value_named_alike_in_another_model_is_a_one_line_error():
    profile = profile_of(chain("Tanh", "Relu"))
    with pytest.raises(GlowError) as err:
        quantize(chain("Exp", "Relu"), profile)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("the profile (of chain) was made for another graph (fingerprint ")
    assert text.endswith("value 't1' is Exp of float32, rank 4 here, Tanh of float32, rank 4 in the profile; "
                         "profile this model with these options")


def test_a_node_lowered_otherwise_in_another_model_is_named():
    with pytest.raises(GlowError, match=r"'t1' is t1/max\d+ here, t1/mul\d+ in the profile"):
        quantize(chain("Relu", "Neg"), profile_of(chain("Neg", "Relu")))


def test_a_model_with_a_node_more_or_less_is_refused_by_the_fingerprint():
    short, longer = profile_of(chain("Relu")), profile_of(chain("Relu", "Neg"))
    assert short.fingerprint != longer.fingerprint
    with pytest.raises(GlowError, match=r"the profile \(of chain\) was made for another graph \(fingerprint "
                                        r"[0-9a-f]{12}, this graph's [0-9a-f]{12}\): 't2' is in this graph and not "
                                        r"in the profile; profile this model with these options"):
        quantize(chain("Relu", "Neg"), short)
    with pytest.raises(GlowError, match=r"'t2' is in the profile and not in this graph"):
        quantize(chain("Relu"), longer)


def test_a_profile_at_another_batch_size_still_fits():
    small = glowsdk.load(digits_model_path(), input_shapes={"image": (1, 1, 8, 8)})
    large = glowsdk.load(digits_model_path(), input_shapes={"image": (16, 1, 8, 8)})
    profile = collect_profile(large, [large.random_inputs(0)])
    compiled = glowsdk.compile(small, "interpreter", quantization=QuantizationConfig(profile))
    assert sum(compiled.compiled.quantization_report.quantized.values()) > 0


def as_version_1(path, tmp_path):
    data = json.loads(path.read_text())
    data["version"] = 1
    del data["graph"]
    old = tmp_path / "v1.json"
    old.write_text(json.dumps(data))
    return old


def test_version_1_profiles_are_read_and_checked_the_same_way(tmp_path):
    profile = profile_of(chain("Relu", "Neg"))
    save_profile(profile, tmp_path / "p.json")
    old = load_profile(as_version_1(tmp_path / "p.json", tmp_path))
    assert old.fingerprint == profile.fingerprint
    quantize(chain("Relu", "Neg"), old)
    with pytest.raises(GlowError, match="was made for another graph"):
        quantize(chain("Relu", "Neg", "Relu"), old)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["graph"].update(fingerprint="0" * 64),
     "p.json: graph.fingerprint: 000000000000... is not the fingerprint of the graph its values describe"),
    (lambda d: d.pop("graph"), "p.json: missing key 'graph'"),
    (lambda d: d.update(graph=[]), "p.json: graph: expected a JSON object, got an array"),
    (lambda d: d.update(version=True), "p.json: version: profile format version true; this glowsdk reads versions"),
])
def test_a_bad_graph_record_is_one_precise_line(tmp_path, edit, message):
    save_profile(profile_of(chain("Relu")), tmp_path / "p.json")
    data = json.loads((tmp_path / "p.json").read_text())
    edit(data)
    (tmp_path / "p.json").write_text(json.dumps(data))
    with pytest.raises(GlowError) as err:
        load_profile(tmp_path / "p.json")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_cli_refuses_a_profile_of_another_model_in_one_line(tmp_path, capsys):
    model, other = tmp_path / "m.onnx", tmp_path / "other.onnx"
    onnx.save(chain("Relu", "Neg"), model)
    onnx.save(chain("Neg", "Relu"), other)
    profile = tmp_path / "other.json"
    assert main(["profile", str(other), "--calibration-random", "2", "-o", str(profile)]) == 0
    capsys.readouterr()
    assert main(["compile", str(model), "--target", "interpreter", "--load-profile", str(profile)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("glowsdk: error: the profile (of ")
    assert "was made for another graph" in err
