"""The primitive suite: every primitive on every element kind a backend declares, against the reference.

The cases come from the primitive table (`glowsdk/compiler/lowering/primitives.py`)
through one recipe per family (`recipes.py`). Each (primitive, element kind) cell
is one small function holding all its variants; it is compiled for the backend
through the ordinary pipeline and run, and its outputs are compared with the
reference evaluator (the interpreter's kernels, node by node, with no IR and no
allocator in between, so the interpreter backend is not compared with itself).

A cell is `pass`, `fail` (wrong numbers, naming the variant and the first bad
element), `unsupported` (not declared, or refused by `is_op_supported`),
`partial` (some variants refused, say a 1-D Conv, and every other one passes)
or `error` (a crash). Float results match element by element within a tolerance
per kind, relative above 1 and absolute below (sums of a few products that
cancel stay within it), with NaN exactly where NaN is expected and infinities
equal; integer, bool, quantized and narrow results match bit for bit.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable

import ml_dtypes
import numpy as np

from ..compiler.backend import Backend
from ..compiler.lowering.primitives import PRIMITIVES
from ..compiler.pipeline import compile_function
from ..errors import GlowError, UnsupportedError
from ..graph.types import ElemKind
from ..reference.evaluator import evaluate
from .case_builder import Case, CaseBuilder
from .outcome import outcome
from .recipes import RECIPES

TOLERANCE = {np.dtype(np.float64): 1e-9, np.dtype(np.float32): 1e-5, np.dtype(np.float16): 5e-3,
             np.dtype(ml_dtypes.bfloat16): 3e-2}
"""Tolerance of float results, by dtype: |got - want| <= tolerance * max(|want|, 1) element by element."""


@dataclass
class CellResult:
    """The outcome of one (primitive, element kind) cell of the support matrix."""

    primitive: str
    kind: ElemKind
    status: str  # pass | partial | fail | unsupported | error
    detail: str = ""
    variants: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {"primitive": self.primitive, "kind": self.kind.value, "status": self.status, "detail": self.detail,
                "variants": self.variants, "seconds": round(self.seconds, 4)}


def build_case(primitive: str, kind: ElemKind, seed: int = 0) -> Case:
    """The case of one cell: its function, inputs and variant labels."""
    builder = CaseBuilder(primitive, kind, seed)
    recipe = RECIPES[primitive]
    recipe.build(builder, kind, PRIMITIVES[primitive].kind)
    return builder.case


def cells(primitives: Iterable[str] | None = None) -> list[tuple[str, ElemKind]]:
    """Every (primitive, element kind) the suite has a case for, in table and ElemKind order."""
    names = list(PRIMITIVES) if primitives is None else list(primitives)
    unknown = [n for n in names if n not in PRIMITIVES]
    if unknown:
        raise GlowError(f"--primitives: {', '.join(unknown)} is not a primitive (known: {', '.join(PRIMITIVES)})")
    return [(name, kind) for name in names for kind in ElemKind if kind in RECIPES[name].kinds]


def run_cell(primitive: str, kind: ElemKind, backend: Backend, seed: int = 0) -> CellResult:
    """Build, compile, run and check one cell on `backend`."""
    start = time.perf_counter()
    result = CellResult(primitive, kind, "pass")
    declared = backend.primitives.get(primitive, frozenset())
    if kind not in declared:
        result.status, result.detail = "unsupported", "not declared"
        return result
    def run() -> None:
        case = build_case(primitive, kind, seed)
        result.variants = len(case.variants)
        _check(case, backend, result)

    status, detail = outcome(run)
    if status != "pass":
        result.status, result.detail = status, detail
    result.detail = result.detail.splitlines()[0] if result.detail else ""
    result.seconds = time.perf_counter() - start
    return result


def _check(case: Case, backend: Backend, result: CellResult) -> None:
    """Compile and compare the whole case; if the backend refuses it, each variant on its own."""
    try:
        _compare(case, backend, result)
    except UnsupportedError as err:
        if len(case.variants) == 1:
            raise
        refused = []
        for name in case.variants:
            try:
                _compare(only(case, name), backend, result)
            except UnsupportedError:
                refused.append(case.variants[name])
            if result.status == "fail":
                return
        if len(refused) == len(case.variants):
            raise err from None
        result.status, result.detail = "partial", f"refused: {'; '.join(refused)}"


def only(case: Case, output: str) -> Case:
    """The case reduced to the variant saved in `output`."""
    function = case.function.module.clone().functions[case.function.name]
    for node in list(function.nodes):
        if node.kind == "Save" and node.output.node.name != output:
            function.erase(node)
    function.erase_dead()
    read = {p.name for p in function.input_placeholders()}
    return Case(case.primitive, case.kind, function, {n: a for n, a in case.feeds.items() if n in read},
                {output: case.variants[output]})


def _compare(case: Case, backend: Backend, result: CellResult) -> None:
    lowered: list[dict[str, int]] = []
    compiled = compile_function(case.function, backend,
                                on_stage=lambda stage, fn: stage == "lowered" and lowered.append(fn.count_kinds()))
    if not lowered[0].get(case.primitive):
        raise GlowError(f"suite defect: the pipeline removed every {case.primitive} before the backend saw it")
    with np.errstate(all="ignore"):
        got = compiled.execute(case.feeds)
        want = evaluate(case.function, case.feeds)
    for name, label in case.variants.items():
        problem = mismatch(got.get(name), want[name])
        if problem is not None:
            result.status, result.detail = "fail", f"{label}: {problem}"
            return


def mismatch(got: np.ndarray | None, want: np.ndarray) -> str | None:
    """Why `got` is not `want`, or None when it matches (see the module docstring for the rules)."""
    if got is None:
        return "output missing"
    got = np.asarray(got)
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    if want.size == 0:
        return None
    rtol = TOLERANCE.get(want.dtype)
    if rtol is None:
        bad = _raw(got) != _raw(want)
    else:
        g, w = got.astype(np.float64), want.astype(np.float64)
        with np.errstate(invalid="ignore"):
            close = np.isfinite(w) & (np.abs(g - w) <= rtol * np.maximum(np.abs(w), 1.0))
        bad = ~((np.isnan(g) & np.isnan(w)) | (g == w) | close)
    if not np.any(bad):
        return None
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"{int(np.count_nonzero(bad))} of {want.size} elements differ, first at {list(index)}: " \
           f"got {got[index]!r}, expected {want[index]!r}"


def _raw(array: np.ndarray) -> np.ndarray:
    """The bits of each element, so narrow floats (and their NaNs) compare exactly."""
    if array.dtype.kind in "biu" or array.dtype == np.bool_:
        return array
    return array.view(f"u{array.dtype.itemsize}")


def run_primitive_suite(backend: Backend, primitives: Iterable[str] | None = None,
                        progress: Callable[[int, int, CellResult], None] | None = None,
                        seed: int = 0) -> list[CellResult]:
    """Run every cell (or those of `primitives`) on `backend`, in table order."""
    todo = cells(primitives)
    results = []
    for primitive, kind in todo:
        results.append(run_cell(primitive, kind, backend, seed))
        if progress is not None:
            progress(len(results), len(todo), results[-1])
    return results
