"""Plugin hygiene: clashing registrations, a plugin's own bugs, a plugin's own node kinds.

A vendor's backend package is written into a temporary folder, put on sys.path and
registered through the `glowsdk.backends` entry points as the registry sees them
(monkeypatched: nothing is pip-installed). Each of its targets fails in one hook on
purpose, so the CLI's report can be checked against the line that raised.
"""
from __future__ import annotations

import importlib
import sys
import textwrap
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glowsdk
from glowsdk.backends import plugins, registry
from glowsdk.backends.interpreter import InterpreterBackend
from glowsdk.cli.main import main
from glowsdk.compiler.pipeline import compile_function
from glowsdk.errors import GlowError
from glowsdk.graph.printer import format_function
from glowsdk.graph.spec import NODE_KINDS, AttrKind
from glowsdk.reference.registry import KERNELS

PACKAGE = "hygiene_plugin"
DISTRIBUTION = "hygiene-plugin"
FUSED = "HygieneConvRelu"

# The plugin: one working target that fuses Conv+Relu into a node kind of its own, and one
# target per hook that raises there ("# raises" marks the line the report must name).
PLUGIN_SOURCE = '''
"""A vendor's backend whose targets each fail in one hook (tests/test_plugin_hygiene.py)."""
from __future__ import annotations

import numpy as np

from glowsdk.compiler.backend import Backend, CompiledFunction
from glowsdk.compiler.lowering.primitives import PRIMITIVES
from glowsdk.graph.nodes.nn import Conv
from glowsdk.graph.kinds import define_node
from glowsdk.reference.evaluator import evaluate
from glowsdk.reference.registry import KERNELS, kernel

ConvRelu = define_node(
    "HygieneConvRelu", "input filter bias?", attrs=Conv.spec.attrs, infer=Conv.spec.infer,
    verify=Conv.spec.verify, family="hygiene plugin", doc="Relu(Conv(...)) as one kernel.")


@kernel(ConvRelu)
def _conv_relu(node, x, w, b):
    return np.maximum(KERNELS["Conv"](node, x, w, b), np.float32(0))


class Evaluated(CompiledFunction):
    def __init__(self, function):
        super().__init__(function)
        self.function = function

    def execute(self, inputs):
        return evaluate(self.function, inputs)


class Fusing(Backend):
    name = "hygiene"
    primitives = {name: p.elems for name, p in PRIMITIVES.items()}

    def is_op_supported(self, node):
        return node.kind in ("Relu", "HygieneConvRelu") or super().is_op_supported(node)

    def should_lower(self, node):
        return node.kind != "Relu"

    def transform_post_lowering(self, function):
        fused = 0
        for relu in list(function.nodes):
            conv = relu.inputs[0].node if relu.kind == "Relu" else None
            if conv is None or conv.kind != "Conv" or len(conv.users) != 1:
                continue
            # Relu(Conv(x, w, b)) -> HygieneConvRelu(x, w, b)
            with function.inserting_before(relu):
                node = function.add(ConvRelu, *conv.inputs, name=f"{relu.name}_fused", **conv.attrs)
            function.replace_all_uses(relu.result(), node)
            function.erase(relu)
            function.erase(conv)
            fused += 1
        return fused > 0

    def compile(self, function, options):
        return Evaluated(function)


class FailsInCompile(Fusing):
    def compile(self, function, options):
        raise ValueError("no kernel for this Conv")  # raises in compile


class FailsInIsOpSupported(Fusing):
    def is_op_supported(self, node):
        return {"Conv": True}[node.kind]  # raises in is_op_supported


class FailsInShouldLower(Fusing):
    def should_lower(self, node):
        return np.linalg.inv(np.zeros((2, 3))) is None  # raises in should_lower


class FailsInTransform(Fusing):
    def transform_post_lowering(self, function):
        raise RuntimeError("fusion table\\nis corrupt")  # raises in transform_post_lowering


class BrokenFunction(CompiledFunction):
    def execute(self, inputs):
        raise ZeroDivisionError("division by zero")  # raises in execute


class FailsInExecute(Fusing):
    def compile(self, function, options):
        return BrokenFunction(function)


class FailsInDeviceInfo(Fusing):
    def device_info(self):
        raise KeyError("clock_mhz")  # raises in device_info
'''

HOOKS = {
    "compile": ("FailsInCompile", "ValueError: no kernel for this Conv"),
    "is_op_supported": ("FailsInIsOpSupported", "KeyError: 'Relu'"),
    "should_lower": ("FailsInShouldLower", "LinAlgError: "),
    "transform_post_lowering": ("FailsInTransform", "RuntimeError: fusion table is corrupt"),
    "execute": ("FailsInExecute", "ZeroDivisionError: division by zero"),
}


@dataclass(frozen=True)
class FakeEntryPoint:
    """An entry point of an installed distribution, as `importlib.metadata` hands it out."""

    name: str
    value: str
    dist: SimpleNamespace
    group: str = registry.GROUP

    def load(self):
        return metadata.EntryPoint(self.name, self.value, self.group).load()


def dist(name: str, version: str = "1.0") -> SimpleNamespace:
    return SimpleNamespace(name=name, version=version)


def register(monkeypatch: pytest.MonkeyPatch, *fakes: FakeEntryPoint) -> None:
    """Make the registry see the installed entry points plus `fakes`."""
    installed = metadata.entry_points

    monkeypatch.setattr(registry, "entry_points", lambda group: [*installed(group=group), *fakes])


def plugin_target(name: str, cls: str) -> FakeEntryPoint:
    return FakeEntryPoint(name, f"{PACKAGE}.backend:{cls}", dist(DISTRIBUTION))


@pytest.fixture(scope="module")
def plugin_file(tmp_path_factory: pytest.TempPathFactory):
    """The plugin package on sys.path; its node kind and kernel are forgotten afterwards."""
    root = tmp_path_factory.mktemp("site")
    (root / PACKAGE).mkdir()
    (root / PACKAGE / "__init__.py").write_text('"""A vendor backend package."""\n')
    path = root / PACKAGE / "backend.py"
    path.write_text(textwrap.dedent(PLUGIN_SOURCE))
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    yield path
    sys.path.remove(str(root))
    for module in [m for m in sys.modules if m.split(".")[0] == PACKAGE]:
        del sys.modules[module]
    NODE_KINDS.pop(FUSED, None)  # other tests walk every declared kind and kernel
    KERNELS.pop(FUSED, None)


@pytest.fixture
def targets(plugin_file: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working target `hygiene` and one `hygiene-HOOK` per failing hook, registered."""
    register(monkeypatch, plugin_target("hygiene", "Fusing"),
             *(plugin_target(f"hygiene-{hook}", cls) for hook, (cls, _) in HOOKS.items()),
             plugin_target("hygiene-device", "FailsInDeviceInfo"))
    return plugin_file


def conv_relu_model(path: Path) -> Path:
    """x -> Conv -> Relu -> Add(x') : one Conv+Relu to fuse, one Add left as it is."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Add", ["r", "c0"], ["y"])]
    graph = helper.make_graph(
        nodes, "hygiene", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 2, 5, 5))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
         for name, shape in (("w", (3, 2, 3, 3)), ("b", (3,)), ("c0", (1, 3, 1, 1)))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def raising_line(source: Path, hook: str) -> int:
    lines = source.read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.endswith(f"# raises in {hook}"))


# -- two packages, one target name --------------------------------------------------------

def test_two_packages_registering_one_name_are_named_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # a target name no real package uses: other tests may install theirs meanwhile
    register(monkeypatch, FakeEntryPoint("zeta", "zeta_npu_backend:ZetaBackend", dist("zeta-npu-backend", "0.1.0")),
             FakeEntryPoint("zeta", "zeta_legacy.backend:Backend", dist("zeta-legacy", "2.3")))
    with pytest.raises(GlowError) as caught:
        registry.get_backend("zeta")
    assert str(caught.value) == ("target 'zeta' is registered by more than one installed package: "
                                 "zeta-npu-backend 0.1.0 (zeta_npu_backend:ZetaBackend) and "
                                 "zeta-legacy 2.3 (zeta_legacy.backend:Backend); uninstall all but one")
    assert isinstance(registry.available_backends()["zeta"], registry.Clash)
    assert isinstance(registry.get_backend("interpreter"), InterpreterBackend)  # the others still work


def test_one_distribution_seen_twice_is_no_clash(targets: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # an editable install whose metadata is found twice, spelled two ways: one registration
    register(monkeypatch, FakeEntryPoint("twice", f"{PACKAGE}.backend:Fusing", dist("Hygiene_Plugin")),
             FakeEntryPoint("twice", f"{PACKAGE}.backend:Fusing", dist("hygiene-plugin")))
    assert registry.get_backend("twice").name == "hygiene"
    # the same distribution with two values (stale metadata of an older version) is a clash
    register(monkeypatch, FakeEntryPoint("twice", f"{PACKAGE}.backend:Fusing", dist(DISTRIBUTION, "1.0")),
             FakeEntryPoint("twice", f"{PACKAGE}.old:Fusing", dist(DISTRIBUTION, "0.9")))
    with pytest.raises(GlowError, match=rf"{DISTRIBUTION} 1.0 \({PACKAGE}.backend:Fusing\) and "
                                        rf"{DISTRIBUTION} 0.9 \({PACKAGE}.old:Fusing\)"):
        registry.get_backend("twice")


def test_backends_command_lists_clashes_and_broken_plugins(targets: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture) -> None:
    register(monkeypatch, plugin_target("hygiene-device", "FailsInDeviceInfo"),
             FakeEntryPoint("zeta", "zeta_npu_backend:ZetaBackend", dist("zeta-npu-backend")),
             FakeEntryPoint("zeta", "zeta_legacy:Backend", dist("zeta-legacy")))
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    assert ("zeta  (zeta_npu_backend:ZetaBackend | zeta_legacy:Backend)\n  not usable: target 'zeta' is "
            "registered by more than one installed package: zeta-npu-backend 1.0") in out
    line = raising_line(targets, "device_info")
    assert (f"  failed to load: backend 'hygiene-device' (package {DISTRIBUTION} 1.0) raised "
            f"KeyError: 'clock_mhz' in device_info at {targets}:{line}") in out
    assert "interpreter  (glowsdk.backends.interpreter:InterpreterBackend)\n" in out


# -- an exception inside a plugin is the plugin's -----------------------------------------

@pytest.mark.parametrize("hook", list(HOOKS))
def test_an_exception_in_a_plugin_hook_names_the_plugin(hook: str, targets: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    model = conv_relu_model(tmp_path / "m.onnx")
    assert main(["run", str(model), "--target", f"hygiene-{hook}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"glowsdk: error: backend 'hygiene-{hook}' (package {DISTRIBUTION} 1.0) raised "
                          f"{HOOKS[hook][1]}"), err
    # the plugin's line, even when the exception left from numpy's code below it
    assert f" in {hook} at {targets}:{raising_line(targets, hook)} (a bug in the plugin, not in glowsdk" in err
    assert "internal error" not in err


def test_a_builtin_backend_bug_stays_a_glowsdk_bug(targets: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture) -> None:
    def compile_badly(self, function, options):
        return AttrKind.INT.normalise("3")  # raises TypeError inside glowsdk/graph/spec.py

    monkeypatch.setattr(InterpreterBackend, "compile", compile_badly)
    assert main(["compile", str(conv_relu_model(tmp_path / "m.onnx")), "--target", "interpreter"]) == 1
    err = capsys.readouterr().err
    assert err == ("glowsdk: internal error: TypeError: expected an int, got '3' "
                   "(a bug in glowsdk; GLOWSDK_DEBUG=1 shows the traceback)\n")


def test_the_innermost_owned_frame_decides(targets: Path) -> None:
    backend = registry.get_backend("hygiene-compile")
    with pytest.raises(ValueError) as in_plugin:
        backend.compile(None, None)
    blamed = plugins.plugin_error(in_plugin.value)
    assert isinstance(blamed, plugins.PluginError) and blamed.plugin.package == PACKAGE
    assert (blamed.file, blamed.line) == (str(targets), raising_line(targets, "compile"))
    with pytest.raises(TypeError) as in_glowsdk:
        AttrKind.INT.normalise("3")
    assert plugins.plugin_error(in_glowsdk.value) is None
    # glowsdk's own entry points are not plugins; the test's own code is nobody's plugin
    assert PACKAGE in plugins.plugin_packages() and not plugins.OWN_PACKAGES & set(plugins.plugin_packages())
    assert plugins.plugin_error(ValueError("never raised")) is None


# -- a plugin's own node kind --------------------------------------------------------------

def test_a_plugin_declared_node_kind_is_counted_printed_and_run(targets: Path, tmp_path: Path) -> None:
    network = glowsdk.load(str(conv_relu_model(tmp_path / "m.onnx")))
    stages: dict[str, dict[str, int]] = {}
    printed: dict[str, str] = {}

    def on_stage(stage: str, function) -> None:
        stages[stage] = function.count_kinds()
        printed[stage] = format_function(function)

    compile_function(network.function, registry.get_backend("hygiene"), on_stage=on_stage)
    assert stages["lowered"]["Conv"] == stages["lowered"]["Relu"] == 1 and FUSED not in stages["lowered"]
    assert stages["transformed"][FUSED] == 1 and "Conv" not in stages["transformed"]
    assert "Relu" not in stages["transformed"]
    assert f"= {FUSED}(input=%x, filter=%w, bias=%b) {{kernel=[3, 3]" in printed["transformed"]
    feeds = network.random_inputs(seed=1)
    got = glowsdk.compile(network, target="hygiene").run(feeds)
    want = glowsdk.compile(network, target="interpreter").run(feeds)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6, atol=1e-6)


def test_compile_command_shows_a_plugin_declared_node_kind(targets: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture) -> None:
    assert main(["compile", str(conv_relu_model(tmp_path / "m.onnx")), "--target", "hygiene",
                 "--dump-graph", "text"]) == 0
    out = capsys.readouterr().out
    assert f"= {FUSED}(" in out
    assert any(line.split()[:1] == [FUSED] for line in out.splitlines())  # a row of the node-count table
