"""What the random fuzz drivers (bench/fuzz_onnx.py, fuzz_npub.py, fuzz_readers.py) share: their common
arguments, the run of mutant batches over worker processes, the summary table. (The coverage-guided
runs are atheris's: bench/fuzz_atheris.py.)

A driver brings its harness: a worker initialiser and a batch function returning the batch's outcomes
and the worker's peak RSS in MiB.
"""
from __future__ import annotations

import argparse
import resource
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed

from glowsdk.progress import Progress

from .onnx_harness import Outcome

Results = list[tuple[int, Outcome]]


def add_common_arguments(parser: argparse.ArgumentParser, memory_mb: int) -> None:
    parser.add_argument("--count", type=int, default=1000, help="how many mutants (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="the run's random seed (default 0)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--memory-mb", type=int, default=memory_mb,
                        help=f"address-space limit of each worker, in MiB (default {memory_mb}; 0: none)")
    parser.add_argument("--replay", type=int, metavar="INDEX", help="run mutant INDEX alone, with its traceback")


def peak_rss_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10


def run_batches(label: str, count: int, jobs: int, batch: int, initializer: Callable, initargs: Sequence,
                run_batch: Callable, batch_args: Sequence) -> tuple[Results, float, int]:
    """Mutants 0..count-1 in batches over `jobs` workers; a worker that dies costs its whole batch as crashes.
    `run_batch(*batch_args, indices)` returns (outcomes by index, the worker's peak RSS in MiB)."""
    start = time.perf_counter()
    progress = Progress(label)
    results: Results = []
    peak_mb = 0
    batches = [list(range(i, min(i + batch, count))) for i in range(0, count, batch)]
    with ProcessPoolExecutor(jobs, initializer=initializer, initargs=tuple(initargs)) as pool:
        futures = {pool.submit(run_batch, *batch_args, b): b for b in batches}
        for future in as_completed(futures):
            try:
                done, rss = future.result()
                results += done
                peak_mb = max(peak_mb, rss)
            except Exception as err:  # noqa: BLE001  (a segfault, the OOM killer: every mutant in the batch)
                results += [(i, Outcome("crash", f"worker died: {type(err).__name__}")) for i in futures[future]]
            bad = sum(o.verdict in ("crash", "memory") for _, o in results)
            progress(len(results), count, f"{bad} crash/memory")
    progress.close()
    return sorted(results, key=lambda r: r[0]), time.perf_counter() - start, peak_mb


def summary(results: Results, seconds: float, seed: int, peak_mb: int) -> str:
    """Verdict counts, errors and accepted mutants by class, and the crashes grouped by root cause."""
    verdicts = Counter(o.verdict for _, o in results)
    lines = [(f"{len(results)} mutants (seed {seed}) in {seconds:.1f}s "
              f"({len(results) / max(seconds, 1e-9):.0f}/s), workers' peak RSS {peak_mb} MiB"), "",
             "| verdict | mutants |", "| --- | ---: |"]
    lines += [f"| {v} | {verdicts.get(v, 0)} |" for v in ("ok", "error", "crash", "memory")]
    errors = Counter(o.key for _, o in results if o.verdict == "error")
    oks = Counter(o.key for _, o in results if o.verdict == "ok" and o.key)
    lines += ["", "one-line errors by class: " + ", ".join(f"{k} {n}" for k, n in errors.most_common())]
    if oks:
        lines += ["accepted, by the last stage passed: " + ", ".join(f"{k} {n}" for k, n in oks.most_common())]
    groups: dict[tuple[str, str], Results] = defaultdict(list)
    for i, o in results:
        if o.verdict in ("crash", "memory"):
            groups[(o.verdict, o.key)].append((i, o))
    if groups:
        lines += ["", f"{len(groups)} root causes:", "",
                  "| verdict | root cause | mutants | example (replay) | seed, mutations | message |",
                  "| --- | --- | ---: | ---: | --- | --- |"]
        for (verdict, key), hits in sorted(groups.items(), key=lambda g: -len(g[1])):
            i, o = hits[0]
            message = o.message.replace("\n", "\\n").replace("|", "/")[:120]
            lines.append(f"| {verdict} | {key} | {len(hits)} | {i} | {o.seed}: {'+'.join(o.log)} | {message} |")
    return "\n".join(lines)

