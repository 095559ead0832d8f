"""`glowsdk scalesim`: SCALE-Sim v3's inputs in, its report files out, from glowsdk's compatible model."""
from __future__ import annotations

import argparse
import json
import os
import time

from ..errors import GlowError
from ..files import check_writable_file, check_writable_folder, write_text
from ..progress import Progress


def cmd_scalesim(args: argparse.Namespace) -> int:
    """Read the .cfg and topology (all errors before any file is written), run each layer, write the reports."""
    from sim.scalesim.inputs import read_config, read_topology
    from sim.scalesim.model import simulate_layer
    from sim.scalesim.reports import format_table, report_texts

    config = read_config(args.config)
    layers = read_topology(args.topology)
    if args.layout is not None and not os.path.isfile(args.layout):
        raise GlowError(f"--layout {args.layout}: no such file")
    check_writable_folder(args.o, "-o")
    if args.json:
        check_writable_file(args.json, "--json")
    began = time.perf_counter()
    progress = Progress("scalesim")
    results = []
    for index, layer in enumerate(layers):
        results.append(simulate_layer(layer, config, lambda done, total, i=index, name=layer.name:
                                      progress(i + 1, len(layers), f"{name}: fold {done}/{total}")))
    progress.close()
    seconds = time.perf_counter() - began
    for name, text in report_texts(results).items():
        write_text(os.path.join(args.o, name), text, "-o")
    mode = "CALC bandwidth" if config.bandwidth is None else \
        "USER bandwidth {}/{}/{} words/cycle (ifmap/filter/ofmap)".format(*config.bandwidth)
    print(f"SCALE-Sim-compatible run '{config.run_name}': {config.rows}x{config.cols} {config.dataflow}, "
          f"SRAM {config.ifmap_kb}/{config.filter_kb}/{config.ofmap_kb} KiB, {mode}")
    print(format_table(results))
    print(f"simulated {len(layers)} layer(s) in {seconds:.2f} s; wrote COMPUTE_REPORT.csv, BANDWIDTH_REPORT.csv, "
          f"DETAILED_ACCESS_REPORT.csv to {args.o}")
    if args.json:
        from dataclasses import asdict
        write_text(args.json, json.dumps({"config": asdict(config), "seconds": seconds,
                                          "layers": [asdict(r) for r in results]}, indent=1), "--json")
        print(f"wrote {args.json}")
    return 0


def add_scalesim_args(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("--config", required=True, metavar="CFG", help="a SCALE-Sim v3 .cfg file")
    cmd.add_argument("--topology", required=True, metavar="TOPO", help="a topology CSV (conv or GEMM M, N, K form)")
    cmd.add_argument("--layout", metavar="LAYOUT",
                     help="SCALE-Sim's layout CSV; accepted for command-line compatibility (custom layouts are "
                          "not modelled: the default layout is)")
    cmd.add_argument("-o", required=True, metavar="DIR", help="folder for the report CSVs")
    cmd.add_argument("--json", metavar="FILE", help="also write every layer's numbers as JSON")
    cmd.set_defaults(func=cmd_scalesim)


SUBCOMMANDS = {"scalesim": add_scalesim_args}
"""The command's arguments and handler, added when it is the one run (main.COMMANDS)."""
