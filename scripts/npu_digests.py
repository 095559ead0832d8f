"""SHA-256 of the NPU binaries of a fixed model set: the check that a refactor changed no byte.

Each model is loaded with seeded random weights (the bundled ones with `random_weights=0`, the
sequence models as `scripts/export_seq_models.py` wrote them into tests/models), quantized with a
profile of 2 seeded random inputs and compiled for the NPU on the given presets. Run it before and
after a change and diff the two outputs:

    python scripts/npu_digests.py > before.txt   # on the old tree
    python scripts/npu_digests.py > after.txt    # on the new tree
    diff before.txt after.txt
"""
from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import glowsdk
from glowsdk.errors import GlowError
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile
from isa.container import pack_npub

MODELS = ("resnet50", "squeezenet", "shufflenet", "inception_v1", "bert_layer", "decoder_layer", "lstm_seq",
          "gru_seq", "mobilenet_v2_mini")
SEQ_DIR = Path(__file__).resolve().parent.parent / "tests" / "models"


def load(name: str) -> glowsdk.Network:
    path = SEQ_DIR / f"{name}.onnx"
    return glowsdk.load(str(path)) if path.exists() else glowsdk.load(name, random_weights=0)


def digest(name: str, preset: str) -> str:
    try:
        network = load(name)
        quantization = QuantizationConfig(collect_profile(network, calibration_random(network, 2)))
        npu = glowsdk.compile(network, "npu", quantization=quantization, config=preset, fallback=None)
    except GlowError as err:
        return "error: " + str(err).splitlines()[0]
    return hashlib.sha256(pack_npub(npu.compiled.binary)).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--configs", default="default,edge")
    args = parser.parse_args()
    for preset in args.configs.split(","):
        for name in args.models.split(","):
            print(f"{name} {preset} {digest(name, preset)}", flush=True)
            print(f"done {name} {preset}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
