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

Coverage-guided runs of the same reader: bench/fuzz_atheris.py (atheris, these mutators as its custom mutator).
"""
from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fuzz import driver
from fuzz.npub_harness import mutant_for, run_mutant
from fuzz.npub_seeds import SEEDS, seed_bytes
from fuzz.onnx_harness import Outcome, limit_memory


BATCH = 200


def _start_worker(memory_mb: int) -> None:
    import warnings

    warnings.simplefilter("ignore", RuntimeWarning)  # numpy's on NaN inputs of mutated scales; not verdicts
    for name in SEEDS:
        seed_bytes(name)
    if memory_mb:
        limit_memory(memory_mb)


def _run_batch(seed: int, indices: list[int]) -> tuple[list[tuple[int, Outcome]], int]:
    return [(i, run_mutant(seed, i)) for i in indices], driver.peak_rss_mb()


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    driver.add_common_arguments(parser, memory_mb=6144)
    parser.add_argument("-o", "--output", help="with --replay: also write the mutant to this file")
    args = parser.parse_args(argv)
    if args.replay is not None:
        return replay(args.seed, args.replay, args.output)
    results, seconds, peak_mb = driver.run_batches("mutants", args.count, args.jobs, BATCH, _start_worker,
                                                   (args.memory_mb,), _run_batch, (args.seed,))
    print(driver.summary(results, seconds, args.seed, peak_mb))
    return int(any(o.verdict in ("crash", "memory") for _, o in results))


if __name__ == "__main__":
    sys.exit(main())
