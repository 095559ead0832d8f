"""The primitive suite of `glowsdk conformance`: generated from the primitive table, strict at the corners.

The interpreter must pass every cell. A backend with classic kernel bugs (round
half up, saturating instead of wrapping int8 adds, quantizing ties away from
zero) must fail exactly those cells, which shows the edge values are there and
the comparison is exact where it should be; independent numpy arithmetic checks
the bugs really are bugs.
"""
from __future__ import annotations

import json
from typing import Mapping

import numpy as np
import pytest

from glowsdk.backends import get_backend
from glowsdk.cli.main import main
from glowsdk.compiler.backend import Backend, CompiledFunction, CompileOptions
from glowsdk.compiler.lowering.primitives import PRIMITIVES
from glowsdk.conformance import report
from glowsdk.conformance.primitives import build_case, cells, mismatch, run_primitive_suite
from glowsdk.conformance.recipes import RECIPES
from glowsdk.graph.function import Function
from glowsdk.graph.types import ElemKind
from glowsdk.reference.evaluator import run_node

F32, I8, BOOL, QI8 = ElemKind.FLOAT32, ElemKind.INT8, ElemKind.BOOL, ElemKind.QINT8


def test_every_primitive_has_a_recipe_within_its_kinds() -> None:
    assert set(RECIPES) == set(PRIMITIVES)
    for name, recipe in RECIPES.items():
        assert recipe.kinds and recipe.kinds <= PRIMITIVES[name].elems, name


def test_cases_hold_several_shapes_and_edge_values() -> None:
    add = build_case("Add", F32)
    assert len(add.variants) >= 5
    shapes = {a.shape for a in add.feeds.values()}
    assert {(2, 1, 4), (3, 1), (0, 3), ()} <= shapes  # broadcasting, rank 0, empty
    values = np.concatenate([a.ravel() for a in add.feeds.values()])
    assert np.isnan(values).any() and np.isposinf(values).any() and np.isneginf(values).any()
    wide = np.concatenate([a.ravel() for a in build_case("Add", I8).feeds.values()])
    assert {-128, 127} <= set(wide.tolist())
    ties = build_case("Quantize", QI8).feeds["x0"] / 0.25  # the suite's int8q scale
    assert np.any(np.abs(ties - np.trunc(ties)) == 0.5)


@pytest.fixture(scope="module")
def interpreter_results():
    return run_primitive_suite(get_backend("interpreter"))


def test_the_interpreter_passes_every_cell(interpreter_results) -> None:
    assert len(interpreter_results) == len(cells()) > 500
    assert [f"{r.primitive} {r.kind.value}: {r.detail}" for r in interpreter_results if r.status != "pass"] == []
    assert {r.primitive for r in interpreter_results} == set(PRIMITIVES)


# -- a backend with three classic bugs ---------------------------------------------------------------------
def _round_half_up(node, x):
    return [np.floor(x + np.float32(0.5)).astype(x.dtype)]


def _saturating_add(node, x, y):
    wide = x.astype(np.int64) + y.astype(np.int64)
    return [np.clip(wide, -128, 127).astype(np.int8)]


def _quantize_half_away(node, x):
    t = node.type
    q = np.trunc(x / np.float32(t.scale) + np.copysign(0.5, x)) + t.offset
    return [np.clip(q, -128, 127).astype(np.int8)]


BUGS = {("Round", F32): _round_half_up, ("Add", I8): _saturating_add, ("Quantize", QI8): _quantize_half_away}


class _Sloppy(CompiledFunction):
    def __init__(self, function: Function) -> None:
        super().__init__(function)
        self.function = function

    def execute(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        values = {c.result(): c.value for c in self.function.module.constants.values()}
        values.update({p.result(): np.asarray(inputs[p.name]) for p in self.function.input_placeholders()})
        outputs = {}
        for node in self.function.nodes:
            if node.kind == "Save":
                outputs[node.output.node.name] = values[node.input]
                continue
            args = [None if v is None else values[v] for v in node.inputs]
            bug = BUGS.get((node.kind, node.type.elem))
            results = bug(node, *args) if bug else run_node(node, args)
            values.update(zip(node.results, results))
        return outputs


class SloppyBackend(Backend):
    name = "sloppy"
    primitives = {"Round": frozenset({F32}), "Add": frozenset({F32, I8}), "Quantize": frozenset({F32, QI8}),
                  "Equal": frozenset({F32})}  # Equal without bool: declared, but refused

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        return _Sloppy(function)


def test_the_bugs_are_bugs() -> None:
    half = np.array([0.5, 2.5, -1.5], np.float32)
    assert not np.array_equal(_round_half_up(None, half)[0], np.round(half))
    assert _saturating_add(None, np.array([127], np.int8), np.array([1], np.int8))[0][0] == 127  # wraps to -128


def test_a_sloppy_backend_fails_exactly_its_bugs() -> None:
    results = {(r.primitive, r.kind): r for r in run_primitive_suite(SloppyBackend(), ["Round", "Add", "Quantize",
                                                                                      "Equal"])}
    for cell in BUGS:
        assert results[cell].status == "fail", results[cell]
    assert "edge values" in results[("Round", F32)].detail
    assert results[("Add", F32)].status == "pass"
    assert results[("Equal", F32)].status == "unsupported" and "Equal" in results[("Equal", F32)].detail
    assert results[("Add", ElemKind.INT16)].detail == "not declared"
    text = report.primitive_report(list(results.values()))
    assert "FAIL" in text and "3 fail" in text and "1 refused" in text


def test_mismatch_rules() -> None:
    want = np.array([1.0, np.nan, np.inf], np.float32)
    assert mismatch(want.copy(), want) is None
    assert mismatch(want + np.float32(1e-6), want) is None  # within float32 tolerance
    assert "1 of 3" in mismatch(np.array([1.0, 0.0, np.inf], np.float32), want)  # NaN expected
    assert mismatch(np.array([2], np.int8), np.array([1], np.int8)) is not None  # integers exactly
    assert "int16" in mismatch(np.array([1], np.int16), np.array([1], np.int8))


def test_cli_writes_markdown_and_json(tmp_path, capsys) -> None:
    md, js = tmp_path / "matrix.md", tmp_path / "matrix.json"
    code = main(["conformance", "--suite", "primitives", "--primitives", "Add,Splat", "--markdown", str(md),
                 "--json", str(js), "--strict"])
    assert code == 0
    out = capsys.readouterr().out
    assert "primitive" in out and "f32" in out and "i8q" in out
    matrix = json.loads(js.read_text())["primitives"]["matrix"]
    assert matrix["Add"]["int8q"] == "pass" and "int8q" not in matrix["Splat"]
    page = md.read_text()
    assert page.startswith("# glowsdk conformance: target `interpreter`")
    assert "| `Add` | pass |" in page
