"""MaxPool and AveragePool on the cpu backend against onnx.reference, on rows wide enough for the
SIMD columns (kernels/pool.py): strides 1 to 5, pads, dilations, ceil_mode, 1-d to 3-d windows,
float, integer and half kinds, NaN, and 1 or 2 threads."""
from __future__ import annotations

import platform
import re

import numpy as np
import pytest
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator

from glowsdk.backends import get_backend
from glowsdk.backends.cpu.kernels.pool import simd_columns
from glowsdk.backends.cpu.kernels.window import Dim
from cpu_util import threaded
from glowsdk.cli.main import main
from glowsdk.compiler.backend import CompileOptions
from glowsdk.compiler.pipeline import compile_function
from glowsdk.frontend.onnx.importer import import_model

WINDOWS = [  # input shape, attributes
    ((2, 3, 23, 47), dict(kernel_shape=[3, 3], strides=[2, 2])),
    ((1, 4, 20, 40), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),
    ((1, 2, 21, 50), dict(kernel_shape=[2, 3], strides=[2, 3], pads=[0, 1, 1, 1], ceil_mode=1)),
    ((1, 2, 17, 61), dict(kernel_shape=[3, 3], strides=[1, 2], pads=[2, 2, 2, 2], dilations=[2, 3])),
    ((1, 2, 9, 70), dict(kernel_shape=[2, 5], strides=[1, 4], pads=[1, 2, 0, 3])),
    ((1, 2, 9, 90), dict(kernel_shape=[3, 2], strides=[2, 5])),
    ((2, 3, 66), dict(kernel_shape=[4], strides=[2], pads=[1, 2])),
    ((1, 2, 5, 6, 40), dict(kernel_shape=[2, 2, 3], strides=[1, 2, 2], pads=[0, 1, 0, 1, 0, 1])),
]


def single_op_model(op: str, x: np.ndarray, **attrs) -> onnx.ModelProto:
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    dtype = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph([node], op.lower(), [helper.make_tensor_value_info("x", dtype, x.shape)],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def reference_run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """onnx.reference: an oracle glowsdk did not write."""
    return np.asarray(ReferenceEvaluator(model).run(None, {"x": x})[0])


def compiled_run(model, x: np.ndarray, threads: int) -> np.ndarray:
    module = import_model(model, input_shapes={"x": x.shape})
    options = CompileOptions(extra=threaded(threads))
    return compile_function(module.functions["main"], get_backend("cpu"), options).execute({"x": x})["y"]


def sample(shape: tuple[int, ...], dtype: np.dtype, nans: bool) -> np.ndarray:
    rng = np.random.default_rng(sum(shape))
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
    x = rng.standard_normal(shape).astype(dtype)
    if nans:
        x.flat[rng.choice(x.size, x.size // 50, replace=False)] = np.nan
    return x


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape, attrs", WINDOWS)
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_float_pools_match_onnx_reference(op, shape, attrs, threads):
    for nans in ((False, True) if op == "MaxPool" else (False,)):
        x = sample(shape, np.float32, nans)
        extra = {"count_include_pad": 1} if op == "AveragePool" and "pads" in attrs else {}
        model = single_op_model(op, x, **attrs, **extra)
        expected = reference_run(model, x)
        if nans:  # a window holding a NaN gives NaN, as np.maximum does
            hit = reference_run(model, np.isnan(x).astype(np.float32)) > 0
            expected = np.where(hit, np.nan, reference_run(model, np.where(np.isnan(x), -np.inf, x)))
        np.testing.assert_allclose(compiled_run(model, x, threads), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int8, np.uint8, np.int32])
def test_max_pool_other_kinds_match_onnx_reference(dtype):
    """onnx.reference cannot pool integers (it pads them with NaN), so integers are checked
    against its float64 result, which holds every int32 exactly."""
    for shape, attrs in WINDOWS[:3] + WINDOWS[5:6]:
        x = sample(shape, np.dtype(dtype), nans=False)
        model = single_op_model("MaxPool", x, **attrs)
        if np.issubdtype(dtype, np.integer):
            wide = x.astype(np.float64)
            expected = reference_run(single_op_model("MaxPool", wide, **attrs), wide).astype(dtype)
        else:
            expected = reference_run(model, x)
        np.testing.assert_array_equal(compiled_run(model, x, 1), expected)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_average_pool_other_kinds_match_onnx_reference(dtype):
    shape, attrs = WINDOWS[1]
    x = sample(shape, np.dtype(dtype), nans=False)
    model = single_op_model("AveragePool", x, **attrs)
    np.testing.assert_allclose(compiled_run(model, x, 1).astype(np.float64), reference_run(model, x),
                               rtol=1e-3 if dtype == np.float16 else 1e-12)


def test_simd_columns_keep_every_wide_load_inside_the_row():
    """The SIMD span of a row: its windows and its stride x width loads stay inside the input;
    the span is as wide as that allows."""
    for size in range(1, 80):
        for kernel, stride, dilation, begin in ((3, 2, 1, 0), (3, 1, 1, 1), (2, 4, 1, 2), (3, 3, 2, 2), (5, 5, 1, 0)):
            out = (size + 2 * begin - dilation * (kernel - 1) - 1) // stride + 1
            if out < 1:
                continue
            dim = Dim(size, out, kernel, stride, dilation, begin, begin)
            width, first, last = simd_columns(dim, 16)
            if stride > 4:
                assert width == 0
                continue
            fits = [o for o in range(out) if o * stride - begin >= 0
                    and o * stride + (kernel - 1) * dilation - begin + stride - 1 < size]
            if width:
                assert (first, last) == (fits[0], fits[-1] + 1) and last - first >= width >= 4
            else:
                assert len(fits) < 4


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="checks x86 mnemonics")
def test_pool_kernel_is_vector_code(tmp_path):
    """A 3x3 stride-2 MaxPool compiles to packed-float compares or maxima, not a scalar loop."""
    x = sample((1, 8, 33, 65), np.float32, nans=False)
    path, asm = tmp_path / "pool.onnx", tmp_path / "pool.s"
    onnx.save(single_op_model("MaxPool", x, kernel_shape=[3, 3], strides=[2, 2]), path)
    assert main(["compile", str(path), "--target", "cpu", "--no-cache", "--dump-asm", str(asm)]) == 0
    text = asm.read_text()
    start = re.search(r"^\"?maxpool\S*:$", text, re.MULTILINE).start()
    kernel = text[start:text.index(".Lfunc_end", start)]
    assert re.search(r"\bv?(cmp\w*ps|maxps)\b", kernel)
