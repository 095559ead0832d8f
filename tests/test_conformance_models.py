"""Model-zoo conformance on the interpreter: real light models, both checks.

Run on the three fastest-to-run models whose op mixes differ most: squeezenet
(Concat, GlobalAveragePool), shufflenet (grouped convolutions, channel shuffle
by Reshape/Transpose), resnet50 (batch norm, residual sums, Gemm).
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

from glowsdk.backends import get_backend
from glowsdk.backends.interpreter import InterpreterBackend
from glowsdk.compiler.backend import Backend, CompiledFunction, CompileOptions
from glowsdk.conformance.models import ModelResult, run_model_zoo
from glowsdk.errors import GlowError

MODELS = ["squeezenet", "shufflenet", "resnet50"]


@pytest.fixture(scope="module")
def zoo_results() -> list[ModelResult]:
    return run_model_zoo(get_backend("interpreter"), MODELS)


def test_real_models_pass_both_checks(zoo_results):
    assert [(r.model, r.check) for r in zoo_results] == [(m, c) for m in MODELS
                                                         for c in ("reference", "onnxruntime")]
    for result in zoo_results:
        assert result.status == "pass", result.to_json()
        assert result.rel_error is not None and result.rel_error < 1e-3
    for result in zoo_results:
        # The shipped weights are constant fills: every class ties, so argmax says nothing there.
        expected = None if result.check == "reference" else True
        assert result.argmax_agrees is expected, result.to_json()


def test_results_serialise(zoo_results):
    record = zoo_results[1].to_json()
    assert set(record) == {"model", "check", "status", "detail", "rel_error", "argmax_agrees", "seconds"}
    assert record["model"] == "squeezenet" and record["check"] == "onnxruntime"


class _OffByOnePercent(Backend):
    """The interpreter with every output scaled by 1.01: a wrong backend the checks must catch."""

    name = "off-by-one-percent"
    primitives = InterpreterBackend.primitives

    def compile(self, function, options: CompileOptions) -> CompiledFunction:
        inner = get_backend("interpreter").compile(function, options)

        class Scaled(CompiledFunction):
            def execute(self, inputs):
                return {k: (v * np.float32(1.01)).astype(v.dtype) for k, v in inner.execute(inputs).items()}

        return Scaled(function)


def test_onnxruntime_check_at_batch_three():
    results = run_model_zoo(get_backend("interpreter"), ["shufflenet"], batch=3)
    assert [r.status for r in results] == ["pass", "pass"], [r.to_json() for r in results]
    assert results[1].argmax_agrees is True


def test_a_wrong_backend_fails_both_checks():
    results = run_model_zoo(_OffByOnePercent(), ["squeezenet"])
    assert [r.status for r in results] == ["fail", "fail"], [r.to_json() for r in results]
    assert "max abs error" in results[0].detail
    assert results[1].rel_error == pytest.approx(0.01, rel=1e-3)
    assert "relative error" in results[1].detail


def test_onnxruntime_missing_is_skipped(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes `import onnxruntime` raise ImportError
    progress = []
    results = run_model_zoo(get_backend("interpreter"), ["squeezenet"],
                            progress=lambda done, total, r: progress.append((done, total, r.check)))
    assert [r.status for r in results] == ["pass", "skipped"]
    assert "onnxruntime is not installed" in results[1].detail
    assert progress == [(1, 2, "reference"), (2, 2, "onnxruntime")]


def test_unknown_model_is_refused_before_running():
    with pytest.raises(GlowError, match="unknown bundled model 'lenet'"):
        run_model_zoo(get_backend("interpreter"), ["squeezenet", "lenet"])
