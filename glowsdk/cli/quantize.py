"""The quantization commands: `glowsdk profile` records value ranges on calibration inputs (paper 4.2),
`glowsdk quantize-report` sets float and quantized side by side on held-out inputs (paper 4)."""
from __future__ import annotations

import argparse
import json

from ..errors import GlowError
from ..files import check_writable_file, load_npy, write_text
from ..progress import Progress
from ..table import format_table
from . import options


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


def cmd_profile(args: argparse.Namespace) -> int:
    """Profile a model on calibration inputs (paper 4.2) and write the profile JSON."""
    import time

    from ..quantization import (
        calibration_from_dir,
        calibration_random,
        collect_profile,
        save_profile,
    )

    check_writable_file(args.o, "-o")
    network = options.load_network(args)
    if args.calibration is not None:
        samples = calibration_from_dir(args.calibration, network)
    else:
        samples = calibration_random(network, args.calibration_random, args.seed)
    load_options = {"batch": args.batch, "random_weights": args.random_weights,
                    "input_shapes": {n: list(s) for n, s in map(options.parse_shape, args.input_shape)} or None}
    start = time.perf_counter()
    bar = Progress("profiling")
    profile = collect_profile(network, samples, args.target, lambda done, total: bar(done, total, "samples"),
                              model_info={k: v for k, v in load_options.items() if v is not None})
    bar.close()
    save_profile(profile, args.o)
    seconds = time.perf_counter() - start
    print(f"profiled {len(profile)} values of {network.source} on target {args.target} "
          f"over {len(samples)} samples ({samples.how}) in {seconds:.1f}s")
    rows = [[v.name, v.node, "x".join(map(str, v.shape)), f"{v.min:.6g}", f"{v.max:.6g}",
             v.nan + v.pos_inf + v.neg_inf or ""] for v in profile.widest(10) if v.min is not None]
    print("the widest ranges:")
    print(format_table(["value", "node", "shape", "min", "max", "nan/inf"], rows))
    print(f"wrote {args.o}")
    return 0


def add_profile_args(prof: argparse.ArgumentParser) -> None:
    options.add_model_args(prof)
    calib = prof.add_mutually_exclusive_group(required=True)
    calib.add_argument("--calibration", metavar="DIR",
                       help="a folder with one .npy per sample (one input) or one folder per sample of NAME.npy")
    calib.add_argument("--calibration-random", type=int, metavar="N", help="N samples of seeded random inputs")
    prof.add_argument("--seed", type=options.seed_number, default=0, help="seed for --calibration-random (default 0)")
    prof.add_argument("--target", default="interpreter", help="the backend to run the samples on")
    prof.add_argument("-o", metavar="FILE", required=True, help="write the profile JSON to FILE")
    prof.set_defaults(func=cmd_profile)


def add_report_args(rep: argparse.ArgumentParser) -> None:
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


SUBCOMMANDS = {"profile": add_profile_args, "quantize-report": add_report_args}
"""Each command's arguments and handler, added when it is the one run (main.COMMANDS)."""
