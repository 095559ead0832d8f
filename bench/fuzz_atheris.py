"""Coverage-guided fuzzing of the four readers with atheris (libFuzzer for Python), and coverage measurement.

    pip install -e ".[test,fuzz]"        # atheris and coverage: the `fuzz` extra, never a run-time dependency
    python bench/fuzz_atheris.py run --target onnx|npub|config|profile --runs 20000 [--corpus DIR] [--seed 0]
                                     [--reseed 0.33 | --bytes-only] [--memory-mb 4096]
    python bench/fuzz_atheris.py measure --target T --corpus DIR      # lines and branches a corpus reaches
    python bench/fuzz_atheris.py measure --target T --random N [--seed 0]   # the same for the random fuzzer
    python bench/fuzz_atheris.py replay --target T FILE               # one input, its verdict and traceback

`run`: the SDK's packages (glowsdk, isa, sim, firmware_runtime) are imported under atheris's
bytecode instrumentation, every module of them, so libFuzzer sees the edges and comparisons of
the SDK and nothing else; the corpus folder starts with real files (tests/fuzz/targets.py) and
keeps each input that reached new coverage. Mutation is structure-aware: the random fuzzers'
mutators as libFuzzer's custom mutator, four times in five, and libFuzzer's own byte mutator
(which also splices in the constants the instrumented comparisons saw) otherwise, or always with
`--bytes-only`; `--reseed P` starts a share P of the mutants from a seed file (weighted as the
random fuzzer weighs its seeds) instead of the corpus entry libFuzzer picked. Each input is judged as the random fuzzers judge (tests/fuzz/onnx_harness.py);
a crash or memory blow-up stops the run and leaves the input as `crash-*` in the corpus's
`crashes/` folder (replay it with `replay`). libFuzzer exits the process at the end; a verdict
summary is printed when the last run is done.

`measure`: runs inputs under coverage.py (branch coverage, the SDK's packages only) and prints
the statements and branches reached: a corpus folder (its seeds and whatever the guided run
kept), or the seeds plus the random fuzzer's mutants 0..N-1 (bench/fuzz_*.py), for comparing
the two for the same number of runs. Figures: bench/README.md.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import random
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

PACKAGES = ("glowsdk", "isa", "sim", "firmware_runtime")
MAX_LEN = 1 << 21  # the squeezenet .npub seed is 1.3 MB
BYTE_SHARE = 0.2
GUARD_BYTES = 256 << 20
"""GLOWSDK_MAX_TENSOR_BYTES for ONNX runs, far below the address-space cap (as bench/fuzz_onnx.py)."""


class Finding(Exception):
    """A crash or memory blow-up of the SDK: libFuzzer keeps the input that made it."""


def _environment() -> None:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("GLOWSDK_MAX_TENSOR_BYTES", str(GUARD_BYTES))
    import warnings

    warnings.simplefilter("ignore", RuntimeWarning)  # numpy's on NaN inputs of mutated scales; not verdicts


def _import_sdk() -> None:
    """Import every module of the SDK's packages (under instrumentation when atheris's hook is active)."""
    for package in PACKAGES:
        module = importlib.import_module(package)
        for info in pkgutil.walk_packages(module.__path__, package + "."):
            if not info.name.endswith("__main__"):
                importlib.import_module(info.name)


def _target(args):
    from fuzz import targets

    return targets.make(args.target, tempfile.mkdtemp(prefix=f"glowfuzz-{args.target}-"), args.seed)


def run(args) -> int:
    import atheris

    _environment()
    with atheris.instrument_imports(include=list(PACKAGES)):
        _import_sdk()
    from fuzz.onnx_harness import limit_memory
    from fuzz.targets import Skip

    target = _target(args)
    corpus = Path(args.corpus or tempfile.mkdtemp(prefix=f"glowfuzz-corpus-{args.target}-"))
    corpus.mkdir(parents=True, exist_ok=True)
    crashes = corpus / "crashes"
    crashes.mkdir(exist_ok=True)
    if not any(p.is_file() for p in corpus.iterdir()):
        for name, data in target.seeds.items():
            (corpus / name).write_bytes(data)
    if args.memory_mb:
        limit_memory(args.memory_mb)
    verdicts: Counter = Counter()

    def one_input(data: bytes) -> None:
        outcome = target.run(data)
        verdicts[outcome.verdict] += 1
        if sum(verdicts.values()) == args.runs:
            print(f"verdicts after {args.runs} runs: " + ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items())),
                  flush=True)
        if outcome.verdict in ("crash", "memory"):
            raise Finding(f"{outcome.verdict}: {outcome.key}: {outcome.message}")

    seeds = list(target.seeds.values())
    weights = [(target.weights or {}).get(name, 1.0) for name in target.seeds]  # the random fuzzer's, if any

    def mutator(data: bytes, max_size: int, seed: int) -> bytes:
        rng = random.Random(seed)
        if rng.random() < args.reseed:  # a real file rather than the corpus entry libFuzzer picked
            data = rng.choices(seeds, weights)[0]
        if rng.random() >= BYTE_SHARE:
            try:
                out = target.mutate(rng, data)
                if len(out) <= max_size:
                    return out
            except Skip:
                pass
        return atheris.Mutate(data, max_size)

    print(f"corpus {corpus}, crashes to {crashes}", flush=True)
    argv = [sys.argv[0], f"-atheris_runs={args.runs}", f"-seed={args.seed + 1}", f"-max_len={MAX_LEN}",
            f"-rss_limit_mb={args.memory_mb or 4096}", "-timeout=300", f"-artifact_prefix={crashes}/",
            "-print_final_stats=1", str(corpus)]
    atheris.Setup(argv, one_input, **({} if args.bytes_only else {"custom_mutator": mutator}))
    atheris.Fuzz()
    return 0


def measure(args) -> int:
    import coverage

    _environment()
    _import_sdk()
    target = _target(args)
    cov = coverage.Coverage(branch=True, data_file=None, source=[str(ROOT / p) for p in PACKAGES])
    verdicts: Counter = Counter()
    cov.start()
    try:
        if args.corpus:
            for path in sorted(p for p in Path(args.corpus).iterdir() if p.is_file()):
                verdicts[target.run(path.read_bytes()).verdict] += 1
        else:
            for data in target.seeds.values():
                verdicts[target.run(data).verdict] += 1
            for index in range(args.random):
                verdicts[target.random_run(index).verdict] += 1
    finally:
        cov.stop()
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cov.json_report(outfile=out.name)
        totals = json.loads(Path(out.name).read_text())["totals"]
    what = f"corpus {args.corpus}" if args.corpus else f"seeds + random mutants 0..{args.random - 1} (seed {args.seed})"
    print(f"{args.target}: {what}: {sum(verdicts.values())} inputs ("
          + ", ".join(f"{v} {n}" for v, n in sorted(verdicts.items())) + ")")
    print(f"statements {totals['covered_lines']} / {totals['num_statements']}, "
          f"branches {totals['covered_branches']} / {totals['num_branches']}")
    return 0


def replay(args) -> int:
    _environment()
    target = _target(args)
    outcome = target.run(Path(args.file).read_bytes())
    print(f"{outcome.verdict}: {outcome.key}: {outcome.message}")
    return int(outcome.verdict in ("crash", "memory"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "measure", "replay"):
        sub = commands.add_parser(name)
        sub.add_argument("--target", choices=("onnx", "npub", "config", "profile"), required=True)
        sub.add_argument("--seed", type=int, default=0, help="libFuzzer's seed is this + 1; the random mutants' seed")
        if name == "run":
            sub.add_argument("--runs", type=int, default=10000, help="inputs to run, the seeds included")
            sub.add_argument("--corpus", help="corpus folder (default: a new temporary one); seeds go into an empty one")
            sub.add_argument("--bytes-only", action="store_true", help="libFuzzer's byte mutator only")
            sub.add_argument("--reseed", type=float, default=0.0,
                             help="share of mutants made from a seed file instead of the corpus entry (default 0)")
            sub.add_argument("--memory-mb", type=int, default=4096, help="address-space cap in MiB (0: none)")
        elif name == "measure":
            group = sub.add_mutually_exclusive_group(required=True)
            group.add_argument("--corpus", help="every file of this folder")
            group.add_argument("--random", type=int, help="the seeds and this many random mutants")
        else:
            sub.add_argument("file")
    args = parser.parse_args(argv)
    return {"run": run, "measure": measure, "replay": replay}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
