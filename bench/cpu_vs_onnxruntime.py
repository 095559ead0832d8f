"""Issue 6's speed table in one run: the LLVM CPU backend against onnxruntime's CPU provider.

Every row is `glowsdk.cli.bench.measure` (what `glowsdk bench --peer onnxruntime`
runs): the same model bytes with seeded random weights (seed 0), the same
seeded inputs, the same thread count, glowsdk and onnxruntime timed turn by
turn after a warm-up (sample by sample; with more than one thread each sample after a
pause and an untimed run; a sample of a model under 10 ms averages back-to-back runs:
glowsdk.cli.bench.runs_per_sample), outputs checked to agree. Rows: the six bundled CNNs at batch
1 and 8, a 784-1024-1024-10 MLP at batch 1, and a chain of 8 element-wise ops on
a 4M-element tensor (`--set bundled`); the untuned set of issue 24 (`--set untuned`: the
PyTorch/torchvision architectures of scripts/export_bench_models.py, read through
bench/untuned.py, as exported, batch 1, bound 1.0), or both (`--set all`, the default); each with
1 and 2 threads; then the compile times, cold (into an empty compile cache, storing the entry) and
from the cache. The table names the vector ISA the generated code used (GLOWSDK_CPU_ISA=avx2 runs
the AVX2 code on an AVX-512 host). Writes a markdown table to stdout, progress to stderr, and
everything to --json.

    python bench/cpu_vs_onnxruntime.py [--set all|bundled|untuned] [--models resnet50,gru] [--repeat 5]
                                       [--threads 1,2] [--json out.json]
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import time
from typing import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

import glowsdk
from glowsdk.backends.cpu.jit import host_isa
from glowsdk.cli.bench import BenchResult, measure, prepared_model

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import untuned  # bench/untuned.py, beside this script

NETWORKS = {"resnet50": 1.25, "vgg19": 1.25, "squeezenet": 1.5, "shufflenet": 1.5, "inception_v1": 1.5,
            "densenet121": 1.5}
"""Bundled CNNs and the largest latency ratio (glowsdk / onnxruntime) issue 6 allows each."""
SYNTHETIC_BOUND = 1.0
"""The MLP and the element-wise chain must beat onnxruntime."""
UNTUNED_BOUND = 1.0
"""Issue 24: every model of the untuned set at most as slow as onnxruntime."""
BUNDLED = [*NETWORKS, "mlp", "chain"]
COLD_COMPILE_BOUNDS = {"resnet50": 5.0, "gru": 5.0}
"""Issue 24: seconds of a cold compile (an empty cache) for these; UNTUNED_COLD_BOUND for the rest of the set."""
UNTUNED_COLD_BOUND = 10.0
CACHED_COMPILE_BOUND = 1.0
"""Seconds of a compile answered from the cache."""
CHAIN_ELEMENTS = 1 << 22


def mlp(sizes: Sequence[int] = (784, 1024, 1024, 10), batch: int = 1, seed: int = 0) -> onnx.ModelProto:
    """Gemm layers with Relu between them, He-scaled seeded weights."""
    rng = np.random.default_rng(seed)
    nodes, weights, last = [], [], "x"
    for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        w = (rng.standard_normal((n_in, n_out)) * np.sqrt(2.0 / n_in)).astype(np.float32)
        weights += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.zeros(n_out, np.float32), f"b{i}")]
        out = "y" if i == len(sizes) - 2 else f"g{i}"
        nodes.append(helper.make_node("Gemm", [last, f"w{i}", f"b{i}"], [out]))
        if out != "y":
            nodes.append(helper.make_node("Relu", [out], [f"h{i}"]))
            last = f"h{i}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                                          [batch, sizes[0]])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [batch, sizes[-1]])],
                              initializer=weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def elementwise_chain(elements: int = CHAIN_ELEMENTS) -> onnx.ModelProto:
    """8 element-wise ops on one tensor of `elements` floats, each also reading the input x."""
    ops = [("Add", True), ("Mul", True), ("Sub", True), ("Relu", False), ("Neg", False), ("Abs", False),
           ("Max", True), ("Min", True)]
    nodes, last = [], "x"
    for i, (op, binary) in enumerate(ops):
        out = "y" if i == len(ops) - 1 else f"t{i}"
        nodes.append(helper.make_node(op, [last, "x"] if binary else [last], [out]))
        last = out
    shape = [elements // 1024, 1024]
    graph = helper.make_graph(nodes, "chain8", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def cases(models: Sequence[str], untuned_names: Sequence[str]) -> list[tuple[str, int, float, onnx.ModelProto | None]]:
    """(name, batch, bound, model or None for a bundled one) for every row asked for."""
    rows = []
    unknown = [m for m in models if m not in BUNDLED and m not in untuned_names]
    if unknown:
        raise SystemExit(f"unknown model {unknown[0]}; choose from {', '.join([*BUNDLED, *untuned_names])}")
    for name in models:
        if name not in BUNDLED:
            proto = onnx.load(untuned.ensure([name])[name]["path"])
            rows.append((name, 1, UNTUNED_BOUND, proto))
        elif name in NETWORKS:
            rows += [(name, batch, NETWORKS[name], None) for batch in (1, 8)]
        elif name == "mlp":
            rows.append(("mlp 784-1024-1024-10", 1, SYNTHETIC_BOUND, mlp()))
        else:
            rows.append(("8 element-wise ops, 4M floats", 1, SYNTHETIC_BOUND, elementwise_chain()))
    return rows


def log(start: float, text: str) -> None:
    print(f"[{time.perf_counter() - start:7.1f}s] {text}", file=sys.stderr, flush=True)


def compile_times(proto: onnx.ModelProto) -> tuple[float, float]:
    """Seconds to compile for cpu into the (empty) compile cache, then again from it."""
    network = glowsdk.load(proto)
    seconds = []
    for expect_hit in (False, True):
        begin = time.perf_counter()
        compiled = glowsdk.compile(network, "cpu", cache=True).compiled
        seconds.append(time.perf_counter() - begin)
        assert compiled.from_cache == expect_hit, "the compile cache did not behave as expected"
    return seconds[0], seconds[1]


def speed_table(rows: list[dict]) -> str:
    lines = [("| model | batch | threads | glowsdk ms | onnxruntime ms | ratio | target | met? | GFLOP/s | outputs "
              "| ISA |"), "|---|---:|---:|---:|---:|---:|---:|---|---:|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['batch']} | {r['threads']} | n/a | n/a | n/a | "
                         f"<= {r['bound']} | no: {r['error']} | | | {r['isa']} |")
            continue
        glow, peer = r["sides"]
        met = "yes" if r["ratio"] <= r["bound"] else f"no ({r['ratio'] / r['bound']:.2f}x over)"
        gflops = f"{glow['gflops']:.1f}" if r["flops"] else "-"
        lines.append(f"| {r['model']} | {r['batch']} | {r['threads']} | {glow['median_ms']:.2f} | "
                     f"{peer['median_ms']:.2f} | {r['ratio']:.2f} | <= {r['bound']} | {met} | {gflops} | "
                     f"{'agree' if r['agrees'] else 'DISAGREE'} | {r['isa']} |")
    return "\n".join(lines)


def compile_table(rows: list[dict]) -> str:
    lines = ["| model | batch | cold s | cached s | target | met? |", "|---|---:|---:|---:|---|---|"]
    in_set = set(untuned.names())
    for r in rows:
        target, met = "", ""
        cold = COLD_COMPILE_BOUNDS.get(r["model"], UNTUNED_COLD_BOUND if r["model"] in in_set else None)
        if cold is not None and r["batch"] == 1:
            target = f"<= {cold:g} s cold, < {CACHED_COMPILE_BOUND:g} s cached"
            met = "yes" if r["cold_s"] <= cold and r["cached_s"] < CACHED_COMPILE_BOUND else "no"
        lines.append(f"| {r['model']} | {r['batch']} | {r['cold_s']:.2f} | {r['cached_s']:.2f} | {target} | {met} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=("all", "bundled", "untuned"), default="all",
                        help="bundled: the zoo CNNs, the MLP and the chain; untuned: issue 24's set")
    parser.add_argument("--models", help="comma-separated rows to run (default: the whole --set)")
    parser.add_argument("--threads", default="1,2", help="thread counts (comma-separated)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per side and row")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    untuned_names = untuned.names()
    chosen = {"bundled": BUNDLED, "untuned": untuned_names, "all": [*untuned_names, *BUNDLED]}[args.set]
    models = args.models.split(",") if args.models else chosen
    isa = host_isa()
    start = time.perf_counter()
    speed, compiles = [], []
    with tempfile.TemporaryDirectory(prefix="glowsdk-bench-cache-") as cache:
        os.environ["GLOWSDK_CACHE_DIR"] = cache  # cold means cold: an empty cache, removed afterwards
        for name, batch, bound, model in cases(models, untuned_names):
            proto = model if model is not None else prepared_model(name, batch, random_weights=0)[0]
            log(start, f"{name} batch {batch}: compiling (cold, then from the cache)")
            try:
                cold, cached = compile_times(proto)
            except glowsdk.GlowError as err:
                cold = cached = float("nan")
                log(start, f"  does not compile: {err}")
            compiles.append({"model": name, "batch": batch, "cold_s": cold, "cached_s": cached})
            for count in threads:
                log(start, f"{name} batch {batch}: timing with {count} thread(s), {args.repeat} runs per side")
                row = {"model": name, "batch": batch, "threads": count, "bound": bound, "isa": isa}
                try:
                    result: BenchResult = measure(proto, name, "cpu", threads=count, repeat=args.repeat,
                                                  peer="onnxruntime")
                    row.update(result.to_json(), model=name, batch=batch, bound=bound, isa=isa)
                except glowsdk.GlowError as err:
                    row["error"] = str(err)
                speed.append(row)
                log(start, f"  ratio {row.get('ratio', float('nan')):.3f}")
    report = (f"## glowsdk cpu vs onnxruntime (median latency, {args.repeat} samples each, turn by turn; "
              f"generated code: {isa})\n\n"
              f"{speed_table(speed)}\n\n## compile times (cpu)\n\n{compile_table(compiles)}\n")
    print(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"isa": isa, "speed": speed, "compile": compiles, "seconds": time.perf_counter() - start}, f,
                      indent=1)
        log(start, f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
