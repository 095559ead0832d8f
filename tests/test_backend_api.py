"""The Backend contract, through in-process subclasses (no installation).

What each hook changes in the compiled graph, that the compiler verifies what a
backend's transform produced, that element kinds are enforced per primitive,
how entry-point discovery fails, and that the generated docs are current.
"""
from __future__ import annotations

from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pytest

from glowsdk.backends import registry
from glowsdk.backends.interpreter.backend import InterpreterBackend, InterpreterFunction
from glowsdk.compiler.backend import Backend, CompiledFunction, CompileOptions
from glowsdk.compiler.lowering import docgen
from glowsdk.compiler.lowering.primitives import PRIMITIVES
from glowsdk.compiler.lowering.registry import LOWERINGS
from glowsdk.compiler.pipeline import compile_function
from glowsdk.errors import GlowError, GraphError, UnsupportedOpsError
from glowsdk.graph import ElemKind, Module, Type, nodes
from glowsdk.graph.function import Function
from glowsdk.graph.node import Node
from glowsdk.reference.evaluator import evaluate

GUIDE = Path(__file__).resolve().parent.parent / "vendor_guide"
F32 = frozenset({ElemKind.FLOAT32})
RNG = np.random.default_rng(11)


class MinimalBackend(Backend):
    """Only what a backend must provide: a name, its primitives, compile."""

    name = "minimal"
    primitives = {"Add": F32, "MatMul": F32, "Equal": F32, "Conv": F32}

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        return InterpreterFunction(function)


class KeepsRelu(InterpreterBackend):
    """Runs Relu natively: asks the compiler to keep it, and records what it was asked."""

    name = "keeps-relu"

    def __init__(self) -> None:
        self.asked: set[str] = set()

    def is_op_supported(self, node: Node) -> bool:
        return node.kind == "Relu" or super().is_op_supported(node)

    def should_lower(self, node: Node) -> bool:
        self.asked.add(node.kind)
        return node.kind != "Relu"


class DoublesByMultiplying(InterpreterBackend):
    """Its vector unit has no x + x: the transform turns Add(x, x) into Mul(x, 2), exactly."""

    name = "doubler"

    def transform_post_lowering(self, function: Function) -> bool:
        changed = False
        for node in list(function.nodes):
            if node.kind == "Add" and node.inputs[0] == node.inputs[1]:
                x = node.inputs[0]
                two = function.module.create_constant("two", np.array(2, x.type.dtype))
                with function.inserting_before(node):
                    doubled = function.add(nodes.Mul, x, two.result())
                function.replace_all_uses(node.result(), doubled)
                function.erase(node)
                changed = True
        return changed


class BreaksTheGraph(InterpreterBackend):
    """A buggy transform: it rewires an Add to an operand that does not broadcast."""

    name = "breaker"

    def transform_post_lowering(self, function: Function) -> bool:
        add = next(n for n in function.nodes if n.kind == "Add")
        wrong = function.module.create_constant("wrong", np.zeros(7, np.float32))
        function.set_input(add, 1, wrong.result())
        return True


def graph(build, *input_types: Type) -> Function:
    """A function `y = build(fn, *inputs)` over placeholders x0, x1, ... of the given types."""
    module = Module()
    fn = module.create_function("main")
    inputs = [module.create_placeholder(f"x{i}", t).result() for i, t in enumerate(input_types)]
    fn.save(build(fn, *inputs), "y")
    return fn


def feeds_for(fn: Function) -> dict[str, np.ndarray]:
    return {p.name: RNG.standard_normal(p.type.shape).astype(p.type.dtype) for p in fn.input_placeholders()}


def compile_and_check(fn: Function, backend: Backend) -> dict[str, dict[str, int]]:
    """Compile with verification after every rewrite, compare with the unlowered reference,
    return the node counts at every stage."""
    stages: dict[str, dict[str, int]] = {}
    compiled = compile_function(fn, backend, verify_each=True,
                                on_stage=lambda stage, f: stages.__setitem__(stage, f.count_kinds()))
    feeds = feeds_for(fn)
    want, got = evaluate(fn, feeds), compiled.execute(feeds)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)
    return stages


def conv_relu(fn: Function, x, w):
    conv = fn.add(nodes.Conv, x, w, None, kernel=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1))
    return fn.add(nodes.Relu, conv)


CONV_TYPES = (Type(ElemKind.FLOAT32, (1, 2, 5, 5)), Type(ElemKind.FLOAT32, (3, 2, 3, 3)))


def test_should_lower_false_keeps_a_node() -> None:
    assert "Relu" in LOWERINGS, "the test needs a node kind the compiler knows how to lower"
    fn = graph(conv_relu, *CONV_TYPES)
    backend = KeepsRelu()
    kept = compile_and_check(fn, backend)["lowered"]
    assert kept["Relu"] == 1 and "Max" not in kept
    # asked only about nodes that have a lowering rule: primitives never reach should_lower
    assert "Relu" in backend.asked and not backend.asked & set(PRIMITIVES)
    lowered = compile_and_check(fn, InterpreterBackend())["lowered"]
    assert "Relu" not in lowered and lowered["Max"] == 1


def test_transform_post_lowering_runs_and_is_verified() -> None:
    fn = graph(lambda f, x: f.add(nodes.Add, x, x), Type(ElemKind.FLOAT32, (4, 3)))
    stages = compile_and_check(fn, DoublesByMultiplying())
    assert stages["lowered"]["Add"] == 1 and "Mul" not in stages["lowered"]
    assert stages["transformed"]["Mul"] == 1 and "Add" not in stages["transformed"]
    broken = graph(lambda f, x, y: f.add(nodes.Add, x, y),
                   Type(ElemKind.FLOAT32, (2, 3)), Type(ElemKind.FLOAT32, (3,)))
    with pytest.raises(GraphError, match="after breaker's post-lowering transform: node 'add"):
        compile_function(broken, BreaksTheGraph())


def test_element_kinds_are_declared_per_primitive() -> None:
    def add(elem: ElemKind) -> Function:
        return graph(lambda f, x, y: f.add(nodes.Add, x, y), Type(elem, (2, 3)), Type(elem, (2, 3)))

    compile_and_check(add(ElemKind.FLOAT32), MinimalBackend())
    with pytest.raises(UnsupportedOpsError, match="target 'minimal': unsupported op.*Add") as caught:
        compile_function(add(ElemKind.FLOAT16), MinimalBackend())
    assert caught.value.ops == ["Add"]


def test_default_hooks_and_support_rules() -> None:
    backend = MinimalBackend()
    fn = graph(conv_relu, *CONV_TYPES)
    conv, relu = (n for n in fn.nodes if n.kind in ("Conv", "Relu"))
    assert backend.should_lower(relu) and not backend.transform_post_lowering(fn)
    assert backend.device_info().description == "minimal" and backend.device_info().memory_bytes == 0
    assert backend.is_op_supported(conv) and not backend.is_op_supported(relu)

    def matmul(lhs: tuple, rhs: tuple) -> Node:
        f = graph(lambda f, a, b: f.add(nodes.MatMul, a, b), Type(ElemKind.FLOAT32, lhs), Type(ElemKind.FLOAT32, rhs))
        return next(n for n in f.nodes if n.kind == "MatMul")

    # a declared primitive counts only in canonical form: batched MatMul without broadcasting
    assert backend.is_op_supported(matmul((2, 3, 4), (2, 4, 5)))
    assert not backend.is_op_supported(matmul((2, 3, 4), (4, 5)))
    # results count too: Equal on float32 yields bool, which MinimalBackend did not declare
    equal = graph(lambda f, a, b: f.add(nodes.Equal, a, b), *CONV_TYPES[:1] * 2)
    assert not backend.is_op_supported(next(n for n in equal.nodes if n.kind == "Equal"))


def test_entry_point_discovery(monkeypatch: pytest.MonkeyPatch) -> None:
    group = registry.GROUP
    found = {
        "minimal": EntryPoint("minimal", f"{MinimalBackend.__module__}:MinimalBackend", group),
        "not-a-backend": EntryPoint("not-a-backend", "json:dumps", group),
        "missing": EntryPoint("missing", "acme_no_such_module:Backend", group),
    }
    monkeypatch.setattr(registry, "available_backends", lambda: found)
    assert isinstance(registry.get_backend("minimal"), MinimalBackend)
    with pytest.raises(GlowError, match="does not name a glowsdk Backend subclass"):
        registry.get_backend("not-a-backend")
    with pytest.raises(GlowError, match="backend 'missing' failed to load: ModuleNotFoundError"):
        registry.get_backend("missing")
    with pytest.raises(GlowError, match="unknown target 'acme'; installed backends: minimal, missing"):
        registry.get_backend("acme")


def test_primitive_reference_is_current() -> None:
    assert (GUIDE / "primitives.md").read_text() == docgen.render(), \
        "regenerate: python -m glowsdk.compiler.lowering.docgen > vendor_guide/primitives.md"


def test_backend_api_reference_covers_the_contract() -> None:
    text = (GUIDE / "backend_api.md").read_text()
    members = [n for n in vars(Backend) if not n.startswith("_")] + ["execute", "inputs", "outputs"]
    missing = [n for n in members if f"`{n}" not in text]
    assert not missing, f"vendor_guide/backend_api.md does not describe {missing}"
