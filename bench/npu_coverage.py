"""Issue 21's coverage table: which models of the untuned set (scripts/export_bench_models.py) the NPU runs whole.

For each model: quantize it with a profile of 8 seeded random inputs (what `glowsdk compile --target npu`
does without `--load-profile`) and compile it for the NPU with no fallback device, as `glowsdk compile MODEL
--target npu --fallback none` does. A model that compiles is one binary with no host partition; one that
does not is a row with the compiler's one-line refusal, which names the ops still float and the device
limits of the model nodes that keep them there. Cycles, the roofline bound, checked simulation and
bit-exactness are bench/npu_roofline.py's (run it with `--models` on the models that compile).

    python bench/npu_coverage.py [--models mobilenet_v3_small,...] [--config default] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Sequence

import glowsdk
from glowsdk.errors import GlowError
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile

import untuned

CALIBRATION = 8
"""Random calibration inputs, as the CLI draws them without a profile."""


def measure(name: str, record: dict, config: str) -> dict:
    network = glowsdk.load(record["path"])
    began = time.perf_counter()
    try:
        profile = collect_profile(network, calibration_random(network, CALIBRATION))
        npu = glowsdk.compile(network, "npu", quantization=QuantizationConfig(profile), fallback=None,
                              config=config)
    except GlowError as error:
        return {"model": name, "whole": False, "seconds": round(time.perf_counter() - began, 1),
                "refusal": str(error)}
    kinds: dict[str, int] = {}
    for layer in npu.compiled.layers:
        kinds[layer.kind] = kinds.get(layer.kind, 0) + 1
    return {"model": name, "whole": True, "seconds": round(time.perf_counter() - began, 1),
            "layers": len(npu.compiled.layers), "instructions": len(npu.compiled.binary.instructions),
            "layer_kinds": kinds}


def table(rows: Sequence[dict]) -> str:
    lines = ["| model | whole on the NPU | layers | compile s | what stays on the host |", "|---|---|---|---|---|"]
    for r in rows:
        if r["whole"]:
            lines.append(f"| {r['model']} | yes | {r['layers']} | {r['seconds']} | - |")
        else:
            lines.append(f"| {r['model']} | no | - | {r['seconds']} | {r['refusal'][:400]} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated names of the untuned set (default: all of it)")
    parser.add_argument("--config", default="default", help="architecture preset or file")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    names = args.models.split(",") if args.models else None
    rows = []
    for name, record in untuned.ensure(names).items():
        print(f"{name}: compiling", file=sys.stderr, flush=True)
        rows.append(measure(name, record, args.config))
    print(table(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
