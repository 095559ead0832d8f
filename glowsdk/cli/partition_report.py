"""`glowsdk partition`: how a model splits between a target and its fallback, and the table other commands print."""
from __future__ import annotations

import argparse
import json

from ..files import check_writable_file, write_text
from . import flags, options

LEGEND = ("MACs: multiply-adds of the convolutions and matrix products; border: bytes the partition "
          "receives and sends; est.: the cost model's time (vendor_guide/partial_chips.md)")


def _short(text: str, width: int = 44) -> str:
    """A model node for the table: the end of a long name is the part that tells nodes apart."""
    return text if len(text) <= width else "..." + text[-(width - 3):]


def format_partitions(compiled) -> str:
    """The partition table of a PartitionedFunction, with the share of MACs on the target."""
    from ..table import format_table

    rows = []
    for row in compiled.describe():
        shown = [_short(name) for name in row["first_model_nodes"][:2]]
        first = ", ".join(shown)
        more = row["model_nodes"] - len(shown)
        rows.append([row["partition"], row["device"], row["backend"], row["nodes"],
                     first + (f" +{more}" if more > 0 else ""), f"{row['macs']:,}", f"{100 * row['mac_share']:.1f}",
                     f"{row['border_bytes']:,}", f"{row['estimated_seconds'] * 1e6:.1f}"])
    share = compiled.target_macs / max(compiled.total_macs, 1)
    devices = len(compiled.device_partitions())
    head = (f"partitions: {len(compiled.partitions)} ({devices} on {compiled.target}, "
            f"{len(compiled.partitions) - devices} on the host); {100 * share:.1f}% of the MACs on {compiled.target}"
            + (f"; {compiled.moved_back} group(s) of nodes {compiled.target} runs stay on the host (not worth "
               f"the transfer)" if compiled.moved_back else ""))
    table = format_table(["#", "device", "backend", "nodes", "model nodes", "MACs", "MAC %", "border bytes",
                          "est. us"], rows)
    return f"{head}\n{table}\n{LEGEND}"


def cmd_partition(args: argparse.Namespace) -> int:
    from .. import api
    from ..compiler.partition.hetero import PartitionedFunction

    if args.json:
        check_writable_file(args.json, "--json")
    flags.check_target_flags(args)
    extra = flags.backend_options(args)  # a flag of another target fails before the model loads
    network = options.load_network(args)
    quantization = options.quantization_config(args, network)
    compiled = api.compile(network, args.target, quantization=quantization, fallback=args.fallback,
                           **extra).compiled
    if not isinstance(compiled, PartitionedFunction):
        print(f"{network.source}: target {args.target} runs the whole model (one partition)")
        rows: list[dict] = []
    else:
        print(format_partitions(compiled))
        rows = compiled.describe()
    if args.json:
        write_text(args.json, json.dumps({"model": network.source, "target": args.target,
                                          "fallback": args.fallback, "partitions": rows}, indent=1), "--json")
        print(f"wrote {args.json}")
    return 0


def add_partition_args(part: argparse.ArgumentParser) -> None:
    options.add_model_args(part)
    options.add_quantization_args(part)
    part.add_argument("--target", default="interpreter")
    part.add_argument("--fallback", default="cpu", metavar="DEVICE",
                      help="the backend for what the target cannot run (default cpu; interpreter)")
    part.add_argument("--backend-opt", action="append", default=[], metavar="KEY=VALUE",
                      help="a backend-specific option, checked by the backend")
    part.add_argument("--json", metavar="FILE", help="also write the partitions as JSON")
    flags.add_cache_arg(part)
    flags.add_target_flags(part, "partition")
    part.set_defaults(func=cmd_partition)


SUBCOMMANDS = {"partition": add_partition_args}
"""The command's arguments and handler, added when it is the one run (main.COMMANDS)."""
