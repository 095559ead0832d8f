"""A short run of the .npub fuzzer (tests/fuzz; the long run is bench/fuzz_npub.py): a few hundred
structure-aware mutants of valid binaries, each read, loaded onto a device, unloaded and, when small,
run, or refused with a one-line GlowError; never anything else."""
from __future__ import annotations

import random
from collections import Counter

from fuzz.npub_harness import run_mutant, run_npub
from fuzz.npub_mutations import MUTATIONS, mutate, reseal
from fuzz.npub_seeds import SEEDS, seed_bytes

SMOKE = 400


def test_every_small_seed_reads_loads_and_runs():
    for name in SEEDS:
        if name != "squeezenet":  # 1.5 s to compile; the long run has it
            assert run_npub(seed_bytes(name)).key == "run", name


def test_reseal_reaches_past_the_checksums():
    data = bytearray(seed_bytes("sample"))
    data[-1] ^= 0xFF  # the last byte of the metadata section
    assert "CRC-32" in run_npub(bytes(data)).message
    assert "CRC-32" not in run_npub(reseal(data)).message


def test_smoke_run_has_no_crash():
    outcomes = [run_mutant(3, i) for i in range(SMOKE)]
    bad = [(i, o) for i, o in enumerate(outcomes) if o.verdict not in ("ok", "error")]
    assert not bad, [f"mutant {i} ({o.seed}: {'+'.join(o.log)}): {o.key}: {o.message}" for i, o in bad[:5]]
    keys = Counter(o.key.split(":")[0] for o in outcomes)
    assert keys["read"] > SMOKE // 2 and keys["run"] > SMOKE // 20 and keys["load"] > 0  # every stage reached


def test_every_mutation_applies():
    rng = random.Random(0)
    applied = set()
    for _ in range(300):
        _, log = mutate(seed_bytes("conv"), rng, 1)
        applied.update(log)
    kinds = {entry.split(" ")[0].split(".")[0] for entry in applied}
    assert len(applied) > 40 and len(kinds) > 10 and len(MUTATIONS) == 11
