"""Fuzz the ONNX importer with structure-aware mutants; a summary table of what broke.

    python bench/fuzz_onnx.py [--count 1000] [--seed 0] [--jobs 1] [--memory-mb 3072]
    python bench/fuzz_onnx.py --seed 0 --replay 1234     # one mutant, with its traceback

Each mutant is a seed model (the bundled zoo networks, the digits CNN, one small graph per op
family: tests/fuzz/onnx_seeds.py) with one to three structure-aware edits
(tests/fuzz/onnx_mutations.py: attribute types and values, names with newlines or invalid UTF-8,
negative and huge dims, truncated or mislabelled tensor data, missing inputs, values defined
twice, external-data fields, opsets). It goes through `glowsdk.load` and, when small,
`glowsdk.compile(net, "interpreter")`, in worker processes whose address space is capped at
`--memory-mb`, so a model that makes glowsdk allocate beyond it shows up as a MemoryError
(verdict "memory") instead of taking the machine down; the workers' size guard
(GLOWSDK_MAX_TENSOR_BYTES) is 256 MiB, far below that limit, so an allocation that slips past the
guard is caught. Verdicts (tests/fuzz/onnx_harness.py):
ok, error (a one-line GlowError), crash (anything else, or a multi-line GlowError), memory.
Crashes and memory blow-ups are grouped by root cause: the exception type and the innermost
glowsdk frame raising it. Mutant `i` of seed `s` is always the same model, so `--replay i`
reproduces any line of the table. The exit code is 1 if anything crashed or blew up.

The long run (issue 22), about a minute on 2 cores (0 crashes, 0 memory blow-ups, 8371 one-line
errors and 1629 models that load, at seed 0):

    python bench/fuzz_onnx.py --count 10000 --seed 0 --jobs 2

The test suite runs a few hundred mutants in-process (tests/test_import_fuzz.py).

Coverage-guided mode (tests/fuzz/guided.py, tests/fuzz/guided_targets.py), in this process
(`--jobs` is ignored: multi-process guided fuzzing is not implemented):

    python bench/fuzz_onnx.py --guided --count 2000 --seed 0     # a corpus grown from the seeds by new edges
    python bench/fuzz_onnx.py --coverage --count 2000 --seed 0   # the random mutants above, traced the same way

Each mutant mutates a corpus entry (a seed a third of the time, one of the eight newest a third,
otherwise weighted towards entries that added rare edges and were drawn little); it runs under a
`sys.settrace` tracer of the lines and edges of glowsdk/, isa/, sim/, firmware_runtime/ only, and
joins the corpus when it takes a new edge. The same verdicts and table, then the corpus growth
and the lines covered at 10%, 50% and 100% of the run; crashing payloads are written to a
folder (a guided mutant cannot be replayed by index). Figures (seed 0, two shared cores):

| run | mutants | crashes | memory | corpus | lines at 10% / 50% / 100% | time |
| --- | ---: | ---: | ---: | --- | --- | ---: |
| guided | 2,000 | 0 | 0 | 58 -> 151 | 2,912 / 3,033 / 3,055 | 50 s |
| unguided, traced | 2,000 | 0 | 0 | 58 | 2,920 / 3,001 / 3,050 | 78 s |

(the seeds alone: 2,805 lines). Guided: 1,761 one-line errors, 239 models that load.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fuzz.onnx_harness import Outcome, limit_memory, mutant_for, run_mutant  # noqa: E402

from glowsdk.cli.progress import Progress  # noqa: E402

BATCH = 25
_FOLDER = ""


GUARD_BYTES = 256 << 20
"""The workers' GLOWSDK_MAX_TENSOR_BYTES: far below the address-space limit, so anything that
allocates past the size guard (or around it) runs into the limit and is reported."""


def _start_worker(memory_mb: int) -> None:
    global _FOLDER
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("GLOWSDK_MAX_TENSOR_BYTES", str(GUARD_BYTES))
    _FOLDER = tempfile.mkdtemp(prefix="glowfuzz-")
    if memory_mb:
        limit_memory(memory_mb)


def _run_batch(seed: int, indices: list[int]) -> list[tuple[int, Outcome]]:
    return [(i, run_mutant(seed, i, os.path.join(_FOLDER, "m"))) for i in indices]


def run(count: int, seed: int, jobs: int, memory_mb: int) -> tuple[list[tuple[int, Outcome]], float]:
    start = time.perf_counter()
    progress = Progress("mutants")
    results: list[tuple[int, Outcome]] = []
    batches = [list(range(i, min(i + BATCH, count))) for i in range(0, count, BATCH)]
    with ProcessPoolExecutor(jobs, initializer=_start_worker, initargs=(memory_mb,)) as pool:
        futures = {pool.submit(_run_batch, seed, b): b for b in batches}
        for future in as_completed(futures):
            try:
                results += future.result()
            except Exception as err:  # a worker died (a segfault, the OOM killer): every mutant in the batch
                results += [(i, Outcome("crash", f"worker died: {type(err).__name__}")) for i in futures[future]]
            bad = sum(o.verdict in ("crash", "memory") for _, o in results)
            progress(len(results), count, f"{bad} crash/memory")
    progress.close()
    return sorted(results, key=lambda r: r[0]), time.perf_counter() - start


def summary(results: list[tuple[int, Outcome]], seconds: float, seed: int) -> str:
    verdicts = Counter(o.verdict for _, o in results)
    lines = [f"{len(results)} mutants (seed {seed}) in {seconds:.1f}s "
             f"({len(results) / max(seconds, 1e-9):.0f}/s)", "",
             "| verdict | mutants |", "| --- | ---: |"]
    lines += [f"| {v} | {verdicts.get(v, 0)} |" for v in ("ok", "error", "crash", "memory")]
    errors = Counter(o.key for _, o in results if o.verdict == "error")
    lines += ["", "one-line errors by class: " + ", ".join(f"{k} {n}" for k, n in errors.most_common())]
    groups: dict[tuple[str, str], list[tuple[int, Outcome]]] = defaultdict(list)
    for i, o in results:
        if o.verdict in ("crash", "memory"):
            groups[(o.verdict, o.key)].append((i, o))
    if groups:
        lines += ["", f"{len(groups)} root causes:", "",
                  "| verdict | root cause | mutants | example (replay) | seed model, mutations | message |",
                  "| --- | --- | ---: | ---: | --- | --- |"]
        for (verdict, key), hits in sorted(groups.items(), key=lambda g: -len(g[1])):
            i, o = hits[0]
            message = o.message.replace("\n", "\\n").replace("|", "/")[:120]
            lines.append(f"| {verdict} | {key} | {len(hits)} | {i} | {o.seed}: {'+'.join(o.log)} | {message} |")
    return "\n".join(lines)


def replay(seed: int, index: int) -> int:
    """Run one mutant in this process and print what it is and how it fails."""
    import glowsdk

    name, mutant = mutant_for(seed, index)
    print(f"mutant {index} of seed {seed}: {name} + {' + '.join(mutant.log)}")
    folder = tempfile.mkdtemp(prefix="glowfuzz-replay-")
    for file, content in mutant.files.items():
        Path(folder, file).write_bytes(content)
    path = Path(folder, "model.onnx")
    path.write_bytes(mutant.serialize())
    print(f"written to {path}")
    try:
        glowsdk.compile(glowsdk.load(str(path)), "interpreter", fallback=None)
        print("ok")
    except Exception:  # noqa: BLE001
        traceback.print_exc()
    return 0


def run_guided(args, guided: bool) -> int:
    """`--guided` / `--coverage`: one process, lines of the SDK traced (tests/fuzz/guided.py)."""
    from fuzz import guided as guided_mod
    from fuzz import guided_targets

    _start_worker(args.memory_mb)
    target = guided_targets.onnx_target(os.path.join(_FOLDER, "m"), args.seed)
    progress = Progress(("guided " if guided else "traced ") + target.name + " mutants")
    run = guided_mod.fuzz(target, args.count, args.seed, guided=guided, progress=progress)
    progress.close()
    print(summary(run.results, run.seconds, args.seed))
    print(guided_mod.report(run))
    if run.crashes:
        folder = tempfile.mkdtemp(prefix="glowfuzz-guided-crashes-")
        print(f"\ncrashing mutants written to {folder}")
        guided_targets.write_crashes(target, run.crashes, folder)
    return int(bool(run.crashes))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=1000, help="how many mutants (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="the run's random seed (default 0)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--memory-mb", type=int, default=3072,
                        help="address-space limit of each worker, in MiB (default 3072; 0: none)")
    parser.add_argument("--replay", type=int, metavar="INDEX", help="run mutant INDEX alone, with its traceback")
    parser.add_argument("--guided", action="store_true",
                        help="coverage-guided: grow a corpus from the seeds, in this process (tests/fuzz/guided.py)")
    parser.add_argument("--coverage", action="store_true",
                        help="the random mutants in this process under the same line tracer (to compare with --guided)")
    args = parser.parse_args(argv)
    if args.replay is not None:
        return replay(args.seed, args.replay)
    if args.guided or args.coverage:
        return run_guided(args, args.guided)
    results, seconds = run(args.count, args.seed, args.jobs, args.memory_mb)
    print(summary(results, seconds, args.seed))
    return int(any(o.verdict in ("crash", "memory") for _, o in results))


if __name__ == "__main__":
    sys.exit(main())
