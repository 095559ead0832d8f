"""Issue 21's results table: simulated NPU cycles against the roofline bound, and whether each binary is sound.

For each (model, batch, preset): load the model with seeded random weights (a bundled model with
`random_weights=0`, an untuned one as `scripts/export_bench_models.py` exported it), quantize it
with a profile of 2 seeded random inputs, compile it for the NPU twice (deterministic: the same
bytes), simulate it once in normal mode (cycles, array utilisation, simulate seconds) and once in
checked mode (race detection), and compare both runs' outputs with the reference evaluator on the
quantized graph (bit-exact). The bound is the one every NPU tool reports (`isa/roofline.py`): the
sum over the binary's convolution/matrix layers of max(MACs / peak, (weight + input + output bytes)
/ DRAM bytes per cycle), element-wise work free. A model that does not compile, or fails a check,
is a row with its one-line error.

    python bench/npu_roofline.py [--suite issue21] [--models resnet50,...] [--batches 1,8]
                                 [--configs default,edge,server] [--json out.json]

The default suite is issue 21's: the eight models at batch 1 on the default preset, and resnet50
at batch 1 and 8 on every preset.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Sequence

import numpy as np
import untuned

import glowsdk
from glowsdk.errors import GlowError
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile
from glowsdk.reference.evaluator import evaluate
from glowsdk.zoo.bundled import is_bundled
from isa import PRESETS
from isa.container import pack_npub
from sim.binding import run_binary

BUNDLED = ("resnet50", "squeezenet", "shufflenet", "inception_v1")
UNTUNED = ("mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "mnasnet1_0")
TARGETS = {("resnet50", 1): 1.3, ("resnet50", 8): 1.3}
"""Issue 21: resnet50 within 1.3x of the bound at batch 1 and 8 on every preset; every model within 1.5x at batch 1."""
DEFAULT_TARGET = 1.5


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def suite(name: str) -> list[tuple[str, int, str]]:
    """(model, batch, preset) jobs of a named suite."""
    if name != "issue21":
        raise SystemExit(f"unknown suite {name!r} (known: issue21)")
    jobs = [(m, 1, "default") for m in BUNDLED + UNTUNED]
    jobs.append(("resnet50", 8, "default"))
    jobs += [("resnet50", b, p) for p in ("edge", "server") for b in (1, 8)]
    return jobs


def load(name: str, batch: int) -> glowsdk.Network:
    if is_bundled(name):
        return glowsdk.load(name, random_weights=0, batch=batch if batch != 1 else None)
    if batch != 1:
        raise GlowError(f"{name}: the untuned set is exported at batch 1 only")
    record = untuned.ensure([name])[name]
    return glowsdk.load(record["path"])


def measure(name: str, batch: int, preset: str) -> dict:
    """One row; a model that does not compile or run is a row with its error."""
    row = {"model": name, "batch": batch, "config": preset, "target": TARGETS.get((name, batch), DEFAULT_TARGET)}
    config = PRESETS[preset]
    try:
        network = load(name, batch)
        quantization = QuantizationConfig(collect_profile(network, calibration_random(network, 2)))
        began = time.perf_counter()
        npu = glowsdk.compile(network, "npu", quantization=quantization, config=preset, fallback=None)
        row["compile_seconds"] = round(time.perf_counter() - began, 2)
        again = glowsdk.compile(network, "npu", quantization=quantization, config=preset, fallback=None)
        binary = npu.compiled.binary
        row["deterministic"] = pack_npub(binary) == pack_npub(again.compiled.binary)
        inputs = network.random_inputs(5)
        progress(f"{name} batch {batch} on {preset}: compiled in {row['compile_seconds']} s; simulating")
        run = run_binary(binary, config, inputs)
    except GlowError as err:
        progress(f"{name} batch {batch} on {preset}: {err}")
        return {**row, "error": str(err).splitlines()[0]}
    runs = [run]
    try:
        runs.append(run_binary(binary, config, inputs, checked=True))
        row["checked_ok"] = runs[-1].result.cycles == run.result.cycles
    except GlowError as err:  # a race, named
        row.update(checked_ok=False, checked_error=str(err).splitlines()[0])
    want = evaluate(npu.compiled.function, inputs)
    result, total = run.result, run.result.total_row()
    row.update(
        cycles=result.cycles, bound_cycles=round(total.roofline_cycles), ratio=round(total.ratio, 4),
        utilisation=round(total.utilisation, 4), simulate_seconds=round(result.wall_seconds, 2),
        bit_exact=all(np.array_equal(r.outputs[k], v) for r in runs for k, v in want.items()),
        macs=total.macs, dram_bytes=total.dram_read + total.dram_written, instructions=len(binary.instructions),
        layers=[{"layer": r.name, "kind": r.kind, "cycles": r.cycles, "bound": r.bound,
                 "bound_cycles": r.roofline_cycles, "ratio": r.ratio} for r in result.layer_rows()])
    progress(f"  {result.cycles:,} cycles, {row['ratio']:.3f}x the bound, bit-exact {row['bit_exact']}")
    return row


def table(rows: Sequence[dict]) -> str:
    lines = ["| model | batch | config | cycles | bound | ratio | target | met | array util | compile s | "
             "simulate s | checked OK | bit-exact | deterministic |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        head = f"| {r['model']} | {r['batch']} | {r['config']} |"
        if "error" in r:
            lines.append(f"{head} error: {r['error']} | | | {r['target']} | no | | | | | | |")
            continue
        met = "yes" if r["ratio"] <= r["target"] and r["checked_ok"] and r["bit_exact"] else "no"
        lines.append(f"{head} {r['cycles']:,} | {r['bound_cycles']:,} | {r['ratio']:.3f} | {r['target']} | {met} | "
                     f"{r['utilisation']:.1%} | {r['compile_seconds']} | {r['simulate_seconds']} | "
                     f"{r['checked_ok']} | {r['bit_exact']} | {r['deterministic']} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="issue21", help="a named set of jobs (default issue21)")
    parser.add_argument("--models", help="instead of the suite: these models (bundled or untuned names)")
    parser.add_argument("--batches", default="1", help="with --models: batch sizes (default 1)")
    parser.add_argument("--configs", default="default", help="with --models: presets (default default)")
    parser.add_argument("--json", help="also write every figure (and each layer's) to this JSON file")
    args = parser.parse_args(argv)
    if args.models:
        for p in args.configs.split(","):
            if p not in PRESETS:
                parser.error(f"--configs: unknown preset {p!r} (presets: {', '.join(PRESETS)})")
        jobs = [(m, int(b), p) for p in args.configs.split(",") for m in args.models.split(",")
                for b in args.batches.split(",")]
    else:
        jobs = suite(args.suite)
    rows = []
    for k, (model, batch, preset) in enumerate(jobs, start=1):
        progress(f"[{k}/{len(jobs)}] {model} batch {batch} on {preset}")
        rows.append(measure(model, batch, preset))
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
