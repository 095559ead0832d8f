"""`glowsdk compile`: a model optimised, lowered and compiled for a target, with dumps of every stage."""
from __future__ import annotations

import argparse
import os

from ..errors import GlowError
from ..files import check_writable_file, check_writable_folder, safe_file_name, write_text
from ..table import format_table
from . import flags, options, partition_report


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
    # the destinations and the target's flags are checked before the model is loaded and calibrated (an
    # integer-only target calibrates on random inputs when given no profile): a typo fails at once
    if args.dump_dir:
        check_writable_folder(args.dump_dir, "--dump-dir")
    if args.bundle:
        check_writable_folder(args.bundle, "--bundle")
    report_page = _report_page(args)
    for flag, path in (("-o", args.o), ("--report-file", report_page)):
        if path:
            check_writable_file(path, flag)
    flags.check_target_flags(args)
    backend = get_backend(args.target)
    extra = flags.backend_options(args, cache=not args.dump_ir)  # a cache hit builds no IR
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
    # -o, --report and --bundle are the compiled function's to write: a target without them refuses
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
    if args.report:
        text = compiled.report(args.report == "html", f"{network.source} on {args.target}: compile report")
        if args.report == "html":
            write_text(report_page, text, "--report-file")
            print(f"wrote {report_page}")
        else:
            print(text)
    if getattr(compiled, "from_cache", False):
        print("machine code loaded from the compile cache (--no-cache compiles afresh)")
    written = flags.written_by_target_flags(args) + [args.o] * bool(args.o)
    if args.bundle:
        written += compiled.write_bundle(args.bundle, network.source)
    for path in written:
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


def add_compile_args(comp: argparse.ArgumentParser) -> None:
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
    comp.add_argument("--print-pipeline", action="store_true", help="print the pass pipelines and exit")
    comp.add_argument("-o", metavar="FILE",
                      help="write the compiled artifact to FILE, for targets with a file format (npu: the .npub)")
    comp.add_argument("--report", nargs="?", const="text", choices=["text", "html"],
                      help="targets with a compile report (npu: per-layer tiling decisions next to a simulation's "
                           "numbers and the roofline); html: a page with the roofline plot (--report-file, default "
                           "-o's name with .html; pip install 'glowsdk[report]')")
    comp.add_argument("--report-file", metavar="FILE", help="where --report html writes its page")
    comp.add_argument("--bundle", metavar="DIR",
                      help="targets that write AOT bundles (cpu: bundle.o and any bundle.N.o, bundle.weights, bundle.h) into DIR")
    options.add_fallback_args(comp)
    flags.add_cache_arg(comp)
    flags.add_target_flags(comp, "compile")
    comp.set_defaults(func=cmd_compile)


SUBCOMMANDS = {"compile": add_compile_args}
"""The command's arguments and handler, added when it is the one run (main.COMMANDS)."""
