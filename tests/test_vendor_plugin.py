"""A vendor's backend, installed the way a vendor ships it, found through the entry point alone.

The fixture pip-installs tests/vendor_plugin (the imaginary Acme NPU-1 backend)
offline into a folder of its own (tests/plugin_install.py). Nothing below imports the plugin: everything goes through `glowsdk
backends`, `get_backend("acme")` and `glowsdk.compile(..., target="acme")`.
"""
from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from importlib import metadata
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from plugin_install import environment_with, install_plugin

import glowsdk
from glowsdk.backends import get_backend
from glowsdk.compiler.backend import Backend, CompiledFunction
from glowsdk.compiler.pipeline import compile_function
from glowsdk.errors import UnsupportedError, UnsupportedOpsError

PLUGIN = Path(__file__).parent / "vendor_plugin"


def _why_wheels_cannot_be_built() -> str | None:
    """Building offline without isolation needs setuptools with bdist_wheel in this environment."""
    try:
        version = metadata.version("setuptools")
    except metadata.PackageNotFoundError:
        return "setuptools is not installed, so the plugin cannot be built without isolation"
    major, minor = (int(part) for part in re.findall(r"\d+", version)[:2])
    if (major, minor) < (70, 1):
        try:
            metadata.version("wheel")
        except metadata.PackageNotFoundError:
            return f"setuptools {version} builds wheels only with the 'wheel' package (or setuptools >= 70.1)"
    return None


@pytest.fixture(scope="module")
def acme_site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the plugin is installed (tests/plugin_install.py); built from a copy so the source tree stays clean."""
    reason = _why_wheels_cannot_be_built()
    assert reason is None, f"{reason}: install the test extra (pip install -e \".[test]\"), which requires it"
    return install_plugin(request, tmp_path_factory, PLUGIN, "acme_npu_backend")


@pytest.fixture(scope="module")
def acme(acme_site: Path) -> Backend:
    """The installed plugin's backend, found through its entry point."""
    return get_backend("acme")


def _model(nodes: list, inputs: dict[str, tuple], initializers: dict[str, np.ndarray],
           outputs: tuple[str, ...] = ("y",)) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "acme_test",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n, shape in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs],
        [numpy_helper.from_array(a, n) for n, a in initializers.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def small_cnn(seed: int = 0) -> onnx.ModelProto:
    """Conv -> Relu -> MaxPool -> Conv -> Max(., 0) -> residual Add -> Clip(., 0) -> flatten -> Gemm."""
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Max", ["c2", "zero"], ["m2"]),
        helper.make_node("Add", ["p1", "m2"], ["s"]),
        helper.make_node("Clip", ["s", "zero_scalar"], ["r2"]),
        helper.make_node("Reshape", ["r2", "flat"], ["f"]),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1),
    ]
    return _model(nodes, {"x": (2, 3, 12, 12)}, {
        "w1": weight(8, 3, 3, 3), "b1": weight(8), "w2": weight(8, 8, 3, 3),
        "zero": np.zeros(1, np.float32), "zero_scalar": np.array(0, np.float32), "flat": np.array([2, 288], np.int64),
        "w3": weight(10, 288), "b3": weight(10)})


def _compare(network: glowsdk.Network, **options) -> tuple[CompiledFunction, Counter]:
    """Compile for acme and for the interpreter and assert the outputs agree.

    Returns acme's compiled function and the node kinds the interpreter's compile() received.
    """
    on_acme = glowsdk.compile(network, target="acme", **options)
    on_interpreter = glowsdk.compile(network, target="interpreter")
    feeds = network.random_inputs(seed=1)
    want, got = on_interpreter.run(feeds), on_acme.run(feeds)
    assert set(got) == set(want)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-6, atol=1e-6)
    received: Counter = Counter()
    compile_function(network.function, get_backend("interpreter"),
                     on_stage=lambda stage, fn: stage == "scheduled" and received.update(fn.count_kinds()))
    return on_acme.compiled, received


def test_cli_lists_the_installed_backend(acme_site: Path) -> None:
    listed = subprocess.run([sys.executable, "-m", "glowsdk", "backends"], capture_output=True, text=True,
                            env=environment_with(acme_site),
                            timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert re.search(r"^acme\b.*acme_npu_backend:AcmeBackend", listed.stdout, re.M), listed.stdout
    assert "interpreter" in listed.stdout


def test_device_info(acme: Backend) -> None:
    info = acme.device_info()
    assert info.memory_bytes == 64 << 20 and info.extra["cores"] == 4
    assert "Acme NPU-1" in info.description


def test_small_network_keeps_relu_and_recovers_max_as_relu(acme: Backend) -> None:
    network = glowsdk.load(small_cnn())
    imported = network.function.count_kinds()
    assert imported["Relu"] == imported["Max"] == imported["Clip"] == imported["Gemm"] == 1
    compiled, interpreted = _compare(network)
    # the interpreter got Relu, Max and Clip as three Max(x, 0); acme kept its Relu and
    # its post-lowering transform turned the other two back into Relu
    assert interpreted["Max"] == 3 and "Relu" not in interpreted
    assert compiled.received["Relu"] == 3 and "Max" not in compiled.received
    assert "Gemm" not in compiled.received and "Clip" not in compiled.received
    assert compiled.launches["Conv+Relu"] == 2 and compiled.launches["Relu"] == 1


def test_backend_specific_compile_options(acme: Backend) -> None:
    network = glowsdk.load(small_cnn(seed=3))
    unfused, _ = _compare(network, fuse=False)
    assert "Conv+Relu" not in unfused.launches and unfused.launches["Relu"] == 3
    with pytest.raises(UnsupportedError, match="unknown option.*tile"):
        glowsdk.compile(network, target="acme", tile=4)


def test_squeezenet_matches_the_interpreter(acme: Backend) -> None:
    network = glowsdk.load("squeezenet", random_weights=0)
    relus = network.function.count_kinds()["Relu"]
    compiled, interpreted = _compare(network)
    assert compiled.received["Relu"] == relus and "Relu" not in interpreted
    assert compiled.launches["Conv+Relu"] == relus
    assert not {"Softmax", "GlobalAveragePool"} & set(compiled.received)


def test_ops_acme_cannot_run_are_named(acme: Backend) -> None:
    nodes = [helper.make_node("Sin", ["x"], ["s"]),
             helper.make_node("TopK", ["s", "k"], ["y", "i"], axis=1),
             helper.make_node("Relu", ["y"], ["z"])]
    network = glowsdk.load(_model(nodes, {"x": (2, 6)}, {"k": np.array([3], np.int64)}, outputs=("z", "i")))
    with pytest.raises(UnsupportedOpsError, match="acme") as caught:
        glowsdk.compile(network, target="acme", fallback=None)
    assert caught.value.ops == ["Sin", "TopK"]
