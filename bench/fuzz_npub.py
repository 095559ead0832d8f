"""Fuzz the .npub container reader and the firmware loader with structure-aware mutants.

    python bench/fuzz_npub.py [--count 1000] [--seed 0] [--jobs 1] [--memory-mb 6144]
    python bench/fuzz_npub.py --seed 0 --replay 1234     # one mutant, with its traceback

Each mutant is a valid file built for the `default` preset (tests/fuzz/npub_seeds.py: the
container tests' sample, two small networks compiled for the NPU, squeezenet one time in a
hundred) with one to three mutations (tests/fuzz/npub_mutations.py: bit flips, byte runs,
truncation at a part's edge, header and section-table fields, fields of tensor, binding,
memory-plan and debug records, raw instruction fields and opcodes, instructions swapped or
copied, the metadata's JSON, and edits of the decoded binary packed again), and three times in
four every CRC recomputed so the mutant reaches the checks behind the checksums. It goes through
`read_npub`, then `NpuDevice.load` and `unload` (the free list must be whole again), then, for a
program of at most 256 instructions and 1 MiB of plan, a simulated run with zero inputs
(tests/fuzz/npub_harness.py). Workers run with their address space capped at `--memory-mb`
(device DRAM is backed per allocated block, so a plan of the default preset's 2 GiB only
reserves address space). Verdicts: ok, error (a one-line GlowError), crash (anything else, a
multi-line GlowError, DRAM not whole after unload), memory (MemoryError). Crashes are grouped by
root cause (exception type, innermost SDK frame); `--replay i` reproduces line i. The table also
gives each stage's one-line errors and the workers' peak resident memory. Exit code 1 on any
crash or memory blow-up.

The long run (issue 22), 100,000 mutants on 2 cores:

    python bench/fuzz_npub.py --count 100000 --seed 0 --jobs 2

gave, in 184 s (543 mutants/s; workers' peak RSS 161 MiB): 0 crashes, 0 memory blow-ups,
85,966 one-line errors (81,267 NpubError from the reader, 2,109 LoadError from the loader on the
device's configuration, 2,590 DeviceFault from runs) and 14,034 files accepted (13,796 run to
the end on the simulator, 238 loaded and unloaded, too large to run). It found no crash: the
reader and loader needed no fix. A second run, `--seed 1`, on otherwise idle cores: 100,000
mutants in 101 s, 0 crashes, 0 memory blow-ups, 86,185 one-line errors, 13,815 accepted. The
test suite runs 400 mutants (tests/test_npub_fuzz.py).

Coverage-guided mode (tests/fuzz/guided.py, tests/fuzz/guided_targets.py), in this process
(`--jobs` is ignored: multi-process guided fuzzing is not implemented):

    python bench/fuzz_npub.py --guided --count 5000 --seed 0     # a corpus grown from the seeds by new edges
    python bench/fuzz_npub.py --coverage --count 5000 --seed 0   # the random mutants above, traced the same way

Each mutant mutates a corpus entry (a seed a third of the time, one of the eight newest a third,
otherwise weighted towards entries that added rare edges and were drawn little); it runs under a
`sys.settrace` tracer of the lines and edges of glowsdk/, isa/, sim/, firmware_runtime/ only, and
joins the corpus when it takes a new edge. The same verdicts and table, then the corpus growth
and the lines covered at 10%, 50% and 100% of the run; crashing payloads are written to a
folder (a guided mutant cannot be replayed by index). Figures (seed 0, two shared cores):

| run | mutants | crashes | memory | corpus | lines at 10% / 50% / 100% | time |
| --- | ---: | ---: | ---: | --- | --- | ---: |
| guided | 5,000 | 0 | 0 | 4 -> 77 | 1,117 / 1,187 / 1,190 | 22 s |
| unguided, traced | 5,000 | 0 | 0 | 4 | 1,175 / 1,200 / 1,212 | 58 s |

(the seeds alone: 951 lines). Guided: 4,743 one-line errors, 257 accepted.
"""
from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fuzz.npub_harness import mutant_for, run_mutant
from fuzz.npub_seeds import SEEDS, seed_bytes
from fuzz.onnx_harness import Outcome, limit_memory

from glowsdk.cli.progress import Progress

BATCH = 200


def _start_worker(memory_mb: int) -> None:
    import warnings

    warnings.simplefilter("ignore", RuntimeWarning)  # numpy's on NaN inputs of mutated scales; not verdicts
    for name in SEEDS:
        seed_bytes(name)
    if memory_mb:
        limit_memory(memory_mb)


def _run_batch(seed: int, indices: list[int]) -> tuple[list[tuple[int, Outcome]], int]:
    results = [(i, run_mutant(seed, i)) for i in indices]
    return results, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10


def run(count: int, seed: int, jobs: int, memory_mb: int) -> tuple[list[tuple[int, Outcome]], float, int]:
    start = time.perf_counter()
    progress = Progress("mutants")
    results: list[tuple[int, Outcome]] = []
    peak_mb = 0
    batches = [list(range(i, min(i + BATCH, count))) for i in range(0, count, BATCH)]
    with ProcessPoolExecutor(jobs, initializer=_start_worker, initargs=(memory_mb,)) as pool:
        futures = {pool.submit(_run_batch, seed, b): b for b in batches}
        for future in as_completed(futures):
            try:
                done, rss = future.result()
                results += done
                peak_mb = max(peak_mb, rss)
            except Exception as err:  # noqa: BLE001  (a worker died: a segfault, the OOM killer; the whole batch)
                results += [(i, Outcome("crash", f"worker died: {type(err).__name__}")) for i in futures[future]]
            bad = sum(o.verdict in ("crash", "memory") for _, o in results)
            progress(len(results), count, f"{bad} crash/memory")
    progress.close()
    return sorted(results, key=lambda r: r[0]), time.perf_counter() - start, peak_mb


def summary(results: list[tuple[int, Outcome]], seconds: float, seed: int, peak_mb: int) -> str:
    verdicts = Counter(o.verdict for _, o in results)
    lines = [(f"{len(results)} mutants (seed {seed}) in {seconds:.1f}s "
              f"({len(results) / max(seconds, 1e-9):.0f}/s), workers' peak RSS {peak_mb} MiB"), "",
             "| verdict | mutants |", "| --- | ---: |"]
    lines += [f"| {v} | {verdicts.get(v, 0)} |" for v in ("ok", "error", "crash", "memory")]
    errors = Counter(o.key for _, o in results if o.verdict == "error")
    oks = Counter(o.key for _, o in results if o.verdict == "ok")
    lines += ["", "one-line errors by stage and class: " + ", ".join(f"{k} {n}" for k, n in errors.most_common())]
    lines += ["accepted, by the last stage passed: " + ", ".join(f"{k} {n}" for k, n in oks.most_common())]
    groups: dict[tuple[str, str], list[tuple[int, Outcome]]] = defaultdict(list)
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


def replay(seed: int, index: int, out: str | None) -> int:
    """Run one mutant in this process and print what it is and how it fails."""
    from fuzz.npub_harness import CONFIG, NpuDevice, read_npub

    name, data, log = mutant_for(seed, index)
    print(f"mutant {index} of seed {seed}: {name} + {' + '.join(log)}")
    if out:
        Path(out).write_bytes(data)
        print(f"written to {out}")
    try:
        read_npub(data, name="m.npub")
        device = NpuDevice(CONFIG)
        net = device.load("m", data)
        print(f"loaded: {len(net.program)} instructions, {net.dram_bytes} bytes of device DRAM")
        device.unload("m")
        print("ok")
    except Exception:  # noqa: BLE001
        traceback.print_exc()
    return 0


def run_guided(args, guided: bool) -> int:
    """`--guided` / `--coverage`: one process, lines of the SDK traced (tests/fuzz/guided.py)."""
    from fuzz import guided as guided_mod
    from fuzz import guided_targets

    _start_worker(args.memory_mb)
    target = guided_targets.npub_target(args.seed)
    progress = Progress(("guided " if guided else "traced ") + target.name + " mutants")
    run = guided_mod.fuzz(target, args.count, args.seed, guided=guided, progress=progress)
    progress.close()
    print(summary(run.results, run.seconds, args.seed, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10))
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
    parser.add_argument("--memory-mb", type=int, default=6144,
                        help="address-space limit of each worker, in MiB (default 6144; 0: none)")
    parser.add_argument("--replay", type=int, metavar="INDEX", help="run mutant INDEX alone, with its traceback")
    parser.add_argument("-o", "--output", help="with --replay: also write the mutant to this file")
    parser.add_argument("--guided", action="store_true",
                        help="coverage-guided: grow a corpus from the seeds, in this process (tests/fuzz/guided.py)")
    parser.add_argument("--coverage", action="store_true",
                        help="the random mutants in this process under the same line tracer (to compare with --guided)")
    args = parser.parse_args(argv)
    if args.replay is not None:
        return replay(args.seed, args.replay, args.output)
    if args.guided or args.coverage:
        return run_guided(args, args.guided)
    results, seconds, peak_mb = run(args.count, args.seed, args.jobs, args.memory_mb)
    print(summary(results, seconds, args.seed, peak_mb))
    return int(any(o.verdict in ("crash", "memory") for _, o in results))


if __name__ == "__main__":
    sys.exit(main())
