"""`glowsdk run` and `glowsdk dump`: a model's outputs on a target, or its imported graph."""
from __future__ import annotations

import argparse

import numpy as np

from ..errors import GlowError
from ..files import check_writable_file, check_writable_folder, write_arrays, write_text
from ..table import format_table
from . import flags, options, partition_report


def cmd_run(args: argparse.Namespace) -> int:
    from .. import api
    from ..compiler.partition.hetero import PartitionedFunction

    if args.output:
        check_writable_folder(args.output, "--output")
    flags.check_target_flags(args)
    extra = flags.backend_options(args)  # a flag of another target fails before the model loads
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
                           **extra)
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


def add_run_args(run: argparse.ArgumentParser) -> None:
    options.add_model_args(run)
    options.add_quantization_args(run)
    run.add_argument("--target", default="interpreter")
    run.add_argument("--input", action="append", default=[], metavar="NAME=file.npy")
    run.add_argument("--seed", type=options.seed_number, default=0, help="seed for inputs not given (default 0)")
    run.add_argument("--output", metavar="DIR", help="write one NAME.npy per output into DIR")
    run.add_argument("--top-k", type=options.positive_count, metavar="K",
                     help="print the K highest-scoring classes of each classifier output")
    options.add_fallback_args(run)
    flags.add_cache_arg(run)
    flags.add_target_flags(run, "run")
    run.set_defaults(func=cmd_run)


def add_dump_args(dump: argparse.ArgumentParser) -> None:
    options.add_model_args(dump)
    dump.add_argument("--format", choices=["text", "dot"], default="text")
    dump.add_argument("-o", metavar="FILE", help="write to FILE instead of stdout")
    dump.set_defaults(func=cmd_dump)


SUBCOMMANDS = {"run": add_run_args, "dump": add_dump_args}
"""Each command's arguments and handler, added when it is the one run (main.COMMANDS)."""
