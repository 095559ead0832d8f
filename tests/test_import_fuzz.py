"""A short run of the ONNX fuzzer (tests/fuzz; the long run is bench/fuzz_onnx.py): a few hundred
structure-aware mutants, each loading, or failing with a one-line GlowError, and never holding a
value above the size guard."""
from __future__ import annotations

from collections import Counter

import pytest
from fuzz.onnx_harness import mutant_for, run_model, run_mutant
from fuzz.onnx_mutations import MUTATIONS
from fuzz.onnx_seeds import seeds

import glowsdk
from glowsdk.errors import GlowError

SMOKE = 300


@pytest.fixture
def small_guard(monkeypatch):
    """The bench workers' guard (256 MiB), so an oversized value counts even without compiling."""
    monkeypatch.setenv("GLOWSDK_MAX_TENSOR_BYTES", str(256 << 20))


def test_every_seed_loads(tmp_path):
    for name, data in seeds().items():
        outcome = run_model(str(tmp_path / "m"), data, {})
        assert outcome.verdict == "ok" or (name == "If" and "unsupported op(s): If" in outcome.message), \
            (name, outcome)


def test_smoke_run_has_no_crash_and_no_memory_blowup(tmp_path, small_guard):
    outcomes = [run_mutant(7, i, str(tmp_path / "m")) for i in range(SMOKE)]
    bad = [(i, o) for i, o in enumerate(outcomes) if o.verdict not in ("ok", "error")]
    assert not bad, [f"mutant {i} ({o.seed}: {'+'.join(o.log)}): {o.key}: {o.message}" for i, o in bad[:5]]
    verdicts = Counter(o.verdict for o in outcomes)
    assert verdicts["ok"] > SMOKE // 20 and verdicts["error"] > SMOKE // 2  # mutants near, not far from, valid
    assert {m for o in outcomes for m in o.log} == set(MUTATIONS)  # every mutation got exercised


def test_the_harness_sees_crashes_and_multi_line_errors(tmp_path, monkeypatch):
    data = seeds()["Transpose"]
    monkeypatch.setattr(glowsdk, "load", lambda path: {}["no such key"])
    assert run_model(str(tmp_path / "m"), data, {}).verdict == "crash"

    def two_lines(path):
        raise GlowError("first\nsecond")
    monkeypatch.setattr(glowsdk, "load", two_lines)
    outcome = run_model(str(tmp_path / "m"), data, {})
    assert outcome.verdict == "crash" and outcome.key.startswith("multi-line GlowError")


def test_mutants_are_reproducible():
    (name, first), (again, second) = mutant_for(3, 41), mutant_for(3, 41)
    assert name == again and first.serialize() == second.serialize() and first.log == second.log
