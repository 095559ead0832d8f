"""The digits CNN's test-split accuracy in float and in int8 (issue 5's real-data bar).

Calibrates on scikit-learn's digits training split (the fixed split of
glowsdk.zoo.digits), evaluates on the test split, for every schema and
calibration method; prints a table and optionally writes JSON.

    python bench/digits_quantization.py [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

import glowsdk
from glowsdk.table import format_table
from glowsdk.quantization import CALIBRATIONS, SCHEMAS, QuantizationConfig, collect_profile
from glowsdk.zoo.digits import digits_model_path, load_digits_split


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="interpreter")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    x_train, _, x_test, y_test = load_digits_split()
    network = glowsdk.load(digits_model_path(), input_shapes={"image": [len(x_test), 1, 8, 8]})
    start = time.perf_counter()
    train = glowsdk.load(digits_model_path(), input_shapes={"image": [len(x_train), 1, 8, 8]})
    # A profile names the values of the interpreter's lowering, which every target's quantizer reads;
    # the value names do not depend on the batch.
    profile = collect_profile(train, [{"image": x_train}], "interpreter")
    print(f"profiled on {len(x_train)} training images in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    float_target = "interpreter" if glowsdk.backends.get_backend(args.target).requires_quantization else args.target
    float_acc = 100.0 * float(np.mean(glowsdk.compile(network, float_target).run({"image": x_test})["logits"]
                                      .argmax(1) == y_test))
    rows, results = [], []
    for schema in SCHEMAS:
        for method in CALIBRATIONS:
            config = QuantizationConfig(profile, schema=schema, calibration=method)
            logits = glowsdk.compile(network, args.target, quantization=config).run({"image": x_test})["logits"]
            acc = 100.0 * float(np.mean(logits.argmax(1) == y_test))
            results.append({"schema": schema, "calibration": method, "int8_accuracy": acc})
            rows.append([schema, method, f"{float_acc:.2f}%", f"{acc:.2f}%", f"{acc - float_acc:+.2f}"])
    print(f"digits CNN, {len(y_test)} test images, target {args.target}")
    print(format_table(["schema", "calibration", "float top-1", "int8 top-1", "points"], rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"float_accuracy": float_acc, "test_images": len(y_test), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
