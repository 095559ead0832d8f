"""Helpers for the CPU backend tests: build a small graph, run it on cpu and on the interpreter.

The interpreter is the golden reference. Tolerances, for float32 (eps = 1.2e-7):
element-wise kinds and data movement are exact or within a few ulp (libm's exp,
tanh, pow are correctly rounded to about 1 ulp, numpy's to about 1 ulp too), so
they are compared with rtol ELEMENTWISE_RTOL = 1e-5. Kernels that accumulate
(MatMul, Conv, pooling averages, reductions) add in another order than numpy's
BLAS or pairwise sums; the difference is bounded by about K * eps times the sum
of the magnitudes of the K terms, so they are compared with an absolute error
of ACCUMULATE_TOL = 1e-4 times the largest reference magnitude (K <= 500 here).
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Callable, Sequence

import numpy as np
import onnx
from onnx import helper

from glowsdk.backends import get_backend
from glowsdk.compiler.backend import CompileOptions
from glowsdk.compiler.pipeline import compile_function
from glowsdk.graph import ElemKind, Module, Type
from glowsdk.graph.function import Function
from glowsdk.graph.node import NodeValue

ELEMENTWISE_RTOL = 1e-5
ACCUMULATE_TOL = 1e-4

Build = Callable[[Function, list[NodeValue]], Sequence[NodeValue]]


def random_array(shape: Sequence[int], kind: ElemKind, rng: np.random.Generator) -> np.ndarray:
    """Seeded inputs: normal floats, small integers of both signs, or random bools."""
    if kind is ElemKind.BOOL:
        return rng.random(shape) < 0.5
    if kind.is_float:
        return rng.standard_normal(shape).astype(kind.dtype)
    low = 0 if kind.dtype.kind == "u" else -50
    return rng.integers(low, 50, shape).astype(kind.dtype)


def make(inputs: Sequence[tuple[Sequence[int], ElemKind]], build: Build) -> Function:
    """A function over placeholders x0, x1.. of the given shapes and kinds, saving what `build` returns."""
    module = Module()
    fn = module.create_function("main")
    values = [module.create_placeholder(f"x{i}", Type(kind, shape)).result()
              for i, (shape, kind) in enumerate(inputs)]
    for i, value in enumerate(build(fn, values)):
        fn.save(value, f"y{i}")
    return fn


def threaded(threads: int, **extra) -> dict:
    """Backend options for `threads` threads that share every kernel that can be shared: the tests'
    small shapes fall under the default split_min_us, and they are here to test the sharing."""
    return {"threads": threads, **({"split_min_us": 0} if threads > 1 else {}), **extra}


def run_both(fn: Function, feeds: dict[str, np.ndarray], **extra) -> tuple[dict, dict, object]:
    """Outputs on cpu and on the interpreter, and the cpu compiled function (with `threads`, every
    kernel that can be is shared: see threaded)."""
    if "threads" in extra:
        extra = threaded(**extra)
    cpu = compile_function(fn, get_backend("cpu"), CompileOptions(extra=extra))
    want = compile_function(fn, get_backend("interpreter")).execute(feeds)
    return cpu.execute(feeds), want, cpu


def check(inputs: Sequence[tuple[Sequence[int], ElemKind]], build: Build, accumulates: bool = False,
          seed: int = 0, feeds: dict[str, np.ndarray] | None = None, **extra) -> object:
    """Run `build` over seeded random inputs on both backends and compare; the cpu function."""
    rng = np.random.default_rng(seed)
    fn = make(inputs, build)
    if feeds is None:
        feeds = {f"x{i}": random_array(shape, kind, rng) for i, (shape, kind) in enumerate(inputs)}
    got, want, compiled = run_both(fn, feeds, **extra)
    assert got.keys() == want.keys()
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        if accumulates:
            scale = float(np.abs(want[name]).max(initial=0.0))
            np.testing.assert_allclose(got[name], want[name], rtol=0, atol=ACCUMULATE_TOL * max(scale, 1.0))
        elif want[name].dtype.kind == "f":
            np.testing.assert_allclose(got[name], want[name], rtol=ELEMENTWISE_RTOL, atol=1e-7, equal_nan=True)
        else:
            np.testing.assert_array_equal(got[name], want[name])
    return compiled


def run_on_avx2(test_file: str, body: str) -> None:
    """Run `body` in a child interpreter that generates AVX2 code, with the test module `test_file` imported
    as `t`: the ISA is read once per process, so the AVX2 path of a kernel needs a process of its own."""
    here = os.path.dirname(os.path.abspath(test_file))
    module = os.path.splitext(os.path.basename(test_file))[0]
    script = ("import sys; sys.path[:0] = sys.argv[1:]\n"
              f"import {module} as t\n"
              "from glowsdk.backends.cpu.jit import host_isa\n"
              "assert host_isa() in ('AVX2', 'AVX', 'SSE2'), host_isa()\n" + body)
    env = dict(os.environ, GLOWSDK_CPU_ISA="avx2")
    result = subprocess.run([sys.executable, "-c", script, here, os.path.dirname(here)], env=env, check=False,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


def residual_model(name: str, nodes: list, image: Sequence[int], out: Sequence[int], weights: list,
                   rng: np.random.Generator) -> tuple:
    """An opset-13 ONNX model of `nodes` reading the image "x" and a residual "r" of the output's shape,
    writing "y", and seeded feeds for both: the shape of the kernel tests that compare with onnxruntime."""
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(image)),
                                            helper.make_tensor_value_info("r", onnx.TensorProto.FLOAT, list(out))],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, list(out))], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    feeds = {"x": rng.standard_normal(image).astype(np.float32), "r": rng.standard_normal(out).astype(np.float32)}
    return model, feeds
