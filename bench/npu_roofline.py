"""Issue 8's efficiency table: simulated NPU cycles against the roofline lower bound.

For each model (seeded random weights 0, quantized with a profile of 2 seeded random inputs) and
batch size: compile for the NPU, simulate on the chosen preset, and compare the total cycles with
`glowsdk.backends.npu.roofline`'s bound (the sum over layers of max(MACs / array MACs per cycle,
minimal DRAM bytes / DRAM bytes per cycle)); also the array utilisation, the compile and
simulation seconds, whether the binary is deterministic (compiled twice, same bytes) and
bit-exact with the reference evaluator on the compiled quantized graph. With --memory-bound, the
layers whose bound is the DRAM, and why (their arithmetic intensity against the ridge point).

    python bench/npu_roofline.py [--models resnet50,vgg19] [--batches 1,8] [--config default]
                                 [--memory-bound] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Sequence

import numpy as np

import glowsdk
from glowsdk.backends.npu.roofline import layer_bounds
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile
from glowsdk.reference.evaluator import evaluate
from isa import PRESETS
from isa.container import pack_npub
from sim.binding import run_binary

TARGETS = {1: 1.5, 8: 1.25}
"""Issue 8: total cycles within these factors of the bound at batch 1 and 8."""


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def measure(name: str, batch: int, preset: str, memory_bound: bool) -> dict:
    config = PRESETS[preset]
    network = glowsdk.load(name, random_weights=0, batch=batch if batch != 1 else None)
    profile = collect_profile(network, calibration_random(network, 2))
    quantization = QuantizationConfig(profile)
    began = time.perf_counter()
    npu = glowsdk.compile(network, "npu", quantization=quantization, config=preset)
    compile_seconds = time.perf_counter() - began
    again = glowsdk.compile(network, "npu", quantization=quantization, config=preset)
    deterministic = pack_npub(npu.compiled.binary) == pack_npub(again.compiled.binary)
    inputs = network.random_inputs(5)
    progress(f"{name} batch {batch}: compiled in {compile_seconds:.1f} s; simulating")
    run = run_binary(npu.compiled.binary, config, inputs)
    result = run.result
    want = evaluate(npu.compiled.function, inputs)
    exact = all(np.array_equal(run.outputs[k], v) for k, v in want.items())
    bounds = layer_bounds(npu.compiled.function, config)
    bound = sum(b.cycles for b in bounds)
    total = result.total_row()
    row = {"model": name, "batch": batch, "config": preset, "cycles": result.cycles, "bound_cycles": round(bound),
           "ratio": result.cycles / bound, "target": TARGETS.get(batch), "utilisation": total.utilisation,
           "macs": total.macs, "dram_bytes": total.dram_read + total.dram_written,
           "compile_seconds": round(compile_seconds, 2), "simulate_seconds": round(result.wall_seconds, 2),
           "instructions": len(npu.compiled.binary.instructions), "deterministic": deterministic,
           "bit_exact": exact}
    if memory_bound:
        ridge = config.macs_per_cycle * 2 / config.dram_bytes_per_cycle
        row["memory_bound_layers"] = [
            {"layer": b.name, "kind": b.kind, "ops_per_byte": round(2 * b.macs / b.bytes, 1) if b.bytes else 0.0,
             "ridge_ops_per_byte": round(ridge, 1), "bound_cycles": round(b.cycles)}
            for b in bounds if b.bound == "memory"]
    return row


def table(rows: Sequence[dict]) -> str:
    lines = ["| model | batch | config | cycles | bound | ratio | target | met | array util | compile s | "
             "simulate s | deterministic | bit-exact |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        met = "n/a" if r["target"] is None else ("yes" if r["ratio"] <= r["target"] else "no")
        lines.append(f"| {r['model']} | {r['batch']} | {r['config']} | {r['cycles']:,} | {r['bound_cycles']:,} | "
                     f"{r['ratio']:.3f} | {r['target'] or '-'} | {met} | {r['utilisation']:.1%} | "
                     f"{r['compile_seconds']} | {r['simulate_seconds']} | {r['deterministic']} | {r['bit_exact']} |")
    return "\n".join(lines)


def memory_table(rows: Sequence[dict]) -> str:
    lines = []
    for r in rows:
        layers = r.get("memory_bound_layers")
        if not layers:
            continue
        lines += [f"\n{r['model']} batch {r['batch']} on {r['config']}: {len(layers)} memory-bound layers "
                  f"(ridge point {layers[0]['ridge_ops_per_byte']} ops/byte)",
                  "| layer | kind | ops/byte | bound cycles |", "|---|---|---|---|"]
        lines += [f"| {x['layer']} | {x['kind']} | {x['ops_per_byte']} | {x['bound_cycles']:,} |" for x in layers]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet50,vgg19")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--config", default="default", choices=sorted(PRESETS))
    parser.add_argument("--memory-bound", action="store_true", help="list the memory-bound layers")
    parser.add_argument("--json", help="also write every figure to this JSON file")
    args = parser.parse_args(argv)
    rows = [measure(m, int(b), args.config, args.memory_bound)
            for m in args.models.split(",") for b in args.batches.split(",")]
    print(table(rows))
    print(memory_table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
