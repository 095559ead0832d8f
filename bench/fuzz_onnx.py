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

Coverage-guided runs of the same reader: bench/fuzz_atheris.py (atheris, these mutators as its custom mutator).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fuzz import driver  # noqa: E402
from fuzz.onnx_harness import Outcome, limit_memory, mutant_for, run_mutant  # noqa: E402

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


def _run_batch(seed: int, indices: list[int]) -> tuple[list[tuple[int, Outcome]], int]:
    return [(i, run_mutant(seed, i, os.path.join(_FOLDER, "m"))) for i in indices], driver.peak_rss_mb()


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    driver.add_common_arguments(parser, memory_mb=3072)
    args = parser.parse_args(argv)
    if args.replay is not None:
        return replay(args.seed, args.replay)
    results, seconds, peak_mb = driver.run_batches("mutants", args.count, args.jobs, BATCH, _start_worker,
                                                   (args.memory_mb,), _run_batch, (args.seed,))
    print(driver.summary(results, seconds, args.seed, peak_mb))
    return int(any(o.verdict in ("crash", "memory") for _, o in results))


if __name__ == "__main__":
    sys.exit(main())
