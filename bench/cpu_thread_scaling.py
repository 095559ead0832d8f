"""How each kernel of a network scales from one thread to several: per-kernel best cycle counts.

    python bench/cpu_thread_scaling.py MODEL.onnx [--threads 2] [--runs 300] [--top 30]

The model is compiled for the CPU with its cycle counters (the `profile` option:
a step is charged from its start until its slowest thread ends it) at 1 and at
`--threads` threads, and run `--runs` times each; each kernel's best run is
kept. On a shared machine a run's wall time mostly measures the other tenants:
a worker that is not on a core leaves its share to thread 0, and a whole
network's run is rarely free of that. A kernel's best of some hundred runs is
the run on which both threads were on cores, so its scaling (1-thread best over
N-thread best) is a property of the kernel, not of the load. The table lists
the kernels slowest at N threads first, with their shapes (Conv: the strategy,
kernels/conv.py), then the totals. Run it on two checkouts in turn (PYTHONPATH)
to compare them kernel by kernel.
"""
from __future__ import annotations

import argparse
import ctypes
from typing import Any

import glowsdk
from glowsdk.backends.cpu.codegen.counters import COUNTERS
from glowsdk.backends.cpu.kernels.conv import conv_strategy
from glowsdk.table import format_table


def best_cycles(network: Any, threads: int, runs: int) -> tuple[list[str], list[int]]:
    """Each step's description and its fewest cycles over `runs` runs on `threads` threads."""
    compiled = glowsdk.compile(network, "cpu", threads=threads, profile=True).compiled
    feeds = network.random_inputs(0)
    compiled.execute(feeds)
    counters = (ctypes.c_int64 * len(compiled.steps)).from_address(compiled.jit.functions[COUNTERS]())
    best = [0] * len(compiled.steps)
    for run in range(runs):
        ctypes.memset(counters, 0, ctypes.sizeof(counters))
        compiled.execute(feeds)
        best = [counters[i] if run == 0 else min(b, counters[i]) for i, b in enumerate(best)]
    return [describe(step) for step in compiled.steps], best


def describe(step: Any) -> str:
    """A step's kernel in words: a convolution's strategy and shapes, else the step's name."""
    instr = step.instrs[0]
    if instr.kind != "Conv":
        return step.name
    kernel = "x".join(str(k) for k in instr.filter.type.shape[2:])
    return (f"{conv_strategy(instr)} {kernel} {tuple(instr.input.type.shape)} -> {tuple(instr.types[0].shape)}"
            f" group {instr.group}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--threads", type=int, default=2, help="threads to compare with one (default 2)")
    parser.add_argument("--runs", type=int, default=300, help="runs per thread count (default 300)")
    parser.add_argument("--top", type=int, default=30, help="kernels listed (default 30)")
    args = parser.parse_args()
    network = glowsdk.load(args.model)
    names, one = best_cycles(network, 1, args.runs)
    _, many = best_cycles(network, args.threads, args.runs)
    order = sorted(range(len(names)), key=lambda i: -many[i])
    rows = [[names[i], f"{one[i] / 1e3:.1f}", f"{many[i] / 1e3:.1f}", f"{one[i] / max(many[i], 1):.2f}"]
            for i in order[:args.top]]
    rows.append(["TOTAL", f"{sum(one) / 1e3:.0f}", f"{sum(many) / 1e3:.0f}", f"{sum(one) / max(sum(many), 1):.2f}"])
    print(format_table(["kernel", "1 thread kcycles", f"{args.threads} threads kcycles", "scaling"], rows,
                       f"best of {args.runs} runs per kernel; scaling: 1-thread best / {args.threads}-thread best"))


if __name__ == "__main__":
    main()
