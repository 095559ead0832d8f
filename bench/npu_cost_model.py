"""The NPU tiler's cost model against the simulator, per convolution/matrix layer.

For each model (seeded random weights, a profile of 2 seeded random inputs): compile for the NPU,
simulate once on seeded random inputs (the binary is checked against the reference evaluator on
the quantized graph, bit for bit), and compare, for every convolution/matrix layer, the cycles the
tiler's cost model expected for the tiling it chose (`Tiling.cycles` x batch) with the simulated
cycles of that layer. The error is (expected - simulated) / simulated: negative under-predicts.
Reports the distribution per model and over all layers (mean, mean |error|, worst, share within
+-5%), and the JSON has every layer.

    python bench/npu_cost_model.py [--models resnet50,...|bundled|untuned] [--config default] [--json out.json]

`bundled` is every bundled model, `untuned` every model of the untuned set (bench/untuned.py); a
model that does not compile for the NPU is listed with its one-line error.
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
from glowsdk.backends.npu.report import report_rows
from glowsdk.errors import GlowError
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile
from glowsdk.reference.evaluator import evaluate
from glowsdk.zoo.bundled import BUNDLED, is_bundled
from isa import PRESETS
from sim.binding import run_binary

TOLERANCE = 0.05
"""Issue 21: the cost model within +-5% of the simulated cycles of each layer."""


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load(name: str) -> glowsdk.Network:
    if is_bundled(name):
        return glowsdk.load(name, random_weights=0)
    return glowsdk.load(untuned.ensure([name])[name]["path"])


def measure(name: str, preset: str) -> dict:
    """Every convolution/matrix layer's expected and simulated cycles, or the model's error."""
    began = time.perf_counter()
    try:
        network = load(name)
        quantization = QuantizationConfig(collect_profile(network, calibration_random(network, 2)))
        npu = glowsdk.compile(network, "npu", quantization=quantization, config=preset, fallback=None)
        inputs = network.random_inputs(5)
        run = run_binary(npu.compiled.binary, PRESETS[preset], inputs, checked=True)
    except GlowError as err:
        progress(f"{name}: {err}")
        return {"model": name, "error": str(err).splitlines()[0]}
    want = evaluate(npu.compiled.function, inputs)
    exact = all(np.array_equal(run.outputs[k], v) for k, v in want.items())
    layers = [{"layer": r.layer, "kind": r.kind, "expected": round(r.expected_cycles), "simulated": r.cycles,
               "error": (r.expected_cycles - r.cycles) / r.cycles}
              for r in report_rows(npu.compiled, run.result) if r.expected_cycles is not None and r.cycles]
    progress(f"{name}: {len(layers)} layers in {time.perf_counter() - began:.0f} s")
    return {"model": name, "bit_exact": exact, "layers": layers, **stats([x["error"] for x in layers])}


def stats(errors: Sequence[float]) -> dict:
    e = np.array(errors, float)
    if not len(e):
        return {"count": 0}
    return {"count": len(e), "mean": float(e.mean()), "mean_abs": float(np.abs(e).mean()),
            "worst": float(e[np.argmax(np.abs(e))]), "within": float((np.abs(e) <= TOLERANCE).mean())}


def table(rows: Sequence[dict]) -> str:
    lines = ["| model | layers | mean error | mean abs error | worst | within +-5% | bit-exact |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | error: {r['error']} | | | | | |")
        elif r["count"]:
            lines.append(f"| {r['model']} | {r['count']} | {r['mean']:+.1%} | {r['mean_abs']:.1%} | "
                         f"{r['worst']:+.1%} | {r['within']:.0%} | {r.get('bit_exact', '')} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="bundled,untuned")
    parser.add_argument("--config", default="default", choices=sorted(PRESETS))
    parser.add_argument("--json", help="also write every layer's figures to this JSON file")
    args = parser.parse_args(argv)
    names: list[str] = []
    for item in args.models.split(","):
        names += list(BUNDLED) if item == "bundled" else untuned.names() if item == "untuned" else [item]
    rows = []
    for k, name in enumerate(names, start=1):
        progress(f"[{k}/{len(names)}] {name}")
        rows.append(measure(name, args.config))
    everything = [x["error"] for r in rows for x in r.get("layers", [])]
    print(table([*rows, {"model": "all", **stats(everything)}]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": args.config, "models": rows, "all": stats(everything)}, f, indent=1)


if __name__ == "__main__":
    main()
