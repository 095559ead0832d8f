"""Coverage-guided fuzzing, shared by bench/fuzz_onnx.py, fuzz_npub.py and fuzz_readers.py (`--guided`).

A `Target` says how to fuzz one reader: its seeds (name, payload, weight), how to mutate a payload
(`mutate(rng, payload) -> (payload, log)`), how to run one (`run(payload, index) -> Outcome`,
judged exactly as the random fuzzers judge), and, for the unguided comparison, the random
fuzzer's own mutant `index` (`fresh(index) -> (seed name, payload, log)`).

`fuzz(target, count, seed)` keeps a corpus, the seeds first (each run once under coverage, so
their edges are the baseline, after one untraced warm-up run of each so that imports and
caches filled on first use do not count). Each mutant mutates one corpus entry, drawn a third of the time from the
seeds (with the random fuzzer's seed weights), a third from the eight most recent entries, and a
third with weight `seed weight * (1 + edges it added, at most 64) / (1 + times drawn)` (rare
coverage and little-explored entries first); it runs under `coverage.LineTracer` in arc mode
(edges between consecutive lines of one frame, in glowsdk/, isa/, sim/, firmware_runtime/), and
joins the corpus when it takes an edge no earlier run took. The figures reported are lines. Mutants that crash do not join (they would make
the same crash again). With `guided=False` the same loop runs the random fuzzer's mutants
0..count-1 under the same tracer: the unguided run with the same count and seed, for comparison.
In-process and single-process only (`--jobs` is ignored in guided mode).

Mutant `i` of a guided run depends on the whole run before it, so `--replay` does not apply;
the payload of every crash is kept (`Run.crashes`) and the drivers write it to a folder.
"""
from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .coverage import LineTracer, lines_of
from .onnx_harness import Outcome

CHECKPOINTS = (0.1, 0.5, 1.0)
RECENT = 8
MAX_PAYLOAD = 1 << 21
"""A mutant above this many bytes does not join the corpus (runs of duplicated bytes would grow it)."""


@dataclass
class Target:
    name: str
    seeds: list[tuple[str, Any, float]]
    mutate: Callable[[random.Random, Any], tuple[Any, list[str]]]
    run: Callable[[Any, int], Outcome]
    fresh: Callable[[int], tuple[str, Any, list[str]]] | None = None
    size: Callable[[Any], int] = len


@dataclass
class Entry:
    name: str
    payload: Any
    weight: float
    log: tuple[str, ...] = ()
    new_lines: int = 0
    found_at: int = -1  # mutant index; -1 for a seed
    picks: int = 0


@dataclass
class Run:
    guided: bool
    results: list[tuple[int, Outcome]] = field(default_factory=list)
    corpus: list[Entry] = field(default_factory=list)
    seed_entries: int = 0
    seed_lines: int = 0
    lines: set = field(default_factory=set)
    timeline: list[tuple[int, int, int, float]] = field(default_factory=list)  # mutants, corpus, lines, s
    crashes: dict[int, Any] = field(default_factory=dict)
    seconds: float = 0.0


def _pick(rng: random.Random, corpus: list[Entry], seeds: int) -> Entry:
    draw = rng.random()
    if draw < 1 / 3 or len(corpus) == seeds:  # a seed, as the random fuzzer draws them
        return rng.choices(corpus[:seeds], [e.weight for e in corpus[:seeds]])[0]
    if draw < 2 / 3:
        return rng.choice(corpus[-RECENT:])
    weights = [e.weight * (1 + min(e.new_lines, 64)) / (1 + e.picks) for e in corpus]
    return rng.choices(corpus, weights)[0]


def fuzz(target: Target, count: int, seed: int = 0, guided: bool = True,
         progress: Callable[[int, int, str], None] | None = None,
         tracer: LineTracer | None = None) -> Run:
    """Run `count` mutants of `target`, guided by coverage (or the random fuzzer's, traced)."""
    tracer = tracer or LineTracer(arcs=True)
    edges: set = set()
    run = Run(guided)
    for name, payload, weight in target.seeds:  # warm up untraced: imports and caches are not coverage
        target.run(payload, -1)
    start = time.perf_counter()
    for name, payload, weight in target.seeds:
        with tracer.recording() as records:
            target.run(payload, -1)
        fresh = records - edges
        edges |= records
        run.lines |= lines_of(records)
        run.corpus.append(Entry(name, payload, weight, new_lines=len(fresh)))
    run.seed_entries, run.seed_lines = len(run.corpus), len(run.lines)
    marks = sorted({max(1, round(count * f)) for f in CHECKPOINTS})
    pick_rng = random.Random(seed)
    bad = 0
    for index in range(count):
        if guided:
            parent = _pick(pick_rng, run.corpus, run.seed_entries)
            parent.picks += 1
            payload, log = target.mutate(random.Random(seed * 1_000_003 + index), parent.payload)
            name, log = parent.name, parent.log + tuple(log)
        else:
            name, payload, log = target.fresh(index)
            parent, log = None, tuple(log)
        with tracer.recording() as records:
            outcome = target.run(payload, index)
        outcome.seed, outcome.log = name, log
        run.results.append((index, outcome))
        fresh = records - edges
        if outcome.verdict in ("crash", "memory"):
            run.crashes[index] = payload
            bad += 1
        elif fresh:
            edges |= fresh
            run.lines |= lines_of(fresh)
            if guided and target.size(payload) <= MAX_PAYLOAD:
                run.corpus.append(Entry(name, payload, parent.weight, log, len(fresh), index))
        if index + 1 in marks:
            run.timeline.append((index + 1, len(run.corpus), len(run.lines), time.perf_counter() - start))
        if progress is not None:
            progress(index + 1, count, f"{bad} crash/memory, corpus {len(run.corpus)}, {len(run.lines)} lines")
    run.seconds = time.perf_counter() - start
    return run


def report(run: Run) -> str:
    """The corpus and coverage lines of the summary (the drivers print them after the crash table)."""
    mode = "guided" if run.guided else "unguided (the random fuzzer's mutants, traced)"
    lines = ["", f"coverage, {mode}: seeds {run.seed_entries} entries, {run.seed_lines} lines", "",
             "| mutants | corpus | lines covered | seconds |", "| ---: | ---: | ---: | ---: |"]
    lines += [f"| {m} | {c} | {n} | {s:.1f} |" for m, c, n, s in run.timeline]
    if run.guided:
        grown = run.corpus[run.seed_entries:]
        by_seed: dict[str, int] = {}
        for e in grown:
            by_seed[e.name] = by_seed.get(e.name, 0) + 1
        depth = max((len(e.log) for e in grown), default=0)
        lines += ["", f"corpus {run.seed_entries} -> {len(run.corpus)} entries "
                      f"(+{len(grown)}; deepest entry {depth} mutations from its seed); "
                      "added per seed: " + ", ".join(f"{k} {n}" for k, n in sorted(by_seed.items(), key=lambda x: -x[1]))]
    return "\n".join(lines)
