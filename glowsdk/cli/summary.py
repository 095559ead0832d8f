"""`glowsdk summary MODEL`: inputs and outputs, parameters, MACs and activations per layer and in
total, the op histogram, and what each installed target runs of it (glowsdk/summary.py)."""
from __future__ import annotations

import argparse
import json

from ..files import check_writable_file, write_text
from ..progress import progress
from ..table import format_bytes, format_count, format_table
from . import options

LEGEND = ("layer: the ONNX node (its name, or its first output's when it has none); MACs: multiply-adds "
          "of its convolutions and matrix products; output: the activation it writes")


def cmd_summary(args: argparse.Namespace) -> int:
    from ..backends.registry import Clash, available_backends, get_backend
    from ..errors import GlowError
    from ..quantization import QuantizationConfig, calibration_random, collect_profile
    from ..summary import summarize

    if args.json:
        check_writable_file(args.json, "--json")
    network = options.load_network(args)
    names = args.targets.split(",") if args.targets else sorted(
        n for n, e in available_backends().items() if not isinstance(e, Clash))
    backends = {}
    for name in progress(names, "loading backends", unit="backend"):
        try:
            backends[name] = get_backend(name)
        except GlowError as err:
            if args.targets:
                raise
            print(f"target {name}: not checked ({err})")

    def quantize(net):  # support only: a one-sample random profile gives the int8 graph its ranges
        return QuantizationConfig(collect_profile(net, calibration_random(net, 1)))

    summary = summarize(network, backends, quantize)
    print(f"model {network.source}")
    for role, values in (("input", summary.inputs), ("output", summary.outputs)):
        for name, type_ in values:
            print(f"  {role:<6} {name}: {type_}")
    print(f"  parameters  {summary.parameters:,} ({format_bytes(summary.parameter_bytes)})")
    print(f"  MACs        {summary.macs:,} ({format_count(summary.macs)})")
    print(f"  activations {format_bytes(summary.activation_bytes)} written by {len(summary.layers)} layers")
    print()
    rows = [[layer.name, layer.op_type, f"{layer.macs:,}" if layer.macs else "",
             "x".join(map(str, layer.output_shape)), f"{layer.activation_bytes:,}"]
            for layer in summary.layers[: args.layers]]
    rows.append(["(total)", "", f"{summary.macs:,}", "", f"{summary.activation_bytes:,}"])
    shown = "" if args.layers is None or args.layers >= len(summary.layers) else \
        f" (the first {args.layers} of {len(summary.layers)}; --layers N)"
    print(f"layers{shown}")
    print(format_table(["layer (ONNX node)", "op type", "MACs", "output shape", "output (B)"], rows, LEGEND))
    print()
    targets = [t.name for t in summary.targets]
    missing = {t.name: t.missing for t in summary.targets}
    hist = [[op, count, *(f"{count - missing[t].get(op, 0)}/{count}" for t in targets)]
            for op, count in summary.histogram.items()]
    print(format_table(["op type", "nodes", *(f"on {t}" for t in targets)], hist,
                       "on T: the nodes of that type target T runs (the rest would go to a fallback)"))
    for target in summary.targets:
        note = f" ({target.how})" if target.how else ""
        print(f"{target.name}: runs {target.supported} of {target.nodes} nodes{note}")
    if args.json:
        write_text(args.json, json.dumps(summary.to_json(), indent=1) + "\n", "--json")
        print(f"wrote {args.json}")
    return 0


def add_summary_args(p: argparse.ArgumentParser) -> None:
    options.add_model_args(p)
    p.add_argument("--targets", metavar="T[,T]", help="check support on these targets (default: every installed one)")
    p.add_argument("--layers", type=options.positive_count, metavar="N", help="show only the first N layers")
    p.add_argument("--json", metavar="FILE", help="also write the summary as JSON")
    p.set_defaults(func=cmd_summary)


SUBCOMMANDS = {"summary": add_summary_args}
"""The command's arguments and handler, added when it is the one run (main.COMMANDS)."""
