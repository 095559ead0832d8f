"""Where the NPU's array waits: each idle stretch of the matrix engine, by layer and by what it waited for.

The array's busy time is fixed by the tiling and the timing model; what a schedule can still win is the time it
idles. For each MATMUL (or GMATMUL), in start order, the stretch since the array's last product ended is charged to
the layer whose instructions hold it and to the semaphore that released it last: its own wait or the wait of a
configuration op just before it (LOADED: its step's loads; PREFETCH: operands the layer before loaded; HANDOFF: the
layer before's vector work on accumulator rows it writes; ACCFREE: its tile's accumulator slot). The releaser is
the latest signal of that semaphore that ended by the product's start. A product moved in front of a barrier
(handoff.py) sits in the layer before's range and is charged there.

    python bench/npu_idle.py [--models resnet50] [--configs server] [--batches 1] [--min 200] [--json out.json]

Prints, per job, the idle by cause and the layers that idle most; the JSON holds every stretch.
"""
from __future__ import annotations

import argparse
import bisect
import json
import sys
from collections import Counter, defaultdict
from typing import Sequence

import npu_roofline

import glowsdk
from glowsdk.backends.npu import handoff, pipeline
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile
from isa import PRESETS
from isa.container import NpuBinary
from sim.binding import run_binary
from sim.results import SimResult

PAIRS = {"LOADED": pipeline.LOADED, "MFREE": pipeline.MFREE, "ACCFREE": pipeline.ACCFREE,
         "COMPUTED": pipeline.COMPUTED, "READY": pipeline.READY, "SFREE": pipeline.SFREE, "VFREE": pipeline.VFREE,
         "OPERAND": pipeline.OPERAND, "OPFREE": pipeline.OPFREE, "PREPARED": pipeline.PREPARED,
         "IFREE": pipeline.IFREE}
"""The pipeline's per-slot semaphore pairs (slot 0, slot 1)."""
SINGLE = {pipeline.TABLE: "TABLE", pipeline.PREFETCH: "PREFETCH", pipeline.STORED: "STORED",
          handoff.HANDOFF: "HANDOFF"}
PRODUCTS = ("MATMUL", "GMATMUL")


def cause(sem: int) -> str:
    """A semaphore's name in the pipeline's protocol (a rider's renumbered ones by number)."""
    for name, first in PAIRS.items():
        if sem in (first, first + 1):
            return name
    return SINGLE.get(sem, f"sem {sem}")


def stretches(binary: NpuBinary, result: SimResult) -> list[dict]:
    """Every idle stretch of the array before a product: its cycles, layer and the semaphore that released it."""
    program, start, end = binary.instructions, result.timeline.start, result.timeline.end
    layer_of = {}
    for debug in binary.debug:
        for i in range(debug.start, debug.stop):
            layer_of[i] = debug.name
    signals: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for i, instr in enumerate(program):
        if instr.signal_count:
            signals[instr.signal_sem].append((int(end[i]), i))
    for sem in signals:
        signals[sem].sort()

    def released(i: int) -> tuple[int, int] | None:
        """(end, index) of the last signal of i's semaphore ended by i's start."""
        ends = signals.get(program[i].wait_sem, [])
        k = bisect.bisect_right(ends, (int(start[i]), len(program))) - 1  # (a waiter starts as its releaser ends)
        return ends[k] if k >= 0 else None
    products = sorted((i for i, instr in enumerate(program) if instr.mnemonic in PRODUCTS), key=lambda i: start[i])
    out, last = [], 0
    for i in products:
        gap = int(start[i]) - last
        last = max(last, int(end[i]))
        if gap <= 0:
            continue
        waiting = [i]
        k = i - 1
        while k >= 0 and program[k].mnemonic == "CONFIG_MATMUL":
            waiting.append(k)
            k -= 1
        found = [(released(w), w) for w in waiting if program[w].wait_count]
        found = [(r, w) for r, w in found if r is not None]
        why = cause(program[max(found)[1]].wait_sem) if found else "in order"
        out.append({"layer": layer_of.get(i, "?"), "instruction": i, "cycles": gap, "cause": why})
    return out


def measure(model: str, batch: int, preset: str) -> dict:
    network = npu_roofline.load(model, batch)
    quantization = QuantizationConfig(collect_profile(network, calibration_random(network, 2)))
    npu = glowsdk.compile(network, "npu", quantization=quantization, config=preset, fallback=None)
    binary = npu.compiled.binary
    result = run_binary(binary, PRESETS[preset], network.random_inputs(5)).result
    busy = sum(int(result.timeline.end[i] - result.timeline.start[i])
               for i, instr in enumerate(binary.instructions) if instr.mnemonic in PRODUCTS)
    return {"model": model, "batch": batch, "config": preset, "cycles": result.cycles, "array_busy": busy,
            "bound_cycles": round(result.total_row().roofline_cycles), "stretches": stretches(binary, result)}


def report(row: dict, least: int, top: int) -> str:
    idle = row["cycles"] - row["array_busy"]
    lines = [f"{row['model']} batch {row['batch']} on {row['config']}: {row['cycles']:,} cycles, array busy "
             f"{row['array_busy']:,} ({row['array_busy'] / row['bound_cycles']:.3f}x the bound), idle {idle:,}"]
    by_cause = Counter()
    by_layer: dict[str, Counter] = defaultdict(Counter)
    for s in row["stretches"]:
        by_cause[s["cause"]] += s["cycles"]
        if s["cycles"] >= least:
            by_layer[s["layer"]][s["cause"]] += s["cycles"]
    lines += ["", "| cause | idle cycles |", "|---|---:|"]
    lines += [f"| {name} | {cycles:,} |" for name, cycles in by_cause.most_common()]
    lines += ["", f"| layer (stretches of {least}+ cycles) | idle cycles | by cause |", "|---|---:|---|"]
    ranked = sorted(by_layer.items(), key=lambda item: -sum(item[1].values()))[:top]
    lines += [f"| {name} | {sum(c.values()):,} | {', '.join(f'{k} {v:,}' for k, v in c.most_common())} |"
              for name, c in ranked]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="resnet50")
    parser.add_argument("--configs", default="server")
    parser.add_argument("--batches", default="1")
    parser.add_argument("--min", type=int, default=200, help="stretches shorter than this are left out of the "
                                                              "per-layer table (not the totals)")
    parser.add_argument("--top", type=int, default=25, help="layers listed (default 25)")
    parser.add_argument("--json", help="also write every stretch to this JSON file")
    args = parser.parse_args(argv)
    for p in args.configs.split(","):
        if p not in PRESETS:
            parser.error(f"--configs: unknown preset {p!r} (presets: {', '.join(PRESETS)})")
    jobs = [(m, int(b), p) for p in args.configs.split(",") for m in args.models.split(",")
            for b in args.batches.split(",")]
    rows = []
    for k, (model, batch, preset) in enumerate(jobs, start=1):
        print(f"[{k}/{len(jobs)}] {model} batch {batch} on {preset}", file=sys.stderr, flush=True)
        rows.append(measure(model, batch, preset))
        print(report(rows[-1], args.min, args.top) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
