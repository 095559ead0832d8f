"""The `glowsdk` command: a thin layer over the Python API.

Bad input ends with one line on stderr and exit code 2; a bug in glowsdk ends
with one line and exit code 1 (set GLOWSDK_DEBUG=1 for the traceback).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Sequence

import numpy as np

from ..errors import GlowError
from ..files import check_writable_file, check_writable_folder, safe_file_name, write_arrays, write_text
from . import bench, cache, npu, options, partition_report, quantize, scalesim, serve, summary, sweep, train
from ..progress import Progress
from ..table import format_table

EXIT_BAD_INPUT = 2


def cmd_models(args: argparse.Namespace) -> int:
    from .. import zoo

    for name in zoo.BUNDLED:
        print(name)
    return 0


def cmd_backends(args: argparse.Namespace) -> int:
    from ..backends.plugins import plugin_error
    from ..backends.registry import Clash, available_backends, get_backend
    from ..compiler.lowering.primitives import PRIMITIVES

    for name, entry in sorted(available_backends().items()):
        if isinstance(entry, Clash):
            print(f"{name}  ({' | '.join(e.value for e in entry.entries)})\n  not usable: {entry}")
            continue
        try:
            backend = get_backend(name)
            declared = sorted(backend.primitives)
            info = backend.device_info()
        except GlowError as err:
            print(f"{name}  ({entry.value})\n  failed to load: {err}")
            continue
        except Exception as err:  # one plugin's bug must not hide the other backends
            blamed = plugin_error(err, name)
            if blamed is None:
                raise
            print(f"{name}  ({entry.value})\n  failed to load: {blamed}")
            continue
        print(f"{name}  ({entry.value})")
        print(f"  primitives ({len(declared)} of {len(PRIMITIVES)}): {', '.join(declared) or 'none'}")
        missing = sorted(set(PRIMITIVES) - set(declared))
        if missing:
            print(f"  not supported: {', '.join(missing)}")
        if info.description:
            print(f"  device: {info.description}")
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    from ..compiler.backend import CompileOptions
    from ..backends.registry import get_backend
    from ..compiler.ir import format_ir
    from ..compiler.ir.passes import IR_OPTIMIZATION, IR_PASSES
    from ..compiler.passes import PASSES, PIPELINES, PassManager
    from ..api import fallback_backends
    from ..compiler.partition.hetero import PartitionedFunction
    from ..compiler.pipeline import compile_function
    from ..graph.printer import format_dot, format_function

    if args.print_pipeline:
        for pipeline in [*PIPELINES.values(), IR_OPTIMIZATION]:
            print(pipeline.format())
        return 0
    if args.model is None:
        raise GlowError("compile needs a MODEL (an .onnx file or a bundled name)")
    after = _pass_names("--dump-after", args.dump_after, PASSES)
    ir_after = _pass_names("--dump-ir-after", args.dump_ir_after, IR_PASSES)
    # the destinations and --config are checked before the model is loaded and calibrated (the npu target
    # calibrates on random inputs when given no profile): a typo fails at once, not after the calibration
    if args.dump_dir:
        check_writable_folder(args.dump_dir, "--dump-dir")
    if args.bundle:
        check_writable_folder(args.bundle, "--bundle")
    report_page = _report_page(args)
    for flag, path in (("--dump-llvm", args.dump_llvm), ("--dump-asm", args.dump_asm), ("-o", args.o),
                       ("--report-file", report_page)):
        if path:
            check_writable_file(path, flag)
    if args.config:
        options.check_config(args.config)
    backend = get_backend(args.target)
    extra = options.backend_options(args, cache=not args.dump_ir)  # a cache hit builds no IR
    network = options.load_network(args)
    quantization = options.quantization_config(args, network)
    counts: dict[str, dict[str, int]] = {}
    render = format_dot if args.dump_graph == "dot" else format_function

    def emit(label: str, text: str, extension: str = ".txt") -> None:
        if args.dump_dir:
            path = os.path.join(args.dump_dir, safe_file_name(label.replace(" ", "_")) + extension)
            write_text(path, text + "\n", "--dump-dir")
            print(f"wrote {path}")
        else:
            print(f"== {label} ==\n{text}")

    def dump(label: str, function) -> None:
        emit(label, render(function), ".dot" if args.dump_graph == "dot" else ".txt")

    previous: dict[str, str] = {}  # the last stage's rendering: a transform that changed nothing is not dumped

    def on_stage(stage: str, function) -> None:
        counts[stage] = function.count_kinds()
        if args.dump_graph and stage in ("imported", "optimized", "lowered", "quantized", "transformed"):
            text = render(function)
            if stage != "transformed" or text != previous.get("text"):
                emit(stage, text, ".dot" if args.dump_graph == "dot" else ".txt")
            previous["text"] = text

    manager = PassManager(dump_after=after, dump=dump)
    ir_manager = PassManager(registry=IR_PASSES, dump_after=ir_after,
                             dump=lambda label, ir: emit(f"ir {label}", format_ir(ir)))
    if args.dump_llvm:  # backend-specific: the cpu target writes its LLVM module there
        extra["dump_llvm"] = args.dump_llvm
    if args.dump_asm:  # backend-specific: the cpu target writes the host assembly there
        extra["dump_asm"] = args.dump_asm
    # -o is written after compiling by the compiled function itself (the npu target: its .npub)
    if args.config:  # backend-specific: the npu target's architecture
        extra["config"] = args.config
    compiled = compile_function(network.function, backend, CompileOptions(extra=extra, ir_passes=ir_manager),
                                passes=manager, on_stage=on_stage, quantization=quantization,
                                fallbacks=fallback_backends(options.fallback_name(args)))
    if args.o:
        compiled.save(args.o)
    program = compiled.program
    if program is None and (args.dump_ir or ir_after):
        raise GlowError(f"--dump-ir{'' if args.dump_ir else '-after'}: target {args.target} does not "
                        f"compile through the low-level IR")
    if args.dump_ir:
        emit("ir", format_ir(program.ir))
    print(f"compiled {network.source} for target {args.target}")
    if compiled.quantization_report is not None:
        print(compiled.quantization_report.summary())
    print(_counts_table(counts))
    report = compiled.schedule_report
    if report is not None:
        mib = 1 << 20
        print(f"peak live activations: breadth-first order {report.peaks['breadth-first'] / mib:.2f} MiB, "
              f"import order {report.original_peak / mib:.2f} MiB, "
              f"scheduled ({report.strategy}) {report.scheduled_peak / mib:.2f} MiB, "
              f"lower bound {report.lower_bound / mib:.2f} MiB")
    if program is not None:
        print(program.plan.report.line())
    if isinstance(compiled, PartitionedFunction):
        print(partition_report.format_partitions(compiled))
    if args.report == "text":
        print(npu.compile_report(compiled, args.target))
    elif args.report == "html":
        write_text(report_page, npu.compile_report_html(compiled, args.target, f"{network.source} on "
                                                        f"{args.target}: compile report"), "--report-file")
        print(f"wrote {report_page}")
    if getattr(compiled, "from_cache", False):
        print("machine code loaded from the compile cache (--no-cache compiles afresh)")
    for path in (args.dump_llvm, args.dump_asm, args.o):
        if path:
            print(f"wrote {path}")
    if args.bundle:
        from ..backends.cpu.bundle import write_bundle

        for path in write_bundle(compiled, args.bundle, network.source):
            print(f"wrote {path}")
    return 0


def _report_page(args: argparse.Namespace) -> str | None:
    """Where `compile --report html` writes its page (--report-file, else -o's name with .html); the
    plotting library is checked for here, before the model is compiled."""
    if args.report != "html":
        if args.report_file:
            raise GlowError("--report-file is the page of --report html")
        return None
    from sim.html_report import require_plotting

    require_plotting()
    if args.report_file:
        return args.report_file
    if args.o:
        return os.path.splitext(args.o)[0] + ".html"
    raise GlowError("--report html writes a page: give its file with --report-file FILE (or -o)")


def _pass_names(flag: str, text: str | None, registry: dict) -> set[str]:
    """The comma-separated pass names of `flag`, each checked against `registry`."""
    names = set(text.split(",")) if text else set()
    unknown = names - set(registry)
    if unknown:
        raise GlowError(f"{flag}: unknown pass(es) {', '.join(sorted(unknown))}; "
                        f"passes: {', '.join(sorted(registry))}")
    return names


def _counts_table(counts: dict[str, dict[str, int]]) -> str:

    stages = [s for s in ("imported", "optimized", "lowered", "quantized") if s in counts]
    if stages and counts.get("transformed", counts[stages[-1]]) != counts[stages[-1]]:
        stages.append("transformed")  # the target's own rewrite, shown when it changed the counts
    kinds = sorted({k for s in stages for k in counts[s]})
    rows = [[k] + [counts[s].get(k, 0) or "" for s in stages] for k in kinds]
    rows.append(["TOTAL"] + [sum(counts[s].values()) for s in stages])
    return format_table(["node kind"] + stages, rows)


def cmd_run(args: argparse.Namespace) -> int:
    from .. import api
    from ..compiler.partition.hetero import PartitionedFunction

    if args.output:
        check_writable_folder(args.output, "--output")
    network = options.load_network(args)
    feeds = dict(options.load_input(s) for s in args.input)
    known = {i.name for i in network.inputs}
    unknown = set(feeds) - known
    if unknown:
        raise GlowError(f"--input {sorted(unknown)[0]}: the model has no such input "
                        f"(inputs: {', '.join(sorted(known))})")
    generated = network.random_inputs(args.seed)
    for name, value in generated.items():
        feeds.setdefault(name, value)
    quantization = options.quantization_config(args, network)
    compiled = api.compile(network, args.target, quantization=quantization, fallback=options.fallback_name(args),
                           **options.backend_options(args))
    outputs = compiled.run(feeds)
    if args.output:
        write_arrays(args.output, outputs, "--output")
    print(f"model {network.source} on target {args.target}")
    if isinstance(compiled.compiled, PartitionedFunction):
        print(partition_report.format_partitions(compiled.compiled))
    if compiled.compiled.quantization_report is not None:
        print(f"  {compiled.compiled.quantization_report.summary()}")
    given = {s.rpartition("=")[0] for s in args.input}
    for info in network.inputs:
        origin = "given" if info.name in given else f"random, seed {args.seed}"
        print(f"  input  {info.name}: {info.type} ({origin})")
    for name, value in outputs.items():
        print(f"  output {name}: {_summary(value)}")
    if args.top_k:
        print(_top_classes(outputs, args.top_k))
    if args.output:
        print(f"wrote {len(outputs)} output(s) to {args.output}")
    return 0


def _summary(value: np.ndarray) -> str:
    text = f"{value.dtype}{list(value.shape)}"
    floating = value.dtype.kind == "f" or value.dtype.name.startswith(("bfloat", "float"))
    if value.size and (floating or value.dtype.kind in "iub"):
        as_float = value.astype(np.float64)
        text += f" min {as_float.min():.6g} max {as_float.max():.6g} mean {as_float.mean():.6g}"
    return text


def _top_classes(outputs: dict[str, np.ndarray], k: int) -> str:
    """The k highest-scoring classes of each row of every classifier output (a float N x classes array,
    or one whose other dimensions are all 1), as Glow's image-classifier prints them."""
    tables = []
    for name, value in outputs.items():
        floating = value.dtype.kind == "f" or value.dtype.name.startswith(("bfloat", "float"))
        scores = value.reshape(value.shape[0], -1) if value.ndim >= 2 else None
        if not floating or scores is None or scores.shape[1] < 2 or scores.shape[1] != max(value.shape[1:]):
            tables.append(f"output {name}: {value.dtype}{list(value.shape)} is not a classifier output (--top-k)")
            continue
        scores = scores.astype(np.float64)
        rows = []
        for row, values in enumerate(scores):
            best = np.argsort(-values, kind="stable")[:k]
            rows += [[row, rank + 1, int(c), f"{values[c]:.6g}"] for rank, c in enumerate(best)]
        tables.append(f"output {name}: the top {min(k, scores.shape[1])} of {scores.shape[1]} classes\n"
                      + format_table(["row", "rank", "class", "score"], rows))
    return "\n".join(tables)


def cmd_dump(args: argparse.Namespace) -> int:
    from ..graph.printer import format_dot, format_function

    if args.o:
        check_writable_file(args.o, "-o")
    network = options.load_network(args)
    text = format_dot(network.function) if args.format == "dot" else format_function(network.function)
    if args.o:
        write_text(args.o, text + "\n", "-o")
        print(f"wrote {args.o}")
    else:
        print(text)
    return 0


def cmd_conformance(args: argparse.Namespace) -> int:
    from ..api import fallback_backends
    from ..backends.registry import get_backend
    from ..conformance import report

    backend = get_backend(args.target)
    for path, flag in ((args.json, "--json"), (args.markdown, "--markdown")):
        if path:
            check_writable_file(path, flag)
    # the models suite only: the primitive and node suites describe the target itself
    fallbacks = fallback_backends(options.fallback_name(args)) if args.suite in ("models", "all") else []
    payload: dict = {"target": args.target}
    failed = False
    sections: dict = {}
    if args.suite in ("primitives", "all"):
        from ..conformance.primitives import run_primitive_suite

        names = args.primitives.split(",") if args.primitives else None
        bar = Progress("primitives")
        results = sections["primitives"] = run_primitive_suite(
            backend, names, lambda d, t, r: bar(d, t, f"{r.primitive} {r.kind.value}"))
        bar.close()
        print(report.primitive_report(results))
        columns, rows = report.primitive_matrix(results)
        payload["primitives"] = {"totals": report.primitive_counts(results),
                                 "matrix": {p: {k.value: s for k, s in row.items()} for p, row in rows.items()},
                                 "cells": [r.to_json() for r in results]}
        failed |= any(r.status in ("fail", "error") for r in results)
    if args.suite in ("nodes", "all"):
        from ..conformance.node_tests import run_node_tests

        ops = args.ops.split(",") if args.ops else None
        bar = Progress("node tests")
        results = sections["nodes"] = run_node_tests(backend, ops, lambda d, t, r: bar(d, t, r.name))
        bar.close()
        print(report.node_report(results))
        payload["node_tests"] = {"totals": report.totals(results), "per_op": report.per_op(results),
                                 "cases": [r.to_json() for r in results]}
        failed |= any(r.status != "pass" for r in results)
    if args.suite in ("models", "all"):
        from ..conformance.models import run_model_zoo

        names = args.models.split(",") if args.models else None
        bar = Progress("model zoo")
        results = sections["models"] = run_model_zoo(backend, names,
                                                      lambda d, t, r: bar(d, t, f"{r.model} {r.check}"),
                                                      fallbacks=fallbacks)
        bar.close()
        if fallbacks:
            print(f"model zoo on {args.target} (--fallback {args.fallback}: what it cannot run goes there)")
        print(report.model_report(results))
        payload["models"] = {"totals": report.totals(results), "cases": [r.to_json() for r in results]}
        if fallbacks:
            payload["models"]["fallback"] = args.fallback
        failed |= any(r.status not in ("pass", "skipped") for r in results)
    if args.json:
        write_text(args.json, json.dumps(payload, indent=2), "--json")
        print(f"wrote {args.json}")
    if args.markdown:
        write_text(args.markdown, report.markdown_report(args.target, **sections), "--markdown")
        print(f"wrote {args.markdown}")
    return 1 if failed and args.strict else 0


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


class _Parser(argparse.ArgumentParser):
    """argparse with the CLI's error style: one line, exit code 2, a pointer to --help."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = _Parser(prog="glowsdk", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"glowsdk {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    sub.add_parser("models", help="list the bundled model names").set_defaults(func=cmd_models)
    sub.add_parser("backends", help="list the installed backends").set_defaults(func=cmd_backends)

    run = sub.add_parser("run", help="run a model on a target and summarise its outputs")
    options.add_model_args(run)
    options.add_quantization_args(run)
    run.add_argument("--target", default="interpreter")
    run.add_argument("--input", action="append", default=[], metavar="NAME=file.npy")
    run.add_argument("--seed", type=options.seed_number, default=0, help="seed for inputs not given (default 0)")
    run.add_argument("--output", metavar="DIR", help="write one NAME.npy per output into DIR")
    run.add_argument("--top-k", type=options.positive_count, metavar="K",
                     help="print the K highest-scoring classes of each classifier output")
    options.add_fallback_args(run)
    options.add_cache_arg(run)
    options.add_threads_arg(run)
    run.set_defaults(func=cmd_run)

    comp = sub.add_parser("compile", help="optimise, lower and compile a model for a target")
    options.add_model_args(comp, optional=True)
    options.add_quantization_args(comp)
    comp.add_argument("--target", default="interpreter")
    comp.add_argument("--dump-graph", choices=["text", "dot"],
                      help="show the graph after import, optimisation, lowering (and quantization)")
    comp.add_argument("--dump-dir", metavar="DIR", help="write dumps into DIR instead of stdout")
    comp.add_argument("--dump-after", metavar="PASS[,PASS]", help="dump the graph after these passes")
    comp.add_argument("--dump-ir", action="store_true",
                      help="show the low-level IR after the IR optimiser (ir.txt with --dump-dir)")
    comp.add_argument("--dump-ir-after", metavar="PASS[,PASS]", help="dump the IR after these IR passes")
    comp.add_argument("--dump-llvm", metavar="FILE", help="cpu target: write the generated LLVM module to FILE")
    comp.add_argument("--dump-asm", metavar="FILE",
                      help="cpu target: write the host assembly of the optimised module to FILE")
    comp.add_argument("--print-pipeline", action="store_true", help="print the pass pipelines and exit")
    comp.add_argument("-o", metavar="FILE", help="write the compiled artifact to FILE (npu target: the .npub binary)")
    comp.add_argument("--config", metavar="PRESET|FILE", help="npu target: the architecture (default: default)")
    comp.add_argument("--report", nargs="?", const="text", choices=["text", "html"],
                      help="npu target: per-layer tiling decisions next to a simulation's numbers and the roofline; "
                           "html: a page with the roofline plot (--report-file, default -o's name with .html; "
                           "pip install 'glowsdk[report]')")
    comp.add_argument("--report-file", metavar="FILE", help="where --report html writes its page")
    comp.add_argument("--bundle", metavar="DIR",
                      help="cpu target: write an AOT bundle (bundle.o, bundle.weights, bundle.h) into DIR")
    options.add_fallback_args(comp)
    options.add_cache_arg(comp)
    options.add_threads_arg(comp)
    comp.set_defaults(func=cmd_compile)

    dump = sub.add_parser("dump", help="print the imported graph as text or Graphviz DOT")
    options.add_model_args(dump)
    dump.add_argument("--format", choices=["text", "dot"], default="text")
    dump.add_argument("-o", metavar="FILE", help="write to FILE instead of stdout")
    dump.set_defaults(func=cmd_dump)

    conf = sub.add_parser("conformance", help="run the primitive suite, the ONNX node tests and the model zoo "
                                              "on a target")
    conf.add_argument("--target", default="interpreter")
    conf.add_argument("--suite", choices=["primitives", "nodes", "models", "all"], default="all")
    conf.add_argument("--primitives", help="only these primitives (comma-separated; primitives suite)")
    conf.add_argument("--ops", help="only node tests using these ops (comma-separated)")
    conf.add_argument("--models", help="only these bundled models (comma-separated)")
    conf.add_argument("--json", metavar="FILE", help="also write the full report as JSON")
    conf.add_argument("--markdown", metavar="FILE", help="also write the support matrix and totals as Markdown")
    conf.add_argument("--strict", action="store_true", help="exit 1 if any case does not pass")
    conf.add_argument("--fallback", default="none", metavar="DEVICE",
                      help="models suite: run what the target cannot on this backend and report each model's "
                           "partitions and share of MACs on the target (default none: a partial model fails); "
                           "the primitives and nodes suites ignore it (they test the target itself)")
    conf.set_defaults(func=cmd_conformance)

    prof = sub.add_parser("profile", help="record the range of every value on calibration inputs (quantization)")
    options.add_model_args(prof)
    calib = prof.add_mutually_exclusive_group(required=True)
    calib.add_argument("--calibration", metavar="DIR",
                       help="a folder with one .npy per sample (one input) or one folder per sample of NAME.npy")
    calib.add_argument("--calibration-random", type=int, metavar="N", help="N samples of seeded random inputs")
    prof.add_argument("--seed", type=options.seed_number, default=0, help="seed for --calibration-random (default 0)")
    prof.add_argument("--target", default="interpreter", help="the backend to run the samples on")
    prof.add_argument("-o", metavar="FILE", required=True, help="write the profile JSON to FILE")
    prof.set_defaults(func=cmd_profile)

    partition_report.register(sub)
    quantize.register(sub)
    bench.register(sub)
    npu.register(sub)
    scalesim.register(sub)
    serve.register(sub)
    sweep.register(sub)
    train.register(sub)
    summary.register(sub)
    cache.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except GlowError as err:
        print(f"glowsdk: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("glowsdk: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader (e.g. `| head`) went away: stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as err:
        if os.environ.get("GLOWSDK_DEBUG"):
            raise
        from ..backends.plugins import plugin_error  # reads the installed entry points: only on this path

        # raised inside a vendor's backend package: the plugin's bug, not ours
        blamed = plugin_error(err, getattr(args, "target", None))
        if blamed is not None:
            print(f"glowsdk: error: {blamed}", file=sys.stderr)
            return EXIT_BAD_INPUT
        print(f"glowsdk: internal error: {type(err).__name__}: {err} "
              f"(a bug in glowsdk; GLOWSDK_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1

if __name__ == "__main__":
    sys.exit(main())
