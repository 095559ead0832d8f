"""The reference-NPU commands: `glowsdk disasm` and `glowsdk simulate`."""
from __future__ import annotations

import argparse
import json
import sys

from ..errors import GlowError
from ..files import check_writable_file, check_writable_folder, write_arrays
from . import options


def cmd_disasm(args: argparse.Namespace) -> int:
    """Print a binary's header, tables and instructions (validated first: a bad file is one line)."""
    from isa.config import resolve_config
    from isa.container import read_npub
    from isa.npub_print import format_npub, npub_json

    binary = read_npub(args.file, config=resolve_config(args.config) if args.config else None)
    print(json.dumps(npub_json(binary, args.file), indent=1) if args.json else format_npub(binary, args.file))
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    """Run a binary on the simulator; every destination is checked before the run."""
    from sim.binding import load_binary, run_binary
    from sim.report import REPORTS
    from sim.trace import write_trace

    if args.output:
        check_writable_folder(args.output, "--output")
    if args.trace:
        check_writable_file(args.trace, "--trace")
    binary, config = load_binary(args.file, args.config)
    feeds = dict(options.load_input(s) for s in args.input)
    run = run_binary(binary, config, feeds, checked=args.checked, ideal_dram=args.ideal_dram, seed=args.seed)
    for name in run.generated:
        print(f"input {name}: random, seed {args.seed}", file=sys.stderr)
    if args.trace:
        try:
            write_trace(run.result, args.trace)
        except OSError as err:
            raise GlowError(f"--trace {args.trace}: cannot write ({err.strerror or err})") from None
        print(f"wrote {args.trace}", file=sys.stderr)
    if args.output:
        write_arrays(args.output, run.outputs, "--output")
        print(f"wrote {len(run.outputs)} output(s) to {args.output}", file=sys.stderr)
    print(REPORTS[args.report](run.result), end="" if args.report == "csv" else "\n")
    return 0


def compile_report(compiled, target: str) -> str:
    """`compile --report`: the NPU binary simulated once on seeded random inputs, layer by layer."""
    from ..backends.npu.backend import NpuFunction
    from ..backends.npu.report import format_report
    from sim.binding import run_binary

    if not isinstance(compiled, NpuFunction):
        raise GlowError(f"--report: target {target} does not compile to NPU layers (use --target npu)")
    return format_report(compiled, run_binary(compiled.binary, compiled.config, {}).result)


def register(sub: argparse._SubParsersAction) -> None:
    """Add the NPU subcommands to the `glowsdk` parser."""
    dis = sub.add_parser("disasm", help="print an NPU binary (.npub): header, tables, instructions as assembly")
    dis.add_argument("file", help="an .npub file")
    dis.add_argument("--json", action="store_true", help="print JSON instead of text")
    dis.add_argument("--config", metavar="PRESET|FILE",
                     help="also check the binary was built for, and runs on, this architecture configuration")
    dis.set_defaults(func=cmd_disasm)

    simu = sub.add_parser("simulate", help="run an NPU binary (.npub) on the cycle simulator and report its timing")
    simu.add_argument("file", help="an .npub file")
    simu.add_argument("--input", action="append", default=[], metavar="NAME=file.npy",
                      help="an input (floats are quantized per the tensor table); missing ones are random")
    simu.add_argument("--seed", type=options.seed_number, default=0, help="seed for inputs not given (default 0)")
    simu.add_argument("--output", metavar="DIR", help="write one NAME.npy per output (dequantized) into DIR")
    simu.add_argument("--config", metavar="PRESET|FILE",
                      help="the machine (default: the preset the binary was built for); must match the binary")
    simu.add_argument("--report", choices=["text", "json", "csv"], default="text",
                      help="summary, units and layers (text), everything (json) or the layer table (csv)")
    simu.add_argument("--trace", metavar="FILE", help="write a Chrome-trace JSON (opens in Perfetto)")
    simu.add_argument("--checked", action="store_true", help="also detect races between engines")
    simu.add_argument("--ideal-dram", action="store_true",
                      help="DRAM without latency or bandwidth limit (every LOAD/STORE takes 1 cycle)")
    simu.set_defaults(func=cmd_simulate)
