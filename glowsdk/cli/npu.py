"""The reference-NPU binary commands: `glowsdk disasm` and `glowsdk simulate`."""
from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from ..errors import GlowError
from ..files import check_writable_file, check_writable_folder, write_arrays, write_text
from ..progress import Progress, progress
from . import options

if TYPE_CHECKING:
    from sim.energy import EnergyTable


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

    from ..compiler.partition.package import is_package

    if args.output:
        check_writable_folder(args.output, "--output")
    if args.trace:
        check_writable_file(args.trace, "--trace")
    if args.o:
        check_writable_file(args.o, "-o")
    if args.report == "html":
        from sim.html_report import require_plotting

        if not args.o:
            raise GlowError("--report html writes a page: give its file with -o FILE")
        require_plotting()
    energy = _energy_table(args)
    if is_package(args.file):
        return simulate_package(args, energy)
    with Progress("reading", None, "") as bar:
        bar.label(args.file)
        binary, config = load_binary(args.file, args.config)
    feeds = dict(options.load_input(s) for s in args.input)
    with Progress("simulating", len(binary.instructions), "instr") as bar:
        run = run_binary(binary, config, feeds, checked=args.checked, ideal_dram=args.ideal_dram, seed=args.seed,
                         progress=bar, array_model=args.array_model)
    if energy is not None:
        run.result.energy_table = energy
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
    if args.report == "html":
        from sim.html_report import format_html, relative_link

        trace = relative_link(args.trace, args.o) if args.trace else None
        with Progress("drawing the report", None, "") as bar:  # matplotlib's import and plots take seconds
            bar.label(args.o)
            page = format_html(run.result, f"{args.file}: NPU simulation", trace)
        write_text(args.o, page, "-o")
        print(f"wrote {args.o}")
        return 0
    text = REPORTS[args.report](run.result) + ("" if args.report == "csv" else "\n")
    if args.o:
        write_text(args.o, text, "-o")
        print(f"wrote {args.o}")
    else:
        print(text, end="")
    return 0


def _energy_table(args: argparse.Namespace) -> EnergyTable | None:
    """The energy/area table `--energy-table` names (read before any simulation), or None for the default."""
    if not args.energy_table:
        return None
    from sim.energy import load_energy_table

    return load_energy_table(args.energy_table)


def simulate_package(args: argparse.Namespace, energy: EnergyTable | None = None) -> int:
    """A partitioned model (compile --target npu with fallback): NPU partitions on the simulator, host
    partitions on the host backend, in order; a table of NPU cycles, host time and transfer bytes."""
    import time

    from sim.binding import load_binary, run_binary
    from sim.report import REPORTS
    from sim.trace import write_trace

    from .. import zoo
    from ..api import fallback_backends
    from ..compiler.backend import TensorInfo
    from ..compiler.partition.package import read_package
    from ..compiler.pipeline import compile_host_part
    from ..table import format_table

    if args.report in ("csv", "html"):
        raise GlowError(f"{args.file}: a partitioned model has no single layer table: use --report text or json")
    if args.o:
        raise GlowError(f"-o: the report of a partitioned model ({args.file}) is printed; redirect it instead")
    package = read_package(args.file)
    if args.trace and sum(p.device != "host" for p in package.parts) > 1:
        raise GlowError(f"--trace: {args.file} has several NPU partitions; one trace per partition is not "
                        f"supported yet")
    feeds = dict(options.load_input(s) for s in args.input)
    unknown = sorted(set(feeds) - set(package.inputs))
    if unknown:
        raise GlowError(f"--input {unknown[0]}: the model has no such input (inputs: {', '.join(package.inputs)})")
    generated = zoo.random_inputs([TensorInfo(n, t) for n, t in package.inputs.items() if n not in feeds], args.seed)
    for name in generated:
        print(f"input {name}: random, seed {args.seed}", file=sys.stderr)
    values = {**generated, **feeds}
    hosts = fallback_backends(package.fallback)
    rows, reports, npu_seconds, host_seconds, moved = [], [], 0.0, 0.0, 0
    for part in progress(package.parts, "partitions", unit="partition", label=lambda p: p.device):
        inputs = {name: values[name] for name in part.inputs}
        moved += sum(int(values[name].nbytes) for name in part.inputs)
        if part.device == "host":
            compiled, backend = compile_host_part(part.function, hosts)
            start = time.perf_counter()
            values.update(compiled.execute(inputs))
            seconds = time.perf_counter() - start
            host_seconds += seconds
            rows.append([part.index, "host", backend, "", f"{seconds * 1e3:.3f}", f"{part.macs:,}"])
        else:
            try:
                binary, config = load_binary(part.payload, args.config)
            except GlowError as err:
                raise GlowError(f"{args.file}: partition {part.index}: {err}") from None
            with Progress(f"simulating partition {part.index}", len(binary.instructions), "instr") as bar:
                run = run_binary(binary, config, inputs, checked=args.checked, ideal_dram=args.ideal_dram,
                                 seed=args.seed, progress=bar, array_model=args.array_model)
            if energy is not None:
                run.result.energy_table = energy
            values.update(run.outputs)
            npu_seconds += run.result.seconds
            reports.append((part.index, run.result))
            rows.append([part.index, "npu", config.name, f"{run.result.cycles:,}", f"{run.result.seconds * 1e3:.3f}",
                         f"{part.macs:,}"])
    outputs = {name: values[name] for name in package.outputs}
    if args.trace:
        write_trace(reports[0][1], args.trace)
        print(f"wrote {args.trace}", file=sys.stderr)
    if args.output:
        write_arrays(args.output, outputs, "--output")
        print(f"wrote {len(outputs)} output(s) to {args.output}", file=sys.stderr)
    if args.report == "json":
        print(json.dumps({"partitions": [dict(zip(("partition", "device", "backend", "cycles", "ms", "macs"), r))
                                         for r in rows],
                          "npu_seconds": npu_seconds, "host_seconds": host_seconds, "transfer_bytes": moved,
                          "npu_reports": {i: json.loads(REPORTS["json"](r)) for i, r in reports}}, indent=1))
        return 0
    print(f"partitioned model {args.file}: {len(package.parts)} partitions, "
          f"{sum(p.device != 'host' for p in package.parts)} on the NPU, the rest on the host ({package.fallback})")
    print(format_table(["#", "device", "runs on", "NPU cycles", "time ms", "MACs"], rows))
    print(f"NPU {npu_seconds * 1e3:.4g} ms (simulated) + host {host_seconds * 1e3:.4g} ms (measured) = "
          f"{(npu_seconds + host_seconds) * 1e3:.4g} ms; {moved:,} bytes handed between partitions and inputs")
    for index, result in reports:
        print(f"\n== NPU partition {index} ==\n{REPORTS['text'](result)}")
    return 0


def add_disasm_args(dis: argparse.ArgumentParser) -> None:
    dis.add_argument("file", help="an .npub file")
    dis.add_argument("--json", action="store_true", help="print JSON instead of text")
    dis.add_argument("--config", metavar="PRESET|FILE",
                     help="also check the binary was built for, and runs on, this architecture configuration")
    dis.set_defaults(func=cmd_disasm)


def add_simulate_args(simu: argparse.ArgumentParser) -> None:
    simu.add_argument("file", help="an .npub file")
    simu.add_argument("--input", action="append", default=[], metavar="NAME=file.npy",
                      help="an input (floats are quantized per the tensor table); missing ones are random")
    simu.add_argument("--seed", type=options.seed_number, default=0, help="seed for inputs not given (default 0)")
    simu.add_argument("--output", metavar="DIR", help="write one NAME.npy per output (dequantized) into DIR")
    simu.add_argument("--config", metavar="PRESET|FILE",
                      help="the machine (default: the preset the binary was built for); must match the binary")
    simu.add_argument("--report", choices=["text", "json", "csv", "html"], default="text",
                      help="summary, units and layers (text), everything (json), the layer table (csv), or a "
                           "page with the roofline plot, engine utilisation and the layers (html, needs -o; "
                           "pip install 'glowsdk[report]')")
    simu.add_argument("-o", metavar="FILE", help="write the report to FILE instead of stdout")
    simu.add_argument("--trace", metavar="FILE", help="write a Chrome-trace JSON (opens in Perfetto)")
    simu.add_argument("--array-model", choices=["closed", "folds"], default="closed",
                      help="matrix-engine timing: every fold as a full one (closed form, default) or fold by fold")
    simu.add_argument("--energy-table", metavar="FILE",
                      help="a TOML file overriding entries of the energy/area table (vendor_guide/energy_area.md)")
    simu.add_argument("--checked", action="store_true", help="also detect races between engines")
    simu.add_argument("--ideal-dram", action="store_true",
                      help="DRAM without latency or bandwidth limit (every LOAD/STORE takes 1 cycle)")
    simu.set_defaults(func=cmd_simulate)


SUBCOMMANDS = {"disasm": add_disasm_args, "simulate": add_simulate_args}
"""Each command's arguments and handler, added when it is the one run (main.COMMANDS)."""
