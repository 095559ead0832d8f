"""Issue 8's correctness table: the nine light models on the NPU, bit-exact with the reference evaluator.

For each model (seeded random weights 0, quantized with a profile of 2 seeded random inputs, one
preset): compile for the NPU, run the binary in the simulator, and compare its outputs with the
reference evaluator (the interpreter's kernels) on the quantized graph the binary was compiled from.
Prints per model the compile and simulation seconds, the simulated cycles and whether the outputs are
bit-identical; a model that fails to compile gets its one-line error instead.

    python bench/npu_models.py [--models squeezenet,shufflenet] [--config default] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Sequence

import numpy as np

import glowsdk
from glowsdk.errors import GlowError
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile
from glowsdk.reference.evaluator import evaluate
from isa import PRESETS
from sim.binding import run_binary

MODELS = ("resnet50", "vgg19", "squeezenet", "inception_v1", "inception_v2", "densenet121", "shufflenet",
          "bvlc_alexnet", "zfnet512")
"""The nine bundled light models."""


def measure(name: str, preset: str) -> dict:
    network = glowsdk.load(name, random_weights=0)
    profile = collect_profile(network, calibration_random(network, 2))
    began = time.perf_counter()
    try:
        npu = glowsdk.compile(network, "npu", quantization=QuantizationConfig(profile), config=preset)
    except GlowError as error:
        return {"model": name, "config": preset, "error": str(error)}
    compile_seconds = time.perf_counter() - began
    print(f"{name}: compiled in {compile_seconds:.1f} s; simulating", file=sys.stderr, flush=True)
    inputs = network.random_inputs(5)
    run = run_binary(npu.compiled.binary, PRESETS[preset], inputs)
    want = evaluate(npu.compiled.function, inputs)
    exact = all(np.array_equal(run.outputs[k], v) for k, v in want.items())
    return {"model": name, "config": preset, "compile_seconds": round(compile_seconds, 2),
            "simulate_seconds": round(run.result.wall_seconds, 2), "cycles": run.result.cycles,
            "layers": len(npu.compiled.layers), "instructions": len(npu.compiled.binary.instructions),
            "bit_exact": exact}


def table(rows: Sequence[dict]) -> str:
    lines = ["| model | config | compile s | simulate s | cycles | layers | bit-exact |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['config']} | - | - | - | - | error: {r['error']} |")
        else:
            lines.append(f"| {r['model']} | {r['config']} | {r['compile_seconds']} | {r['simulate_seconds']} | "
                         f"{r['cycles']:,} | {r['layers']} | {'yes' if r['bit_exact'] else 'NO'} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated bundled model names")
    parser.add_argument("--config", default="default", choices=sorted(PRESETS), help="architecture preset")
    parser.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    rows = [measure(name, args.config) for name in args.models.split(",")]
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0 if all(r.get("bit_exact") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
