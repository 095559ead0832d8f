"""Train the digits CNN from scratch with glowsdk (issue 11's bar) and follow it to the NPU.

For each backend: seeded random weights, SGD with momentum on the training split
of glowsdk.zoo.digits, test accuracy and seconds per epoch; the trained weights
exported to ONNX and run in onnxruntime (same predictions?); then the exported
model quantized with a profile of the training split and run on the NPU backend
(the .npub binary in the simulator), whose accuracy should stay within 1 point.

    python bench/train_digits.py [--epochs 15] [--backends interpreter,cpu] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import onnxruntime as ort

import glowsdk
from glowsdk.api import read_model
from glowsdk.table import format_table
from glowsdk.quantization import QuantizationConfig, collect_profile
from glowsdk.training import Batches, SGDConfig, Trainer, export_onnx
from glowsdk.zoo import randomize_weights
from glowsdk.zoo.digits import digits_model_path, load_digits_split

SEED = 0
BATCH = 32
SGD = SGDConfig(learning_rate=0.05, momentum=0.9)


def accuracy(logits: np.ndarray, labels: np.ndarray) -> float:
    return 100.0 * float(np.mean(logits.argmax(1) == labels))


def train_on(backend: str, epochs: int, data: tuple) -> dict:
    x_train, y_train, x_test, y_test = data
    start_model = randomize_weights(read_model(digits_model_path())[0], SEED)
    network = glowsdk.load(start_model, input_shapes={"image": [BATCH, 1, 8, 8]})
    start = time.perf_counter()
    trainer = Trainer(network.function, "cross_entropy", SGD, backend=backend)
    compile_seconds = time.perf_counter() - start
    batches = Batches({"image": x_train}, y_train, BATCH, seed=SEED)
    seconds, losses = [], []
    for _ in range(epochs):
        start = time.perf_counter()
        losses.append(trainer.epoch(batches))
        seconds.append(time.perf_counter() - start)
    logits = trainer.predict({"image": x_test})
    weights = trainer.freeze()
    trained = export_onnx(start_model, weights)
    session = ort.InferenceSession(trained.SerializeToString(), providers=["CPUExecutionProvider"])
    ort_logits = session.run(["logits"], {"image": x_test})[0]
    return {"backend": backend, "epochs": epochs, "compile_seconds": compile_seconds,
            "seconds_per_epoch": float(np.median(seconds)), "losses": losses,
            "test_accuracy": accuracy(logits, y_test), "onnxruntime_accuracy": accuracy(ort_logits, y_test),
            "same_predictions_in_onnxruntime": bool(np.array_equal(logits.argmax(1), ort_logits.argmax(1))),
            "max_logit_difference": float(np.abs(logits - ort_logits).max()), "model": trained}


def on_npu(trained, data: tuple) -> float:
    """Test accuracy of the exported model quantized (profile of the training split) on the NPU."""
    x_train, _, x_test, y_test = data
    profile = collect_profile(glowsdk.load(trained, input_shapes={"image": [len(x_train), 1, 8, 8]}),
                              [{"image": x_train}], "interpreter")
    network = glowsdk.load(trained, input_shapes={"image": [len(x_test), 1, 8, 8]})
    compiled = glowsdk.compile(network, "npu", quantization=QuantizationConfig(profile))
    return accuracy(compiled.run({"image": x_test})["logits"], y_test)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--backends", default="interpreter,cpu")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    data = load_digits_split()
    rows, results = [], []
    for backend in args.backends.split(","):
        result = train_on(backend, args.epochs, data)
        start = time.perf_counter()
        result["npu_accuracy"] = on_npu(result.pop("model"), data)
        print(f"{backend}: NPU quantize + compile + simulate {time.perf_counter() - start:.1f}s", file=sys.stderr)
        results.append(result)
        rows.append([backend, str(args.epochs), f"{result['losses'][0]:.3f} -> {result['losses'][-1]:.4f}",
                     f"{result['seconds_per_epoch']:.2f}s", f"{result['test_accuracy']:.2f}%",
                     f"{result['onnxruntime_accuracy']:.2f}%",
                     "yes" if result["same_predictions_in_onnxruntime"] else "NO",
                     f"{result['npu_accuracy']:.2f}%"])
    print(f"digits CNN from scratch (seed {SEED}), batch {BATCH}, SGD lr {SGD.learning_rate} "
          f"momentum {SGD.momentum}, {len(data[1])} training / {len(data[3])} test images")
    print(format_table(["backend", "epochs", "loss", "s/epoch", "test top-1", "onnxruntime",
                        "same argmax", "npu int8"], rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
