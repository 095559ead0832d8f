"""Fuzz the architecture-configuration parser and the profile reader with mutated files.

    python bench/fuzz_readers.py --target config|profile [--count 1000] [--seed 0] [--jobs 1] [--memory-mb 4096]
    python bench/fuzz_readers.py --target profile --seed 0 --replay 1234   # one mutant, with its traceback

`--target config`: each preset written as a TOML file (parameters as numbers, or sizes as text
such as "512 KiB"), a one-key file, and a JSON file one time in four, mutated in its parsed
tree (a value replaced by an odd one: out of range, a huge integer, NaN, a string with a line
break, a wrong type, deep nesting; a key deleted, added or swapped) and then in its text (a
byte flipped, a TOML token inserted, a cut, invalid UTF-8, thousands of '['), read by
`isa.config.load_config`; every tenth mutant also by `glowsdk disasm sample.npub --config FILE`,
which must exit 0 or 2 with a one-line error. `--target profile`: the profile
`glowsdk profile squeezenet --calibration-random 2` writes, and real profiles cut from it (its
last one, two or four values, version 2; the last one as version 1), mutated the same way,
read by `load_profile`. Harness: tests/fuzz/reader_harness.py, mutations:
tests/fuzz/reader_mutations.py; verdicts and the table are bench/fuzz_npub.py's. Exit code 1
on any crash or memory blow-up.

The documented runs (issue 22), on 2 cores:

    python bench/fuzz_readers.py --target config --count 10000 --seed 0 --jobs 2
    python bench/fuzz_readers.py --target profile --count 10000 --seed 0 --jobs 2

gave 0 crashes and 0 memory blow-ups: config, 10,000 mutants in 8 s, 8,484 one-line errors
(7,534 ConfigError, 950 `glowsdk disasm --config` exits 2) and 1,516 accepted; profile, 10,000
mutants in 20 s, 8,619 one-line errors and 1,381 accepted (workers' peak RSS 52 and 148 MiB).
Before the fixes the first 3,000 configuration mutants crashed 86 times and 1,000 profile
mutants 25 times; the root causes, each with its regression test in tests/test_reader_fuzz.py:
an out-of-range integer of over 4300 digits put in a message (str() refuses it); tomllib and json
raising ValueError (digit limit) and RecursionError (deep nesting) rather than their decode
errors; an array as `preset` (unhashable); a size string of 5,000 digits; an integer past a
double for `clock_ghz`, and for a profile's numbers; a key, configuration name or profile value
name with a line break echoed into a message; a histogram count past int64; and a profile's
`histogram_bins` allocated (np.zeros) before it was checked against the counts in the file. The
test suite runs 600 configuration and 200 profile mutants (tests/test_reader_fuzz.py).

Coverage-guided runs of the same reader: bench/fuzz_atheris.py (atheris, these mutators as its custom mutator).
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fuzz import driver, reader_harness
from fuzz.onnx_harness import Outcome, limit_memory

BATCH = 100
_FOLDER = ""


def _start_worker(target: str, memory_mb: int) -> None:
    global _FOLDER
    _FOLDER = reader_harness.new_folder()
    if target == "profile":
        reader_harness.profile_seeds()
    if memory_mb:
        limit_memory(memory_mb)


def _run_batch(target: str, seed: int, indices: list[int]) -> tuple[list[tuple[int, Outcome]], int]:
    return [(i, reader_harness.run_mutant(target, seed, i, _FOLDER)) for i in indices], driver.peak_rss_mb()


def replay(target: str, seed: int, index: int) -> int:
    """Write mutant `index` to a file, read it in this process, print the traceback if any."""
    from glowsdk.quantization.profile_reader import load_profile
    from isa.config import load_config

    folder = reader_harness.new_folder()
    if target == "config":
        name, suffix, data, log = reader_harness.config_mutant(seed, index)
        path, read = os.path.join(folder, "arch" + suffix), load_config
    else:
        name, data, log = reader_harness.profile_mutant(seed, index)
        suffix, path, read = "", os.path.join(folder, "profile.json"), load_profile
    Path(path).write_bytes(data)
    print(f"{target} mutant {index} of seed {seed}: {name}{suffix} + {' + '.join(log)}\nwritten to {path}")
    try:
        read(path)
        print("ok")
    except Exception:  # noqa: BLE001
        traceback.print_exc()
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", choices=reader_harness.TARGETS, required=True, help="the reader to fuzz")
    driver.add_common_arguments(parser, memory_mb=4096)
    args = parser.parse_args(argv)
    if args.replay is not None:
        return replay(args.target, args.seed, args.replay)
    results, seconds, peak_mb = driver.run_batches(f"{args.target} mutants", args.count, args.jobs, BATCH,
                                                   _start_worker, (args.target, args.memory_mb), _run_batch,
                                                   (args.target, args.seed))
    print(driver.summary(results, seconds, args.seed, peak_mb))
    return int(any(o.verdict in ("crash", "memory") for _, o in results))


if __name__ == "__main__":
    sys.exit(main())
