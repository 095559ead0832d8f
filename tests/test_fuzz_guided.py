"""The coverage-guided fuzzing mode (tests/fuzz/guided.py): the tracer, and a short guided run of each
reader that finds no crash and grows its corpus past the seeds. The long runs are in bench/fuzz_*.py."""
from __future__ import annotations

import inspect
import json
import warnings

from fuzz import guided, guided_targets
from fuzz.coverage import LineTracer, lines_of


def _function_lines(function) -> tuple[str, range]:
    source, first = inspect.getsourcelines(function)
    return inspect.getsourcefile(function), range(first, first + len(source))


def test_tracer_records_the_lines_of_a_known_function():
    from isa.config import format_size

    filename, span = _function_lines(format_size)
    tracer = LineTracer()
    with tracer.recording() as lines:
        format_size(3 << 20)
        json.dumps({"a": 1})  # the standard library is not traced
    ours = {line for f, line in lines if f == filename}
    assert ours and ours <= set(span)
    assert all("/json/" not in f for f, _ in lines)
    assert filename in tracer.files()


def test_arc_mode_records_edges_whose_lines_are_the_line_mode_lines():
    from isa.config import format_size

    with LineTracer().recording() as lines:
        format_size(3 << 20)
    with LineTracer(arcs=True).recording() as arcs:
        format_size(3 << 20)
    assert all(len(a) == 3 for a in arcs)
    assert lines_of(arcs) == lines


def _smoke(target, count):
    run = guided.fuzz(target, count, seed=0)
    bad = [(i, o.key, o.message) for i, o in run.results if o.verdict in ("crash", "memory")]
    assert not bad
    assert len(run.results) == count
    assert len(run.corpus) > run.seed_entries
    assert run.timeline[-1][2] >= run.seed_lines > 0
    assert "corpus" in guided.report(run)
    return run


def test_guided_config(tmp_path):
    _smoke(guided_targets.reader_target("config", str(tmp_path)), 200)


def test_guided_profile(tmp_path):
    _smoke(guided_targets.reader_target("profile", str(tmp_path)), 100)


def test_guided_npub():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's, on NaN scales: not verdicts
        _smoke(guided_targets.npub_target(), 200)


def test_guided_onnx(tmp_path, monkeypatch):
    monkeypatch.setenv("GLOWSDK_MAX_TENSOR_BYTES", str(256 << 20))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        _smoke(guided_targets.onnx_target(str(tmp_path / "m")), 40)


def test_unguided_mode_runs_the_random_fuzzers_mutants(tmp_path):
    from fuzz.reader_harness import config_mutant

    target = guided_targets.reader_target("config", str(tmp_path))
    run = guided.fuzz(target, 30, seed=0, guided=False)
    assert len(run.corpus) == run.seed_entries
    assert [o.log for _, o in run.results] == [tuple(config_mutant(0, i)[3]) for i in range(30)]
