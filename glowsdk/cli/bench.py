"""`glowsdk bench`: how fast a compiled model runs, alone or against onnxruntime in the same process.

Both sides get the same model bytes (after --random-weights and --batch), the
same seeded inputs and the same thread count. After a warm-up, each repetition
times one glowsdk sample and then one peer sample, so both see the same machine
state (turbo, other load, memory bandwidth left by neighbours) rather than one a
minute after the other; with more than one thread each sample follows a pause and
an untimed run (SETTLE_SECONDS). A sample is
one run, or for a model faster than MIN_SAMPLE_SECONDS as many back-to-back runs
as last that long, averaged (a sub-millisecond network is otherwise at the mercy
of one preempted run). Latency is the best and the median of the repetitions,
throughput is batch / median, and
GFLOP/s counts the multiply-adds of convolutions and matrix products (2 FLOP
each) over the median. The outputs must agree with the peer's, or the numbers
are reported with a failure: a fast wrong answer is no result. onnxruntime is a
benchmark extra, imported only when asked for.

What the target cannot run goes to `--fallback` (default cpu; none refuses), as in `glowsdk run`:
a model split between the target and the host is timed end to end, its partition table is
printed once, and `--profile` then shows each partition's time in the last timed run.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np

from ..errors import GlowError
from ..files import check_writable_file, write_text
from ..progress import progress
from . import flags, options, partition_report

if TYPE_CHECKING:
    import onnx
    from ..compiler.partition.hetero import PartitionedFunction

AGREEMENT = 1e-3
"""Largest output difference, relative to the peer's largest magnitude, counted as agreement."""
PEERS = ("onnxruntime",)


def prepared_model(model: str, batch: int | None, random_weights: int | None) -> tuple[onnx.ModelProto, str]:
    """The model bytes both sides run, as `glowsdk.load` prepares them; with a name for reports."""
    from .. import api, zoo

    proto, source = api.read_model(model)
    if random_weights is not None:
        proto = zoo.randomize_weights(proto, random_weights)
    if batch is not None:
        proto = zoo.rebatch(proto, batch)
    return proto, source


def network_flops(function) -> int:
    """Multiply-adds x 2 of the convolutions and matrix products of an imported function."""
    total = 0
    for node in function.nodes:
        if node.kind == "Conv":
            total += 2 * node.type.size * int(np.prod(node.inputs[1].type.shape[1:]))
        elif node.kind == "ConvTranspose":
            total += 2 * node.inputs[0].type.size * int(np.prod(node.inputs[1].type.shape[1:]))
        elif node.kind == "MatMul":
            total += 2 * node.type.size * node.inputs[0].type.shape[-1]
        elif node.kind == "Gemm":
            a = node.inputs[0].type.shape
            total += 2 * node.type.size * a[0 if node.attrs.get("trans_a") else 1]
    return total


def onnxruntime_runner(proto: onnx.ModelProto, threads: int) -> Callable[[Mapping[str, np.ndarray]], dict]:
    """A function running `proto` on onnxruntime's CPU provider with `threads` intra-op threads."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise GlowError("--peer onnxruntime: onnxruntime is not installed (pip install onnxruntime; "
                        "it is a benchmark extra, not a glowsdk dependency)") from None
    import onnx

    model = onnx.ModelProto()
    model.CopyFrom(proto)
    initializers = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in initializers]  # else ORT may not fold them
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    model.ir_version = min(max(model.ir_version, 4), 8)
    settings = ort.SessionOptions()
    settings.intra_op_num_threads = threads
    settings.inter_op_num_threads = 1
    settings.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    settings.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), settings, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(names, dict(feeds))))


@dataclass
class Side:
    """One side's repetitions: seconds per run, each the mean of a sample of `loops` runs."""

    name: str
    seconds: list[float] = field(default_factory=list)
    loops: int = 1

    @property
    def best_ms(self) -> float:
        return 1e3 * min(self.seconds)

    @property
    def median_ms(self) -> float:
        return 1e3 * statistics.median(self.seconds)


@dataclass
class BenchResult:
    """What `measure` found for one model, target, batch and thread count."""

    model: str
    target: str
    batch: int
    threads: int | None
    compile_seconds: float
    from_cache: bool
    flops: int
    sides: list[Side]
    difference: float | None = None
    """The largest output difference from the peer, relative to the peer's largest magnitude."""
    partitioned: PartitionedFunction | None = None
    """The PartitionedFunction when the model runs split between the target and a fallback, else None
    (its partitions keep their times of the last timed run)."""

    @property
    def ratio(self) -> float | None:
        """glowsdk's median latency over the peer's (below 1: glowsdk is faster)."""
        return self.sides[0].median_ms / self.sides[1].median_ms if len(self.sides) > 1 else None

    @property
    def agrees(self) -> bool:
        return self.difference is None or self.difference <= AGREEMENT

    def to_json(self) -> dict:
        return {"model": self.model, "target": self.target, "batch": self.batch, "threads": self.threads,
                "compile_seconds": self.compile_seconds, "from_cache": self.from_cache, "flops": self.flops,
                "sides": [{"name": s.name, "best_ms": s.best_ms, "median_ms": s.median_ms, "seconds": s.seconds,
                           "runs_per_sample": s.loops,
                           "throughput_per_s": self.batch / (s.median_ms / 1e3),
                           "gflops": self.flops / s.median_ms / 1e6} for s in self.sides],
                "ratio": self.ratio, "difference": self.difference, "agrees": self.agrees,
                **({"partitions": self.partitioned.describe()} if self.partitioned is not None else {})}

    def table(self) -> str:
        from ..table import format_table

        rows = [[s.name, f"{s.best_ms:.3f}", f"{s.median_ms:.3f}", f"{self.batch / (s.median_ms / 1e3):.1f}",
                 f"{self.flops / s.median_ms / 1e6:.1f}" if self.flops else "-"] for s in self.sides]
        cached = "from the compile cache" if self.from_cache else "cold"
        heading = (f"{self.model} on {self.target}: batch {self.batch}, threads {self.threads or 'default'}, "
                   f"{_samples(self.sides)}; compiled in {self.compile_seconds:.2f} s ({cached})")
        lines = [heading, format_table(["", "best ms", "median ms", "per second", "GFLOP/s"], rows)]
        if self.ratio is not None:
            lines.append(f"ratio {self.sides[0].name} / {self.sides[1].name} (median): {self.ratio:.3f}; "
                         f"outputs {'agree' if self.agrees else 'DISAGREE'} "
                         f"(largest difference {self.difference:.2e} of the largest magnitude)")
        return "\n".join(lines)


def relative_difference(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray]) -> float:
    """The largest |got - want| over all outputs, relative to the largest |want|."""
    scale = max(float(np.abs(w).max(initial=0.0)) for w in want.values()) or 1.0
    return max(float(np.abs(got[k].astype(np.float64) - w).max(initial=0.0)) for k, w in want.items()) / scale


def _samples(sides: list[Side]) -> str:
    loops = "/".join(str(s.loops) for s in sides)
    runs = "run" if all(s.loops == 1 for s in sides) else f"mean of {loops} runs"
    return f"{len(sides[0].seconds)} samples ({runs} each)"


MIN_SAMPLE_SECONDS, MAX_LOOPS = 0.01, 1000
"""A timed sample lasts at least this long: a faster model runs back to back (up to MAX_LOOPS)."""


def runs_per_sample(run: Callable[[], object], clock: Callable[[], float] = time.perf_counter) -> int:
    """How many back-to-back calls of `run` last MIN_SAMPLE_SECONDS (at least 1, at most
    MAX_LOOPS), counted by calling it: one slow first run cannot shrink every sample to a few runs."""
    begin, count = clock(), 0
    while count < MAX_LOOPS:
        run()
        count += 1
        if clock() - begin >= MIN_SAMPLE_SECONDS:
            break
    return count


SETTLE_SECONDS = 0.2
"""With more than one thread, each sample starts this long after the other side's, after one
untimed sample: both runtimes keep their workers spinning for a while after a run, and the other
side's spinning workers would otherwise be timed as this side's cost; the untimed sample wakes
this side's (on a virtual machine, the first runs after an idle pause take up to 3 ms more while
the idle vCPU is woken)."""


def measure(proto: onnx.ModelProto, name: str, target: str, *, threads: int | None = None, repeat: int = 10,
            warmup: int = 2, peer: str | None = None, cache: bool = True, seed: int = 0,
            fallback: str | None = "cpu", backend_options: Mapping[str, object] | None = None) -> BenchResult:
    """Compile `proto` for `target` (what it cannot run on `fallback`, a backend name; None refuses)
    and time it (and `peer`, sample by sample) on seeded inputs. `backend_options` go to the target."""
    from .. import api
    from ..compiler.partition.hetero import PartitionedFunction

    network = api.load(proto)
    extra = flags.cache_options(target, no_cache=not cache)
    if threads is not None:
        extra["threads"] = threads
    extra.update(backend_options or {})
    start = time.perf_counter()
    compiled = api.compile(network, target, fallback=fallback, **extra)
    compile_seconds = time.perf_counter() - start
    feeds = network.random_inputs(seed)
    runners = [compiled.run]
    sides = [Side(f"glowsdk {target}")]
    if peer is not None:
        runners.append(onnxruntime_runner(proto, threads or 1))
        sides.append(Side(peer))
    outputs = [run(feeds) for run in runners]
    for _ in range(warmup - 1):
        for run in runners:
            run(feeds)
    settle = (threads or 1) > 1 and peer is not None
    for run, side in zip(runners, sides):
        if settle:
            time.sleep(SETTLE_SECONDS)
        side.loops = runs_per_sample(lambda: run(feeds))
    for _ in progress(range(repeat), "timing", unit="sample"):  # on a terminal: one redraw a second, off one none
        for run, side in zip(runners, sides):
            if settle:
                time.sleep(SETTLE_SECONDS)
                for _ in range(side.loops):
                    run(feeds)
            begin = time.perf_counter()
            for _ in range(side.loops):
                run(feeds)
            side.seconds.append((time.perf_counter() - begin) / side.loops)
    batch = network.inputs[0].shape[0] if network.inputs and network.inputs[0].shape else 1
    from_cache = bool(getattr(compiled.compiled, "from_cache", False))
    difference = relative_difference(outputs[0], outputs[1]) if peer is not None else None
    partitioned = compiled.compiled if isinstance(compiled.compiled, PartitionedFunction) else None
    return BenchResult(name, target, batch, threads, compile_seconds, from_cache, network_flops(network.function),
                       sides, difference, partitioned)


def kernel_profile(proto: onnx.ModelProto, target: str, threads: int | None, runs: int,
                   backend_options: Mapping[str, object] | None = None) -> tuple[str, list[dict]]:
    """Per-kernel times of `proto` compiled for `target` with its cycle counters (`Backend.profiles_kernels`):
    a table and one JSON record per kernel."""
    from .. import api
    from ..backends.registry import backend_class

    if not backend_class(target).profiles_kernels:
        raise GlowError(f"bench --profile: target {target} counts no cycles per kernel "
                        f"(a model split by --fallback shows the time of each partition)")
    network = api.load(proto)
    extra = {**({"threads": threads} if threads else {}), **(backend_options or {}), "profile": True}
    compiled = api.compile(network, target, **extra)
    return compiled.compiled.profile_kernels(network.random_inputs(0), runs)


def partition_times(partitioned: PartitionedFunction) -> str:
    """Each partition's time in the last run of a PartitionedFunction, with its share of the run."""
    from ..compiler.partition.placement import TARGET
    from ..table import format_table

    total = sum(p.last_seconds for p in partitioned.partitions) or 1.0
    rows = [[p.index, partitioned.target if p.side == TARGET else "host", p.backend,
             f"{p.last_seconds * 1e3:.3f}", f"{100 * p.last_seconds / total:.1f}",
             f"{p.estimated_seconds * 1e3:.3f}"] for p in partitioned.partitions]
    return format_table(["#", "device", "backend", "last run ms", "% of run", "est. ms"], rows)


def cmd_bench(args: argparse.Namespace) -> int:
    if args.json:
        check_writable_file(args.json, "--json")
    if args.input_shape:
        raise GlowError("bench: --input-shape is not supported; export the model with static shapes")
    flags.check_target_flags(args)
    proto, source = prepared_model(args.model, args.batch, args.random_weights)
    extra = {**flags.target_options(args), **dict(options.parse_backend_opt(text) for text in args.backend_opt)}
    result = measure(proto, source, args.target, threads=args.threads, repeat=args.repeat, warmup=args.warmup,
                     peer=args.peer, cache=not args.no_cache, fallback=options.fallback_name(args),
                     backend_options=extra)
    if result.partitioned is not None:
        print(partition_report.format_partitions(result.partitioned))
    print(result.table())
    report = result.to_json()
    if args.profile and result.partitioned is not None:
        print("\nwhere the time goes: each partition in the last timed run\n")
        print(partition_times(result.partitioned))
    elif args.profile:
        table, report["profile"] = kernel_profile(proto, args.target, args.threads, args.repeat, extra)
        print(f"\nwhere the time goes ({args.repeat} runs, a step charged until its slowest thread ends it)\n")
        print(table)
    if args.json:
        write_text(args.json, json.dumps(report, indent=1) + "\n", "--json")
        print(f"wrote {args.json}")
    if not result.agrees:
        print(f"glowsdk: error: the outputs differ from {args.peer}'s by {result.difference:.2e} "
              f"(more than {AGREEMENT:g} of the largest magnitude)", file=sys.stderr)
        return 1
    return 0


def add_bench_args(bench: argparse.ArgumentParser) -> None:
    options.add_model_args(bench)
    bench.add_argument("--target", default="cpu")
    bench.add_argument("--threads", type=options.positive_count,
                       help="threads of the target (cpu) and of the peer (default: the target's own; peer 1)")
    bench.add_argument("--repeat", type=options.positive_count, default=10, help="timed samples per side (default 10; see MIN_SAMPLE_SECONDS)")
    bench.add_argument("--warmup", type=options.positive_count, default=2, help="untimed runs first (default 2)")
    bench.add_argument("--peer", choices=PEERS, help="also time this runtime, turn by turn, and compare outputs")
    bench.add_argument("--json", metavar="FILE", help="also write the measurements as JSON")
    bench.add_argument("--profile", action="store_true",
                       help="targets with cycle counters (cpu): also time every kernel (GFLOP/s of each Conv and "
                            "MatMul); a model split by --fallback: the time of each partition in the last run")
    options.add_fallback_args(bench)
    flags.add_cache_arg(bench)
    flags.add_target_flags(bench, "bench")
    bench.set_defaults(func=cmd_bench)


SUBCOMMANDS = {"bench": add_bench_args}
"""The command's arguments and handler, added when it is the one run (main.COMMANDS)."""
