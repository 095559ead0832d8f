"""A partial chip runs any model: a plugin declaring only float32 MatMul, Add and Max, installed as a vendor
ships it, runs four PyTorch-exported networks through plain `glowsdk run --target macarray`; what it
cannot run falls back to the host, placed by the cost model (glowsdk/compiler/partition).

The oracle is onnxruntime on the original ONNX files; the MAC share counts the multiply-adds of the
lowered graph's matrix nodes (the plugin's compile refuses anything but its three kernels).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from exported_models import EXPORTED_MODELS, exported_model, model_inputs
from onnx import TensorProto, helper
from plugin_install import install_plugin

import glowsdk
from glowsdk.backends import get_backend
from glowsdk.cli.main import main
from glowsdk.compiler.backend import Backend
from glowsdk.compiler.partition.hetero import PartitionedFunction
from glowsdk.compiler.partition.placement import TARGET

PLUGIN = Path(__file__).parent / "mac_chip_plugin"


@pytest.fixture(scope="module")
def macarray(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Backend:
    """The plugin, pip-installed offline into a folder of its own (tests/plugin_install.py)."""
    install_plugin(request, tmp_path_factory, PLUGIN, "macarray_backend")
    return get_backend("macarray")


def _onnxruntime(path: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


@pytest.mark.parametrize("name", EXPORTED_MODELS)
def test_a_mac_array_runs_the_network_with_its_macs_on_chip(macarray: Backend, name: str) -> None:
    path = exported_model(name)
    compiled = glowsdk.compile(glowsdk.load(path), target="macarray").compiled
    assert isinstance(compiled, PartitionedFunction)
    assert {p.backend for p in compiled.device_partitions()} == {"macarray"}
    share = compiled.target_macs / compiled.total_macs
    assert share >= 0.8, f"{name}: only {share:.1%} of the multiply-adds on the chip"
    for seed in (0, 1):
        feeds = model_inputs(name, seed)
        got = compiled.execute(feeds)
        want = _onnxruntime(path, feeds)
        for output, value in want.items():
            np.testing.assert_allclose(got[output], value, rtol=1e-4, atol=1e-4, err_msg=f"{name} {output}")


def test_plain_run_command_with_the_default_fallback(macarray: Backend, capsys: pytest.CaptureFixture) -> None:
    assert main(["run", exported_model("unet_small"), "--target", "macarray"]) == 0
    out = capsys.readouterr().out
    assert "on macarray" in out and "of the MACs on macarray" in out and "output mask" in out


def test_fallback_none_refuses_in_the_users_terms(macarray: Backend, capsys: pytest.CaptureFixture) -> None:
    assert main(["run", exported_model("transformer_encoder"), "--target", "macarray", "--fallback", "none"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "target 'macarray': unsupported op(s):" in err[0]
    assert "LayerNormalization '/layers.0/norm1/LayerNormalization'" in err[0] or "model node(s)" in err[0]


def test_an_unknown_backend_option_is_one_line(macarray: Backend, capsys: pytest.CaptureFixture) -> None:
    assert main(["run", exported_model("unet_small"), "--target", "macarray", "--backend-opt", "tiles=4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "takes no option tiles" in err[0]


def _chain(ops: list[str]) -> onnx.ModelProto:
    """x -> op0 -> op1 -> ... -> y on a 1 x 64 float tensor."""
    names = ["x"] + [f"t{k}" for k in range(len(ops) - 1)] + ["y"]
    nodes = [helper.make_node(op, [names[k]], [names[k + 1]], name=f"{op.lower()}{k}") for k, op in enumerate(ops)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_lone_elementwise_op_never_makes_a_round_trip(macarray: Backend) -> None:
    # Exp -> Relu (Max on the chip) -> Exp: the Max alone saves less than its transfers cost
    network = glowsdk.load(_chain(["Exp", "Relu", "Exp"]))
    compiled = glowsdk.compile(network, target="macarray").compiled
    assert isinstance(compiled, PartitionedFunction)
    assert compiled.device_partitions() == [] and compiled.moved_back == 1 and len(compiled.partitions) == 1
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    np.testing.assert_allclose(compiled.execute({"x": x})["y"], np.exp(np.maximum(np.exp(x), 0)), rtol=1e-6)


def test_partition_command_reports_and_writes_json(macarray: Backend, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    out_json = tmp_path / "parts.json"
    assert main(["partition", exported_model("lstm"), "--target", "macarray", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "partitions:" in out and "MAC %" in out
    import json

    rows = json.loads(out_json.read_text())["partitions"]
    on_chip = sum(r["macs"] for r in rows if r["device"] == "macarray")
    assert on_chip / sum(r["macs"] for r in rows) >= 0.8
    assert all(r["device"] == "host" or r["backend"] == "macarray" for r in rows)


def test_the_placement_follows_support_then_cost(macarray: Backend) -> None:
    """Every node on the chip is one of the three kernels the chip declares."""
    compiled = glowsdk.compile(glowsdk.load(exported_model("mobilenet_v2_mini")), target="macarray").compiled
    for part in compiled.device_partitions():
        assert part.side == TARGET
        kinds = {n.kind for n in part.compiled.function.nodes} - {"Save"}
        assert kinds <= {"MatMul", "Add", "Max"}, kinds


def test_compile_options_reach_the_lowering_hooks() -> None:
    """A backend option decides what `should_lower` keeps: kept, Relu is no primitive, so it is refused."""
    from glowsdk.backends.interpreter import InterpreterBackend
    from glowsdk.compiler.pipeline import compile_function
    from glowsdk.errors import UnsupportedOpsError

    class KeepsRelu(InterpreterBackend):
        name = "keeps-relu"
        options = {"keep_relu": "receive Relu unlowered"}

        def should_lower(self, node) -> bool:
            return not (node.kind == "Relu" and self.compile_options.extra.get("keep_relu"))

        def compile(self, function, options):
            return super().compile(function, type(options)())

    network = glowsdk.load(_chain(["Exp", "Relu"]))
    compile_function(network.function, KeepsRelu())  # lowered to Max: runs
    with pytest.raises(UnsupportedOpsError, match=r"Relu.*in model node\(s\) Relu 'relu1'"):
        compile_function(network.function, KeepsRelu(), glowsdk.compiler.backend.CompileOptions(extra={"keep_relu": True}))
