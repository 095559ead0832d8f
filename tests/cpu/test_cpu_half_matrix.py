"""float16 and bfloat16 MatMul, Conv, pools and TopK on the CPU backend.

The interpreter computes half operands in float32 and rounds each result once,
so the CPU kernels sum in float32 and round once too. Their float32 sums run in
another order than numpy's, which can move a result across a rounding boundary
of the half kind: results are compared within one unit in the last place of
the half kind (maxima and TopK, which do no arithmetic, bit for bit). Outside
oracles: onnxruntime (float16 MatMul, Conv and pools, which it also computes in
float32), and sums whose exact value is known, which a half-precision running
sum could not reach (it stops growing at 2048 in float16, 256 in bfloat16).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import glowsdk
from cpu_util import make, random_array, run_both, threaded
from glowsdk.backends import get_backend
from glowsdk.compiler.backend import CompileOptions
from glowsdk.compiler.pipeline import compile_function
from glowsdk.graph import ElemKind
from glowsdk.graph.nodes import linalg, nn, reduce

F16, BF16 = ElemKind.FLOAT16, ElemKind.BFLOAT16
HALVES = [F16, BF16]


def assert_within_ulp(got: np.ndarray, want: np.ndarray, kind: ElemKind) -> None:
    """|got - want| within one unit in the last place of `kind` at `want` (bit-equal NaNs aside)."""
    assert got.dtype == want.dtype == kind.dtype
    info = ml_dtypes.finfo(kind.dtype)
    g, w = got.astype(np.float64), want.astype(np.float64)
    ulp = float(info.eps) * np.abs(w) + float(info.smallest_subnormal)
    assert np.array_equal(np.isnan(g), np.isnan(w))
    finite = ~np.isnan(w)
    assert np.all(np.abs(g - w)[finite] <= ulp[finite]), np.abs(g - w).max()


def half_feeds(inputs, kind: ElemKind, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {f"x{i}": random_array(shape, kind, rng) for i, shape in enumerate(inputs)}


def check_half(inputs, kind: ElemKind, build, exact: bool = False, seed: int = 0, **extra) -> dict:
    """Run `build` on cpu and the interpreter over seeded half inputs and compare; the cpu outputs."""
    fn = make([(shape, kind) for shape in inputs], build)
    got, want, _ = run_both(fn, half_feeds(inputs, kind, seed), **extra)
    for name in want:
        if exact or want[name].dtype != kind.dtype:
            np.testing.assert_array_equal(got[name].view(np.uint16) if exact else got[name],
                                          want[name].view(np.uint16) if exact else want[name])
        else:
            assert_within_ulp(got[name], want[name], kind)
    return got


@pytest.mark.parametrize("kind", HALVES)
@pytest.mark.parametrize("a, b", [((7, 9), (9, 13)), ((2, 3, 5), (2, 5, 4)), ((1, 64), (64, 33)), ((3, 0), (0, 4))])
def test_matmul(kind, a, b):
    got = check_half([a, b], kind, lambda fn, v: [fn.add(linalg.MatMul, v[0], v[1])])
    feeds = half_feeds([a, b], kind, 0)
    float32 = np.matmul(feeds["x0"].astype(np.float32), feeds["x1"].astype(np.float32)).astype(kind.dtype)
    assert_within_ulp(got["y0"], float32, kind)


CONVS = [  # input shape, filter shape, attributes: every one a direct convolution for the half kinds
    ((1, 3, 9, 9), (4, 3, 3, 3), dict(strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1], group=1)),
    ((2, 4, 11, 10), (6, 2, 3, 2), dict(strides=[2, 1], pads=[0, 1, 2, 0], dilations=[1, 2], group=2)),
    ((1, 6, 8, 8), (6, 1, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], dilations=[1, 1], group=6)),
    ((1, 5, 7, 7), (8, 5, 1, 1), dict(strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1], group=1)),
    ((2, 3, 17), (4, 3, 5), dict(strides=[3], pads=[2, 1], dilations=[2], group=1)),
]


@pytest.mark.parametrize("kind", HALVES)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("image, weights, attrs", CONVS)
def test_conv(kind, image, weights, attrs, bias):
    inputs = [image, weights] + ([(weights[0],)] if bias else [])
    check_half(inputs, kind, lambda fn, v: [fn.add(nn.Conv, v[0], v[1], v[2] if bias else None,
                                                   kernel=list(weights[2:]), **attrs)])


POOLS = [
    dict(kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], dilations=[1, 1]),
    dict(kernel=[2, 3], strides=[2, 2], pads=[0, 1, 0, 1], dilations=[1, 1], ceil_mode=True),
    dict(kernel=[3, 2], strides=[1, 2], pads=[1, 0, 1, 1], dilations=[2, 1]),
    dict(kernel=[3], strides=[2], pads=[1, 1], dilations=[1]),
]


@pytest.mark.parametrize("kind", HALVES)
@pytest.mark.parametrize("attrs", POOLS)
@pytest.mark.parametrize("op, extra", [(nn.MaxPool, {}), (nn.AveragePool, {}),
                                       (nn.AveragePool, {"count_include_pad": True})])
def test_pool(kind, op, extra, attrs):
    shape = (2, 3, 9, 8)[:2 + len(attrs["kernel"])]
    check_half([shape], kind, lambda fn, v: [fn.add(op, v[0], **attrs, **extra)], exact=op is nn.MaxPool)


@pytest.mark.parametrize("kind", HALVES)
def test_sums_run_in_float32(kind):
    """Sums of ones past where a half-precision running sum stops growing come out exact (to one
    rounding of the true sum)."""
    def ones(*shape: int) -> np.ndarray:
        return np.ones(shape, kind.dtype)

    cases = [  # (input shapes, build, feeds, the exact sum)
        ([(1, 4096), (4096, 2)], lambda fn, v: [fn.add(linalg.MatMul, v[0], v[1])], 4096),
        ([(1, 2100, 2, 2), (1, 2100, 1, 1)],
         lambda fn, v: [fn.add(nn.Conv, v[0], v[1], None, kernel=[1, 1], strides=[1, 1], pads=[0, 0, 0, 0],
                               dilations=[1, 1], group=1)], 2100),
        ([(1, 1, 64, 64)], lambda fn, v: [fn.add(nn.AveragePool, v[0], kernel=[64, 64], strides=[1, 1],
                                                 pads=[0, 0, 0, 0], dilations=[1, 1])], 1),
    ]
    for shapes, build, total in cases:
        fn = make([(shape, kind) for shape in shapes], build)
        got, want, _ = run_both(fn, {f"x{i}": ones(*shape) for i, shape in enumerate(shapes)})
        exact = np.full(want["y0"].shape, total, np.float32).astype(kind.dtype)
        np.testing.assert_array_equal(got["y0"], exact)
        np.testing.assert_array_equal(want["y0"], exact)


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("kind", HALVES)
def test_threads_share_planes(kind, threads):
    """Per-thread float32 scratch planes: any thread count gives the single-thread bits."""
    image, weights, attrs = CONVS[1]

    def build(fn, v):
        conv = fn.add(nn.Conv, v[0], v[1], None, kernel=list(weights[2:]), **attrs)
        return [conv, fn.add(nn.AveragePool, v[0], **POOLS[0]), fn.add(nn.MaxPool, v[0], **POOLS[1])]

    single = check_half([image, weights], kind, build)
    fn = make([(image, kind), (weights, kind)], build)
    many = compile_function(fn, get_backend("cpu"), CompileOptions(extra=threaded(threads)))
    got = many.execute(half_feeds([image, weights], kind, 0))
    for name, value in single.items():
        np.testing.assert_array_equal(got[name].view(np.uint16), value.view(np.uint16))


def _top_k_float32(x: np.ndarray, k: int, largest: bool) -> np.ndarray:
    """Indices of numpy's stable sort of the float32 values along axis 1 (NaN greatest, ties by
    index); the largest by sorting the reversed axis and reading it backwards."""
    wide = x.astype(np.float32)
    if largest:
        order = wide.shape[1] - 1 - np.flip(np.argsort(np.flip(wide, 1), axis=1, kind="stable"), 1)
    else:
        order = np.argsort(wide, axis=1, kind="stable")
    return order[:, :k]


@pytest.mark.parametrize("kind", HALVES)
@pytest.mark.parametrize("largest", [True, False])
def test_top_k_moves_bits(kind, largest):
    """Ties keep index order and -0 ties with 0 (as the interpreter does); NaN is the greatest
    (as numpy's float32 sort has it); every value out is the input's own bits, a NaN's payload too."""
    rng = np.random.default_rng(5)
    x = rng.integers(-3, 4, (3, 11, 4)).astype(np.float32).astype(kind.dtype)
    x.view(np.uint16)[0, 2, 1] = 0x8000

    def build(fn, v):
        return fn.create(reduce.TopK, [v[0]], k=6, axis=1, largest=largest).results

    got, want, _ = run_both(make([((3, 11, 4), kind)], build), {"x0": x})
    np.testing.assert_array_equal(got["y1"], want["y1"])
    np.testing.assert_array_equal(got["y0"].view(np.uint16), want["y0"].view(np.uint16))

    # NaNs against float32 numpy, not the interpreter: it sorts bfloat16 with ml_dtypes, whose
    # comparisons leave a NaN wherever the sort happens to put it.
    bits = x.view(np.uint16)
    bits[1, 5, 3], bits[2, 7, 0] = (0x7C0F, 0xFE01) if kind is F16 else (0x7FA1, 0xFFC3)
    compiled = compile_function(make([((3, 11, 4), kind)], build), get_backend("cpu"))
    got = compiled.execute({"x0": x})
    np.testing.assert_array_equal(got["y1"], _top_k_float32(x, 6, largest))
    np.testing.assert_array_equal(got["y0"].view(np.uint16), np.take_along_axis(bits, got["y1"], axis=1))


def _on_cpu_and_onnxruntime(node, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Output y of a one-node float16 model on the cpu backend and on onnxruntime."""
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(name, TensorProto.FLOAT16, value.shape)
                                            for name, value in inputs.items()],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    got = glowsdk.compile(glowsdk.load(model), "cpu").run(inputs)["y"]
    peer = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return got, peer.run(None, inputs)[0]


ONNX_CASES = [  # node, input shapes
    (helper.make_node("MatMul", ["a", "b"], ["y"]), [(2, 5, 40), (40, 7)]),
    (helper.make_node("Conv", ["a", "b", "c"], ["y"], pads=[1, 0, 1, 2], strides=[1, 2], group=2),
     [(2, 4, 9, 8), (6, 2, 3, 3), (6,)]),
    (helper.make_node("AveragePool", ["a"], ["y"], kernel_shape=[3, 2], pads=[1, 1, 0, 1], strides=[2, 1]),
     [(1, 3, 8, 7)]),
    (helper.make_node("MaxPool", ["a"], ["y"], kernel_shape=[2, 3], strides=[2, 2], ceil_mode=1), [(2, 2, 7, 9)]),
]


@pytest.mark.parametrize("node, shapes", ONNX_CASES, ids=[node.op_type for node, _ in ONNX_CASES])
def test_float16_like_onnxruntime(node, shapes):
    rng = np.random.default_rng(6)
    inputs = {name: rng.standard_normal(shape).astype(np.float16) for name, shape in zip(node.input, shapes)}
    got, want = _on_cpu_and_onnxruntime(node, inputs)
    assert_within_ulp(got, want, F16)
