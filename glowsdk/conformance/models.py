"""Model-zoo conformance: the nine bundled light networks, end to end, on any backend.

Two checks per model:

- "reference": import, compile and run the model as shipped on the onnx runner's
  input, and compare with the shipped output under the model's data.json rtol/atol.
  The shipped weights are constant fills, so every class scores the same there:
  this check catches crashes and gross errors, not subtle ones.
- "onnxruntime": the same model with seeded random weights (`randomize_weights`,
  seed 0) on a seeded random input, against onnxruntime running that very model.
  It passes when max|glowsdk - ort| / max|ort| < 1e-3 and every output row has
  the same argmax. onnxruntime is a test dependency: without it the check is
  "skipped".

Statuses are those of the node tests (pass / fail / unsupported / error) plus "skipped".

Given `fallbacks` (backends, the first preferred), what the target cannot run goes there, as
`glowsdk.compile(..., fallback=...)` places it, and each check also records how the model split:
its partitions on the target and on the host, and the share of multiply-adds on the target. A
target that runs the whole model is one partition with every MAC. Without fallbacks a model the
target runs only in part is "unsupported", and the records carry no partition fields.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from typing import Callable, Mapping, Sequence

import numpy as np
import onnx

from ..compiler.backend import Backend, CompiledFunction
from ..compiler.partition.hetero import PartitionedFunction
from ..compiler.pipeline import compile_function
from ..frontend.onnx.importer import import_model
from ..zoo import BUNDLED, bundled_path, random_inputs, randomize_weights, rebatch, reference_case
from .outcome import Mismatch, outcome

RELATIVE_TOLERANCE = 1e-3
WEIGHT_SEED = 0
INPUT_SEED = 0


@dataclass
class ModelResult:
    """The outcome of one check on one bundled model."""

    model: str
    check: str  # reference | onnxruntime
    status: str  # pass | fail | unsupported | error | skipped
    detail: str = ""
    rel_error: float | None = None  # max|got - want| / max|want| over the outputs
    argmax_agrees: bool | None = None  # None when the expected rows have no unique maximum
    seconds: float = 0.0
    split: Split | None = None  # how the model split between target and fallback (fallback runs only)

    def to_json(self) -> dict:
        record = {"model": self.model, "check": self.check, "status": self.status, "detail": self.detail,
                  "rel_error": self.rel_error, "argmax_agrees": self.argmax_agrees,
                  "seconds": round(self.seconds, 3)}
        if self.split is not None:
            record.update(self.split.to_json())
        return record


@dataclass
class Split:
    """How one compiled model split: partitions on the target and on the host, and the target's MACs."""

    target_partitions: int = 0
    host_partitions: int = 0
    target_macs: int = 0
    total_macs: int = 0
    known: bool = False  # False until the model compiled (a failed compile tells nothing)

    @property
    def partitions(self) -> int:
        return self.target_partitions + self.host_partitions

    @property
    def target_mac_share(self) -> float | None:
        """Target MACs over all MACs; 1.0 for a model without MACs run on the target alone."""
        if not self.known:
            return None
        if self.total_macs == 0:
            return 1.0 if self.host_partitions == 0 else 0.0
        return self.target_macs / self.total_macs

    def record(self, compiled: CompiledFunction) -> None:
        if isinstance(compiled, PartitionedFunction):
            self.target_partitions = len(compiled.device_partitions())
            self.host_partitions = len(compiled.partitions) - self.target_partitions
            self.target_macs, self.total_macs = compiled.target_macs, compiled.total_macs
        else:  # the target runs it all
            self.target_partitions, self.host_partitions = 1, 0
        self.known = True

    def to_json(self) -> dict:
        if not self.known:
            return dict.fromkeys(("partitions", "target_partitions", "host_partitions", "target_mac_share"))
        return {"partitions": self.partitions, "target_partitions": self.target_partitions,
                "host_partitions": self.host_partitions, "target_mac_share": self.target_mac_share}


def run_model_zoo(backend: Backend, names: Sequence[str] | None = None,
                  progress: Callable[[int, int, ModelResult], None] | None = None, *,
                  batch: int = 1, fallbacks: Sequence[Backend] = ()) -> list[ModelResult]:
    """Run both checks on each bundled model in `names` (all of them by default).

    `batch` sets the batch size of the onnxruntime check (via `rebatch`). `fallbacks` run what
    `backend` cannot (see the module docstring); each result then records its `split`.
    """
    names = list(BUNDLED if names is None else names)
    for name in names:
        bundled_path(name)  # an unknown name fails before any model runs
    fallbacks = list(fallbacks)
    checks = {"reference": partial(_reference_check, fallbacks=fallbacks),
              "onnxruntime": partial(_onnxruntime_check, batch=batch, fallbacks=fallbacks)}
    total = len(names) * len(checks)
    results = []
    for name in names:
        model = onnx.load(str(bundled_path(name)))
        for label, check in checks.items():
            result = _guarded(name, label, check, model, backend, bool(fallbacks))
            results.append(result)
            if progress is not None:
                progress(len(results), total, result)
    return results


def _guarded(name: str, label: str, check: Callable, model: onnx.ModelProto, backend: Backend,
             split: bool) -> ModelResult:
    """Run one check; turn what it raises into a status, as the node tests do."""
    start = time.perf_counter()
    result = ModelResult(name, label, "pass", split=Split() if split else None)
    status, detail = outcome(lambda: check(name, model, backend, result))
    if status != "pass":
        result.status, result.detail = status, detail
    result.detail = result.detail.splitlines()[0] if result.detail else ""
    result.seconds = time.perf_counter() - start
    return result


def _run_glowsdk(model: onnx.ModelProto, backend: Backend, source: str, result: ModelResult,
                 fallbacks: Sequence[Backend], inputs: Mapping[str, np.ndarray] | None = None) -> tuple[dict, dict]:
    """Import, compile and run `model`; returns (inputs, outputs), drawing inputs if not given.
    Records how the model split in `result.split` (when asked for) as soon as it compiles."""
    module = import_model(model, source=source)
    compiled = compile_function(module.functions["main"], backend, fallbacks=fallbacks)
    if result.split is not None:
        result.split.record(compiled)
    feeds = dict(inputs) if inputs is not None else random_inputs(compiled.inputs, INPUT_SEED)
    return feeds, compiled.execute(feeds)


def _reference_check(name: str, model: onnx.ModelProto, backend: Backend, result: ModelResult, *,
                     fallbacks: Sequence[Backend]) -> None:
    case = reference_case(name, model)
    _, got = _run_glowsdk(model, backend, name, result, fallbacks, case.inputs)
    _measure(result, got, case.outputs)
    for out, want in case.outputs.items():
        a, b = got[out].astype(np.float64), want.astype(np.float64)
        if not np.allclose(a, b, rtol=case.rtol, atol=case.atol):
            raise Mismatch(f"output '{out}': max abs error {np.max(np.abs(a - b)):.3g} "
                            f"(rtol {case.rtol:g}, atol {case.atol:g})")


def _onnxruntime_check(name: str, model: onnx.ModelProto, backend: Backend, result: ModelResult, *,
                       batch: int, fallbacks: Sequence[Backend]) -> None:
    try:
        import onnxruntime
    except ImportError as err:
        result.status, result.detail = "skipped", f"onnxruntime is not installed ({err})"
        return
    randomized = randomize_weights(model, WEIGHT_SEED)
    if batch != 1:
        randomized = rebatch(randomized, batch)
    feeds, got = _run_glowsdk(randomized, backend, f"{name} (random weights)", result, fallbacks)
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # ORT warns about the unused initializers some models carry
    session = onnxruntime.InferenceSession(randomized.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    want = dict(zip(names, session.run(names, feeds)))
    _measure(result, got, want)
    if not result.rel_error < RELATIVE_TOLERANCE:
        raise Mismatch(f"relative error {result.rel_error:.3g} exceeds {RELATIVE_TOLERANCE:g}")
    if result.argmax_agrees is False:
        raise Mismatch("the argmax of some output row differs from onnxruntime's")


def _measure(result: ModelResult, got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray]) -> None:
    """Record the relative error and argmax agreement of `got` against `want`."""
    errors, agreements = [], []
    for out, expected in want.items():
        if out not in got:
            raise Mismatch(f"output '{out}' was not produced")
        actual = got[out]
        if actual.shape != expected.shape or actual.dtype != expected.dtype:
            raise Mismatch(f"output '{out}': {actual.dtype}{list(actual.shape)}, "
                            f"expected {expected.dtype}{list(expected.shape)}")
        a, b = actual.astype(np.float64), expected.astype(np.float64)
        scale = np.max(np.abs(b)) if b.size else 0.0
        diff = np.max(np.abs(a - b)) if b.size else 0.0
        errors.append(float(diff / scale) if scale > 0 else (0.0 if diff == 0 else float("inf")))
        agreements.append(_argmax_agrees(a, b))
    result.rel_error = float(np.max(errors))  # NaN propagates, and fails the tolerance test
    result.argmax_agrees = None if None in agreements else all(agreements)


def _argmax_agrees(got: np.ndarray, want: np.ndarray) -> bool | None:
    """Whether each row (batch entry) has the same argmax; None if a want row has tied maxima."""
    if want.ndim == 0 or want.size == 0:
        return None
    rows_got = got.reshape(want.shape[0], -1)
    rows_want = want.reshape(want.shape[0], -1)
    tied = np.sum(rows_want == rows_want.max(axis=1, keepdims=True), axis=1) > 1
    if np.any(tied):
        return None
    return bool(np.all(rows_got.argmax(axis=1) == rows_want.argmax(axis=1)))
