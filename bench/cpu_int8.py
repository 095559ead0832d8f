"""The CPU backend's 8-bit kernels against onnxruntime's ConvInteger/MatMulInteger, on resnet50 shapes.

Each row is one ONNX model of a single ConvInteger (uint8 input, int8 constant
filter, zero points) or MatMulInteger (uint8 activations, int8 constant
weights) on a resnet50-sized shape, compiled by glowsdk for the cpu target and
run by onnxruntime's CPU provider with one intra-op thread, on the same seeded
inputs. The outputs must be equal (exact int32). Reports the median latency of
each, the GOP/s of each (2 * M * N * K operations), and the ratio glowsdk /
onnxruntime (below 1 means glowsdk is faster), and which dot product the int8
GEMM used (VNNI or the portable fallback).

    python bench/cpu_int8.py [--repeat 20]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import glowsdk
from glowsdk.backends.cpu.kernels.int8_gemm import host_has_vnni

CONVS = {
    "conv2 3x3 64->64 @56": ((1, 64, 56, 56), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}),
    "conv2 1x1 256->64 @56": ((1, 256, 56, 56), (64, 256, 1, 1), {}),
    "conv3 3x3 128->128 s2 @56": ((1, 128, 56, 56), (128, 128, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    "conv4 3x3 256->256 @14": ((1, 256, 14, 14), (256, 256, 3, 3), {"pads": [1, 1, 1, 1]}),
    "conv5 1x1 512->2048 @7": ((1, 512, 7, 7), (2048, 512, 1, 1), {}),
}
"""name -> (input shape, filter shape, attributes)."""
MATMULS = {
    "fc 2048->1000 batch 8": (8, 2048, 1000),
    "gemm 256x1024x1024": (256, 1024, 1024),
}
"""name -> (M, K, N)."""


def _model(node, inputs, initializers):
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                              initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def conv_case(x_shape, w_shape, attrs, rng):
    x = rng.integers(0, 256, x_shape).astype(np.uint8)
    w = rng.integers(-128, 128, w_shape).astype(np.int8)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(3, np.int8), "wz"),
             numpy_helper.from_array(np.array(128, np.uint8), "xz")]
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)
    model = _model(node, [helper.make_tensor_value_info("x", TensorProto.UINT8, x_shape)], inits)
    return model, {"x": x}


def matmul_case(m, k, n, rng):
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    inits = [numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.array(128, np.uint8), "az"),
             numpy_helper.from_array(np.array(-2, np.int8), "bz")]
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    return _model(node, [helper.make_tensor_value_info("a", TensorProto.UINT8, (m, k))], inits), {"a": a}


def median_seconds(run, feeds, repeat: int) -> float:
    run(feeds)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run(feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, model, feeds, operations: int, repeat: int) -> str:
    compiled = glowsdk.compile(glowsdk.load(model), "cpu")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    peer = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    ours, theirs = compiled.run(feeds)["y"], peer.run(None, feeds)[0]
    if not np.array_equal(ours, theirs):
        raise SystemExit(f"{name}: glowsdk and onnxruntime disagree")
    mine = median_seconds(compiled.run, feeds, repeat)
    peer_time = median_seconds(lambda f: peer.run(None, f), feeds, repeat)
    return (f"| {name} | {mine * 1e3:.3f} | {peer_time * 1e3:.3f} | {operations / mine / 1e9:.1f} | "
            f"{operations / peer_time / 1e9:.1f} | {mine / peer_time:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"int8 dot product: {'AVX-512 VNNI (vpdpbusd)' if host_has_vnni() else 'portable'}; 1 thread each\n")
    print("| kernel | glowsdk ms | onnxruntime ms | glowsdk GOP/s | onnxruntime GOP/s | ratio |")
    print("|---|---|---|---|---|---|")
    for name, (x_shape, w_shape, attrs) in CONVS.items():
        model, feeds = conv_case(x_shape, w_shape, attrs, rng)
        stride = attrs.get("strides", [1, 1])[0]
        positions = (x_shape[2] // stride) * (x_shape[3] // stride)
        operations = 2 * w_shape[0] * positions * int(np.prod(w_shape[1:]))
        print(measure(name, model, feeds, operations, args.repeat), flush=True)
    for name, (m, k, n) in MATMULS.items():
        model, feeds = matmul_case(m, k, n, rng)
        print(measure(name, model, feeds, 2 * m * k * n, args.repeat), flush=True)


if __name__ == "__main__":
    main()
