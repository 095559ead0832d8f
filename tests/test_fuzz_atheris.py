"""The coverage-guided fuzz targets (tests/fuzz/targets.py) and, where atheris is installed (the `fuzz`
extra), a short run of the engine itself (bench/fuzz_atheris.py). The long runs: bench/README.md.

Without atheris the targets are still exercised: a short walk in which each input is a mutation
of a seed or of an earlier input the reader accepted, judged as the engine judges it."""
from __future__ import annotations

import random
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

import pytest
from fuzz import targets

ROOT = Path(__file__).resolve().parent.parent


def test_onnx_payload_keeps_the_external_file():
    model, weights = b"\x08\x07model", b"\x00" * 12
    packed = targets.pack_onnx(model, {targets.WEIGHTS: weights})
    assert targets.unpack_onnx(packed) == (model, {targets.WEIGHTS: weights})
    assert targets.unpack_onnx(model) == (model, {})
    assert targets.unpack_onnx(packed[:30]) == (packed[:30], {})  # a cut file: all model bytes


@pytest.mark.parametrize("name, count", [("config", 100), ("profile", 50), ("npub", 100), ("onnx", 30)])
def test_a_walk_of_structure_aware_mutants_finds_no_crash(name, count, tmp_path, monkeypatch):
    monkeypatch.setenv("GLOWSDK_MAX_TENSOR_BYTES", str(256 << 20))
    target = targets.make(name, str(tmp_path), seed=0)
    rng = random.Random(5)
    corpus = [d for n, d in sorted(target.seeds.items()) if n != "squeezenet.npub"]  # 0.2 s a load
    verdicts: Counter = Counter()
    bad = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's, on NaN scales: not verdicts
        for _ in range(count):
            try:
                data = target.mutate(rng, rng.choice(corpus))
            except targets.Skip:
                continue
            outcome = target.run(data)
            verdicts[outcome.verdict] += 1
            if outcome.verdict in ("crash", "memory"):
                bad.append((outcome.key, outcome.message))
            elif outcome.verdict == "ok":
                corpus.append(data)
    assert not bad
    assert verdicts["ok"] and verdicts["error"] and sum(verdicts.values()) > count // 2


def test_the_atheris_engine_grows_a_corpus(tmp_path):
    pytest.importorskip("atheris", reason="atheris is the `fuzz` extra (pip install -e '.[fuzz]')")
    corpus = tmp_path / "corpus"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "fuzz_atheris.py"), "run", "--target", "config",
                           "--runs", "150", "--corpus", str(corpus)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "verdicts after 150 runs" in done.stdout
    seeds = len(targets.reader_target("config", str(tmp_path)).seeds)
    assert len([p for p in corpus.iterdir() if p.is_file()]) > seeds
    assert not list((corpus / "crashes").iterdir())
