"""The ONNX backend node tests, generated in-process from the installed onnx package.

A case is in scope when every op in its graph is on the in-scope list (the
`_expanded` variants, which spell an op as a sub-graph of simpler ops, count
when all of those are in scope). Inputs that decide shapes or types are bound as
compile-time constants, as glowsdk's static-shape design requires.
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np
import onnx
from onnx import numpy_helper

from ..compiler.backend import Backend
from ..compiler.pipeline import compile_function
from ..errors import GlowError, NeedsConstantError, UnsupportedError
from ..frontend.onnx.importer import import_model
from .outcome import Mismatch, outcome
from .scope import IN_SCOPE_OPS

MAX_CONSTANT_BINDINGS = 16


@dataclass
class CaseResult:
    """The outcome of one conformance case."""

    name: str
    ops: list[str]
    status: str  # pass | fail | unsupported | error
    detail: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {"name": self.name, "ops": self.ops, "status": self.status, "detail": self.detail,
                "seconds": round(self.seconds, 4)}


def collect_cases(ops: Iterable[str] | None = None) -> list:
    """The in-scope node test cases, optionally only those using one of `ops`."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            cases = collect_testcases(None)
    wanted = set(ops) if ops else None
    if wanted is not None and not wanted <= IN_SCOPE_OPS:
        unknown = ", ".join(sorted(wanted - IN_SCOPE_OPS))
        raise GlowError(f"--ops: {unknown} is not an in-scope op (in scope: {', '.join(sorted(IN_SCOPE_OPS))})")
    selected = []
    for case in cases:
        used = {n.op_type for n in case.model.graph.node}
        domains = {n.domain for n in case.model.graph.node}
        if not used or not used <= IN_SCOPE_OPS or not domains <= {"", "ai.onnx"}:
            continue
        if wanted is not None and not used & wanted:
            continue
        selected.append(case)
    return sorted(selected, key=lambda c: c.name)


def case_ops(case) -> list[str]:
    return sorted({n.op_type for n in case.model.graph.node})


def run_case(case, backend: Backend) -> CaseResult:
    """Import, compile and run one case on `backend`; compare with its expected outputs."""
    start = time.perf_counter()
    ops = case_ops(case)
    def run() -> None:
        for inputs, expected in case.data_sets:
            _run_data_set(case, backend, inputs, expected)

    status, detail = outcome(run)
    return CaseResult(case.name, ops, status, detail, time.perf_counter() - start)


def _run_data_set(case, backend: Backend, inputs: list, expected: list) -> None:
    model = case.model
    initializers = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in initializers]
    feeds = {}
    for name, value in zip(names, inputs):
        if isinstance(value, np.generic):  # a numpy scalar is a rank-0 tensor (CumSum's axis)
            value = np.asarray(value)
        if isinstance(value, onnx.TensorProto):  # kinds numpy lacks (bfloat16, float8, int4...)
            value = numpy_helper.to_array(value)
        if not isinstance(value, np.ndarray):
            raise UnsupportedError(f"input '{name}' is a {type(value).__name__}, not a tensor")
        feeds[name] = value
    constants: dict[str, np.ndarray] = {}
    for _ in range(MAX_CONSTANT_BINDINGS):
        shapes = {n: a.shape for n, a in feeds.items() if n not in constants}
        try:
            module = import_model(model, input_shapes=shapes, constants=constants, source=case.name)
            break
        except NeedsConstantError as err:
            if err.input_name not in feeds or err.input_name in constants:
                raise
            constants[err.input_name] = feeds[err.input_name]
    else:
        raise GlowError("too many inputs had to be bound as constants")
    compiled = compile_function(module.functions["main"], backend)
    read = {i.name for i in compiled.inputs}  # graph inputs folded away (only their shape used) are not read
    outputs = compiled.execute({n: a for n, a in feeds.items() if n in read})
    out_names = [o.name for o in model.graph.output]
    for name, want in zip(out_names, expected):
        got = outputs[name]
        if isinstance(want, onnx.TensorProto):  # kinds numpy lacks (int4, float8...) and some int16 cases
            want = numpy_helper.to_array(want)
        _compare(name, np.asarray(want), got, case.rtol, case.atol)


def _compare(name: str, want: np.ndarray, got: np.ndarray, rtol: float, atol: float) -> None:
    if want.dtype != got.dtype and not (want.dtype.kind == got.dtype.kind == "b"):
        raise Mismatch(f"output '{name}': dtype {got.dtype}, expected {want.dtype}")
    if want.shape != got.shape:
        raise Mismatch(f"output '{name}': shape {got.shape}, expected {want.shape}")
    if want.dtype.kind in "fc" or want.dtype.name.startswith(("bfloat", "float")):
        ok = np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
    else:
        ok = np.array_equal(got, want)
    if not ok:
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        raise Mismatch(f"output '{name}': max abs error {np.nanmax(diff):.3g} "
                        f"(rtol {rtol:g}, atol {atol:g})")


def run_node_tests(backend: Backend, ops: Iterable[str] | None = None,
                   progress: Callable[[int, int, CaseResult], None] | None = None) -> list[CaseResult]:
    """Run every in-scope case (or those using `ops`) on `backend`."""
    cases = collect_cases(ops)
    results = []
    for i, case in enumerate(cases):
        result = run_case(case, backend)
        results.append(result)
        if progress is not None:
            progress(i + 1, len(cases), result)
    return results
