"""The CPU backend's speed against onnxruntime: per-convolution GFLOP/s and whole networks.

    python bench/cpu_kernels.py [--models resnet50,vgg19,squeezenet,shufflenet,inception_v1,densenet121]
                                [--layers resnet50,vgg19] [--threads 1,2] [--repeat 7] [--batch 1]

Everything is measured in this one process, glowsdk and onnxruntime interleaved
run by run (the machine is shared, so each side's best of `--repeat` runs is
reported), on the same seeded inputs and seeded random weights
(`zoo.randomize_weights`, seed 0). onnxruntime runs its CPUExecutionProvider
with all graph optimisations and `intra_op_num_threads` equal to glowsdk's
`threads`; its model has the initializers taken out of the graph inputs (the
bundled models are IR version 3, where weights are also inputs, which keeps
onnxruntime from folding batch norms and constants).

The layer table times each distinct convolution of the `--layers` networks alone
(a one-node model, single-threaded, on both sides) and names the strategy the
CPU backend chose for it (kernels/conv.py). The network table gives latency,
the ratio glowsdk / onnxruntime (below 1 means glowsdk is faster), GFLOP/s of
the convolutions and matrix multiplies, and the largest difference between the
two outputs relative to the largest output magnitude.
"""
from __future__ import annotations

import argparse
import math
import time
from typing import Callable

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

import glowsdk
from glowsdk.backends.cpu.kernels.conv import conv_strategy
from glowsdk.table import format_table
from glowsdk.zoo import bundled_path, randomize_weights, rebatch

WEIGHT_SEED = 0
INPUT_SEED = 0


def best_of(repeat: int, runs: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Each run's best wall time in seconds, the runs interleaved `repeat` times after a warm-up."""
    best = {name: math.inf for name in runs}
    for run in runs.values():
        run()
    for _ in range(repeat):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def without_initializer_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` with its weights no longer also listed as graph inputs (IR version >= 4)."""
    result = onnx.ModelProto()
    result.CopyFrom(model)
    weights = {init.name for init in result.graph.initializer}
    kept = [value for value in result.graph.input if value.name not in weights]
    del result.graph.input[:]
    result.graph.input.extend(kept)
    result.ir_version = max(result.ir_version, 4)
    return result


def ort_session(model: onnx.ModelProto, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def program_flops(program) -> int:
    """FLOPs of the program's convolutions and matrix multiplies (2 per multiply-add)."""
    total = 0
    for instr in program.ir.instructions:
        if instr.kind == "Conv":
            per_output = instr.filter.type.size // instr.filter.type.shape[0]
            total += 2 * instr.types[0].size * per_output
        elif instr.kind == "MatMul":
            total += 2 * instr.types[0].size * instr.inputs[0].type.shape[-1]
    return total


def network_rows(models: list[str], threads: list[int], repeat: int, batch: int) -> list[list[str]]:
    rows = []
    for name in models:
        proto = randomize_weights(onnx.load(bundled_path(name)), WEIGHT_SEED)
        if batch != 1:
            proto = rebatch(proto, batch)
        network = glowsdk.load(proto)
        feeds = network.random_inputs(INPUT_SEED)
        for count in threads:
            compiled = glowsdk.compile(network, target="cpu", threads=count)
            session = ort_session(without_initializer_inputs(proto), count)
            got = compiled.run(feeds)
            want = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
            error = max(float(np.abs(got[k] - want[k]).max() / max(np.abs(want[k]).max(), 1e-30)) for k in want)
            times = best_of(repeat, {"glowsdk": lambda c=compiled, f=feeds: c.run(f),
                                     "ort": lambda s=session, f=feeds: s.run(None, f)})
            flops = program_flops(compiled.compiled.program)
            rows.append([name, str(batch), str(count), f"{times['glowsdk'] * 1e3:.1f}", f"{times['ort'] * 1e3:.1f}",
                         f"{times['glowsdk'] / times['ort']:.2f}", f"{flops / times['glowsdk'] / 1e9:.1f}",
                         f"{flops / times['ort'] / 1e9:.1f}", f"{error:.1e}"])
            print(" | ".join(rows[-1]), flush=True)
    return rows


def conv_model(instr) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A one-Conv ONNX model of `instr`'s shape, seeded weights, and a seeded input."""
    rng = np.random.default_rng(WEIGHT_SEED)
    x_shape, w_shape = instr.input.type.shape, instr.filter.type.shape
    weight = (rng.standard_normal(w_shape) / math.sqrt(math.prod(w_shape[1:]))).astype(np.float32)
    bias = rng.standard_normal(w_shape[0]).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=list(instr.kernel),
                            strides=list(instr.strides), pads=list(instr.pads), dilations=list(instr.dilations),
                            group=instr.group)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, instr.types[0].shape)],
                              [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return model, {"x": rng.standard_normal(x_shape).astype(np.float32)}


def layer_rows(models: list[str], repeat: int) -> list[list[str]]:
    rows, seen = [], set()
    for name in models:
        network = glowsdk.load(name, random_weights=WEIGHT_SEED)
        program = glowsdk.compile(network, target="cpu").compiled.program
        for instr in program.ir.instructions:
            if instr.kind != "Conv":
                continue
            key = (instr.input.type.shape, instr.filter.type.shape, tuple(instr.strides), tuple(instr.pads),
                   instr.group)
            if key in seen:
                continue
            seen.add(key)
            model, feeds = conv_model(instr)
            compiled = glowsdk.compile(glowsdk.load(model), target="cpu")
            session = ort_session(model, 1)
            times = best_of(repeat, {"glowsdk": lambda c=compiled, f=feeds: c.run(f),
                                     "ort": lambda s=session, f=feeds: s.run(None, f)})
            flops = 2 * instr.types[0].size * (instr.filter.type.size // instr.filter.type.shape[0])
            c_out, c_in, kh, kw = instr.filter.type.shape
            rows.append([name, f"{c_in}x{instr.input.type.shape[2]}x{instr.input.type.shape[3]}",
                         f"{c_out} {kh}x{kw}/{instr.strides[0]}", conv_strategy(instr), f"{flops / 1e6:.0f}",
                         f"{times['glowsdk'] * 1e3:.2f}", f"{flops / times['glowsdk'] / 1e9:.1f}",
                         f"{times['ort'] * 1e3:.2f}", f"{flops / times['ort'] / 1e9:.1f}",
                         f"{times['glowsdk'] / times['ort']:.2f}"])
            print(" | ".join(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,vgg19,squeezenet,shufflenet,inception_v1,densenet121")
    parser.add_argument("--layers", default="resnet50,vgg19", help="networks whose convolutions to time alone "
                                                                   "('' for none)")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    split = [m for m in args.layers.split(",") if m]
    if split:
        rows = layer_rows(split, args.repeat)
        print(format_table(["network", "input", "filters", "strategy", "MFLOP", "glowsdk ms", "GFLOP/s",
                            "ort ms", "ort GFLOP/s", "ratio"], rows))
    models = [m for m in args.models.split(",") if m]
    if models:
        rows = network_rows(models, [int(t) for t in args.threads.split(",")], args.repeat, args.batch)
        print(format_table(["model", "batch", "threads", "glowsdk ms", "ort ms", "ratio", "glowsdk GFLOP/s",
                            "ort GFLOP/s", "max rel diff"], rows))


if __name__ == "__main__":
    main()
