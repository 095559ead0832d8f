"""Heterogeneous execution on models nobody tuned for: how each splits between a target and the host.

For every model in tests/models (PyTorch exports with seeded random weights, scripts/export_test_models.py),
compile for the target with the default fallback (the cpu), then report the partitions (on the target /
in all), the share of multiply-adds on the target, the compile seconds, and correctness against an
oracle glowsdk did not write:
  - a float target: the largest absolute difference from onnxruntime running the original model,
    over three seeded inputs;
  - the NPU (quantized on 4 random inputs): bit-exactness against the reference evaluator on the same
    quantized graph, and every NPU partition's binary once under checked simulation (races), with its
    simulated cycles.

    python bench/partitions.py --target macarray        # tests/mac_chip_plugin installed
    python bench/partitions.py --target npu [--models encoder_layer,lstm] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import glowsdk  # noqa: E402
from exported_models import ENCODER_LAYER, EXPORTED_MODELS, exported_model, model_inputs  # noqa: E402
from glowsdk.progress import Progress  # noqa: E402
from glowsdk.table import format_table  # noqa: E402
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile  # noqa: E402
from glowsdk.reference.evaluator import evaluate  # noqa: E402

MODELS = (*EXPORTED_MODELS, ENCODER_LAYER)


def measure(name: str, target: str) -> dict:
    network = glowsdk.load(exported_model(name))
    quantization = None
    if target == "npu":
        quantization = QuantizationConfig(collect_profile(network, calibration_random(network, 4)))
    start = time.perf_counter()
    compiled = glowsdk.compile(network, target, quantization=quantization).compiled
    seconds = time.perf_counter() - start
    parts = getattr(compiled, "partitions", None)
    row = {"model": name, "partitions": len(parts) if parts else 1,
           "on_target": len(compiled.device_partitions()) if parts else 1,
           "mac_share": compiled.target_macs / max(compiled.total_macs, 1) if parts else 1.0,
           "compile_s": seconds}
    if target == "npu":
        from sim.binding import run_binary

        feeds = model_inputs(name, seed=1)
        want, got = evaluate(compiled.function, feeds), compiled.execute(feeds)
        row["bit_exact"] = all(np.array_equal(got[k], v) for k, v in want.items())
        binaries = [p.compiled for p in compiled.device_partitions()] if parts else [compiled]
        runs = [run_binary(b.binary, b.config, {}, checked=True) for b in binaries]
        row["npu_cycles"] = sum(r.result.cycles for r in runs)
        row["checked"] = "pass"  # a race raises
        return row
    import onnxruntime as ort

    session = ort.InferenceSession(exported_model(name), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    error = 0.0
    for seed in (0, 1, 2):
        feeds = model_inputs(name, seed)
        got = compiled.execute(feeds)
        for output, value in zip(names, session.run(names, feeds)):
            error = max(error, float(np.abs(got[output] - value).max()))
    row["max_abs_error"] = error
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="npu")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    names = args.models.split(",")
    bar = Progress("models")
    rows = []
    for k, name in enumerate(names):
        rows.append(measure(name, args.target))
        bar(k + 1, len(names), name)
    bar.close()
    check = ["bit_exact", "checked", "npu_cycles"] if args.target == "npu" else ["max_abs_error"]
    table = [[r["model"], f"{r['partitions']} ({r['on_target']})", f"{100 * r['mac_share']:.1f}%",
              f"{r['compile_s']:.1f}", *(f"{r[c]:.1e}" if c == "max_abs_error" else
                                          f"{r[c]:,}" if c == "npu_cycles" else str(r[c]) for c in check)]
             for r in rows]
    print(f"target {args.target}, fallback cpu")
    print(format_table(["model", "partitions (on target)", "MACs on target", "compile s", *check], table))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"target": args.target, "rows": rows}, f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
