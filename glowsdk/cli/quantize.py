"""`glowsdk quantize-report`: float and quantized side by side on held-out inputs (paper 4)."""
from __future__ import annotations

import argparse
import json

from ..errors import GlowError
from ..files import check_writable_file, load_npy, write_text
from . import options
from ..progress import Progress


def cmd_quantize_report(args: argparse.Namespace) -> int:
    """Compile the model twice (float, quantized), run both on the same samples, compare the outputs."""
    from .. import api
    from ..quantization import calibration_from_dir, calibration_random
    from ..quantization.accuracy import compare_outputs

    if args.json:
        check_writable_file(args.json, "--json")
    labels = load_npy(args.labels, "--labels: ").reshape(-1) if args.labels else None
    network = options.load_network(args)
    quantization = options.quantization_config(args, network)
    samples = calibration_from_dir(args.inputs, network) if args.inputs else \
        calibration_random(network, args.random, args.seed)
    float_run = api.compile(network, args.target)
    quantized_run = api.compile(network, args.target, quantization=quantization)
    reference, quantized = [], []
    bar = Progress("comparing")
    for sample in samples:
        reference.append(float_run.run(sample))
        quantized.append(quantized_run.run(sample))
        bar(len(reference), len(samples), "samples")
    bar.close()
    try:
        report = compare_outputs(reference, quantized, labels)
    except ValueError as err:
        raise GlowError(f"--labels: {err}" if labels is not None else str(err)) from None
    summary = quantized_run.compiled.quantization_report.summary()
    per_channel = ", per-channel weights" if quantization.per_channel else ""
    print(f"{network.source} on target {args.target}: float against int8 ({quantization.schema}, "
          f"{quantization.calibration}{per_channel}) over {len(samples)} samples ({samples.how})")
    print(summary)
    print(report.table())
    if args.json:
        payload = {"model": network.source, "target": args.target, "samples": samples.describe(),
                   "quantization": {**quantization.describe(), **quantized_run.compiled.quantization_report.to_json()},
                   "accuracy": report.to_json()}
        write_text(args.json, json.dumps(payload, indent=1) + "\n", "--json")
        print(f"wrote {args.json}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the quantize-report command to the CLI."""
    rep = sub.add_parser("quantize-report", help="compare a quantized model with float on held-out inputs")
    options.add_model_args(rep)
    options.add_quantization_args(rep, required=True)
    rep.add_argument("--target", default="interpreter")
    held_out = rep.add_mutually_exclusive_group()
    held_out.add_argument("--inputs", metavar="DIR", help="held-out samples, laid out as for --calibration")
    held_out.add_argument("--random", type=options.positive_count, default=32, metavar="N",
                          help="N seeded random samples (default 32)")
    rep.add_argument("--seed", type=options.seed_number, default=1,
                     help="seed of the random samples (default 1; profiles default to 0, so they differ)")
    rep.add_argument("--labels", metavar="FILE.npy", help="one class per classifier row: adds top-1 accuracy")
    rep.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    rep.set_defaults(func=cmd_quantize_report)
