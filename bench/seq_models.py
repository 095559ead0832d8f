"""Issue 23's results table: the four sequence models on the NPU with no host fallback, int8 end to end.

For each of tests/models' bert_layer, decoder_layer, lstm_seq and gru_seq (scripts/export_seq_models.py: PyTorch,
seeded random weights): quantize with a profile of 64 seeded inputs (tests/seq_models.py: token ids over the
vocabulary, padding masks of 0 and -inf), compile for the NPU with `fallback=None` (a model that needs the host is
a row with its one-line error), simulate on 3 other seeded inputs in normal and checked mode, and report

* bit-exact: both runs' outputs equal the reference evaluator's on the quantized graph;
* cosine: the dequantized NPU output against the float model (glowsdk's interpreter), the lowest of the inputs;
* cycles, array utilisation (MACs / (cycles x array cells)), vector share (the vector engine's busy cycles over
  the run's), and the per-layer roofline bound (bound cycles and what bounds each layer, with `--layers`).

    python bench/seq_models.py [--config default] [--models bert_layer,...] [--layers] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Sequence

import numpy as np

import glowsdk
from glowsdk.errors import GlowError
from glowsdk.quantization import QuantizationConfig, collect_profile
from glowsdk.reference.evaluator import evaluate
from isa import PRESETS
from sim.binding import run_binary

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from seq_models import SEQ_MODELS, seq_inputs, seq_model  # noqa: E402

CALIBRATION_SEEDS = tuple(range(10, 74))
TEST_SEEDS = (0, 1, 2)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def measure(name: str, preset: str) -> dict:
    row: dict = {"model": name, "config": preset}
    network = glowsdk.load(seq_model(name))
    try:
        profile = collect_profile(network, [seq_inputs(name, s) for s in CALIBRATION_SEEDS])
        npu = glowsdk.compile(network, "npu", quantization=QuantizationConfig(profile), config=preset, fallback=None)
    except GlowError as err:
        return {**row, "error": str(err).splitlines()[0]}
    floats = glowsdk.compile(network, "interpreter")
    binary, config = npu.compiled.binary, PRESETS[preset]
    exact, checked, cosines, run = True, True, [], None
    for seed in TEST_SEEDS:
        feeds = seq_inputs(name, seed)
        want = evaluate(npu.compiled.function, feeds)
        run = run_binary(binary, config, feeds)
        again = run_binary(binary, config, feeds, checked=True)
        checked &= again.result.checked and again.result.cycles == run.result.cycles
        exact &= all(np.array_equal(r.outputs[k], v) for r in (run, again) for k, v in want.items())
        reference = floats.run(feeds)
        cosines += [_cosine(run.outputs[k], reference[k]) for k in want]
    result, total = run.result, run.result.total_row()
    vector = next(u for u in result.unit_rows() if u.unit.startswith("vector"))
    layers = result.layer_rows()
    row.update(cycles=result.cycles, utilisation=round(total.utilisation, 4),
               vector_share=round(vector.busy / result.cycles, 4), bound_cycles=round(total.roofline_cycles),
               ratio=round(total.ratio, 3), bit_exact=exact, checked=checked, cosine=round(min(cosines), 5),
               macs=total.macs, instructions=len(binary.instructions),
               layers=[{"layer": r.name, "kind": r.kind, "cycles": r.cycles, "bound": r.bound,
                        "bound_cycles": round(r.roofline_cycles), "utilisation": round(r.utilisation, 4)}
                       for r in layers])
    return row


def table(rows: Sequence[dict]) -> str:
    lines = ["| model | config | cycles | array util | vector share | bound cycles | cycles / bound | cosine | "
             "bit-exact | checked |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['config']} | error: {r['error']} | | | | | | | |")
            continue
        lines.append(f"| {r['model']} | {r['config']} | {r['cycles']:,} | {r['utilisation']:.1%} | "
                     f"{r['vector_share']:.1%} | {r['bound_cycles']:,} | {r['ratio']} | {r['cosine']:.4f} | "
                     f"{r['bit_exact']} | {r['checked']} |")
    return "\n".join(lines)


def layer_table(row: dict) -> str:
    lines = [f"{row['model']}:", "| layer | kind | cycles | bound cycles | bound by | array util |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['layer']} | {r['kind']} | {r['cycles']:,} | {r['bound_cycles']:,} | {r['bound']} | "
              f"{r['utilisation']:.1%} |" for r in row.get("layers", [])]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="default", choices=sorted(PRESETS))
    parser.add_argument("--models", default=",".join(SEQ_MODELS))
    parser.add_argument("--layers", action="store_true", help="also print each model's per-layer table")
    parser.add_argument("--json", help="write every figure (and each layer's) to this JSON file")
    args = parser.parse_args(argv)
    rows = []
    for name in args.models.split(","):
        print(f"{name}: measuring", file=sys.stderr, flush=True)
        rows.append(measure(name, args.config))
    print(table(rows))
    if args.layers:
        for row in rows:
            print("\n" + layer_table(row))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
