"""8-bit matrix kernels (IntegerMatMul, IntegerConv, quantized MatMul/Conv), TopK and the empty MatMul.

Integer results are compared bit for bit with the interpreter (the golden
reference) and, for the ONNX operators, with onnx.reference's MatMulInteger and
ConvInteger and onnxruntime's TopK on the same model. Not onnxruntime's integer
products: on an x86 host without VNNI its u8 x s8 kernel adds pairs of products
into int16 with saturation (vpmaddubsw), so on full-range bytes it is wrong there;
onnx.reference sums exactly on every host. Shapes cross the register tile's edges
(rows and columns not multiples of the tile, K not a multiple of 4), and the
int8 GEMM runs both on VNNI (where the host has it) and on its portable
fallback.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import glowsdk
from cpu_util import check, run_both
from glowsdk.backends.cpu.kernels import int8_conv, int8_matmul
from glowsdk.backends.cpu.kernels.int8_gemm import host_has_vnni
from glowsdk.graph import ElemKind, Module, Type
from glowsdk.graph.nodes import elementwise as ew, linalg, nn, quant, reduce

I8, U8, I32, F32 = ElemKind.INT8, ElemKind.UINT8, ElemKind.INT32, ElemKind.FLOAT32
ONNX_KIND = {I8: TensorProto.INT8, U8: TensorProto.UINT8}


@pytest.fixture(params=["vnni", "portable"])
def dot_product(request, monkeypatch):
    """Run a test on the VNNI kernel (skipped on a host without it) and on the portable one."""
    if request.param == "vnni" and not host_has_vnni():
        pytest.skip("host has no AVX-512 VNNI: the vpdpbusd kernel cannot execute here; the portable variant still runs")
    if request.param == "portable":
        monkeypatch.setattr(int8_matmul, "host_has_vnni", lambda: False)
        monkeypatch.setattr(int8_conv, "host_has_vnni", lambda: False)
    return request.param


def raw(kind: ElemKind, shape, rng: np.random.Generator) -> np.ndarray:
    """Bytes over the kind's whole range."""
    info = np.iinfo(kind.dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(kind.dtype)


def onnx_model(node, inputs, outputs, initializers=()):
    graph = helper.make_graph([node], "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def on_cpu(model, feeds):
    """Outputs of the model on the cpu backend, asserted equal to the interpreter's."""
    network = glowsdk.load(model)
    got = glowsdk.compile(network, "cpu").run(feeds)
    want = glowsdk.compile(network, "interpreter").run(feeds)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    return got


def on_reference(model, feeds):
    """onnx.reference's outputs by name: exact integer sums on every host."""
    return dict(zip([o.name for o in model.graph.output], ReferenceEvaluator(model).run(None, feeds)))


def on_onnxruntime(model, feeds):
    """onnxruntime's outputs by name (for TopK: an ordering, the same on every host)."""
    peer = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in peer.get_outputs()], peer.run(None, feeds)))


@pytest.mark.parametrize("kinds", [(U8, I8), (I8, I8), (U8, U8), (I8, U8)])
@pytest.mark.parametrize("weights", [False, True], ids=["runtime-rhs", "constant-rhs"])
def test_matmul_integer_like_the_reference(dot_product, kinds, weights):
    left, right = kinds
    rng = np.random.default_rng(3)
    a, b = raw(left, (2, 11, 37), rng), raw(right, (37, 53), rng)
    a_zero, b_zero = raw(left, (), rng), raw(right, (53,), rng)
    inits = [numpy_helper.from_array(b_zero, "bz")] + ([numpy_helper.from_array(b, "b")] if weights else [])
    inputs = [helper.make_tensor_value_info("a", ONNX_KIND[left], a.shape),
              helper.make_tensor_value_info("az", ONNX_KIND[left], ())]
    if not weights:
        inputs.append(helper.make_tensor_value_info("b", ONNX_KIND[right], b.shape))
    model = onnx_model(helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"]), inputs,
                       [helper.make_tensor_value_info("y", TensorProto.INT32, None)], inits)
    feeds = {"a": a, "az": a_zero} | ({} if weights else {"b": b})
    np.testing.assert_array_equal(on_cpu(model, feeds)["y"], on_reference(model, feeds)["y"])


@pytest.mark.parametrize("kinds", [(U8, I8), (I8, I8), (U8, U8)])
@pytest.mark.parametrize("form", [
    ((1, 6, 9, 9), (20, 3, 3, 3), {"pads": [1, 1, 1, 1], "group": 2}),
    ((2, 5, 8, 7), (9, 5, 2, 3), {"strides": [2, 1], "dilations": [1, 2], "pads": [0, 2, 1, 0]}),
    ((1, 16, 7, 7), (50, 16, 1, 1), {}),
], ids=["grouped-padded", "strided-dilated", "pointwise"])
def test_conv_integer_like_the_reference(dot_product, kinds, form):
    x_kind, w_kind = kinds
    x_shape, w_shape, attrs = form
    rng = np.random.default_rng(5)
    x, w = raw(x_kind, x_shape, rng), raw(w_kind, w_shape, rng)
    x_zero, w_zero = raw(x_kind, (), rng), raw(w_kind, (), rng)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w_zero, "wz")]
    inputs = [helper.make_tensor_value_info("x", ONNX_KIND[x_kind], x.shape),
              helper.make_tensor_value_info("xz", ONNX_KIND[x_kind], ())]
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)
    model = onnx_model(node, inputs, [helper.make_tensor_value_info("y", TensorProto.INT32, None)], inits)
    feeds = {"x": x, "xz": x_zero}
    np.testing.assert_array_equal(on_cpu(model, feeds)["y"], on_reference(model, feeds)["y"])


@pytest.mark.parametrize("kind", [I8, U8])
def test_integer_conv_runtime_filter_per_channel_zero_and_bias(dot_product, kind):
    """Every operand a placeholder: the filter packed at run time, one zero point per filter."""
    rng = np.random.default_rng(7)
    shapes = [((1, 4, 6, 5), kind), ((10, 2, 3, 3), kind), ((), kind), ((10,), kind), ((10,), I32)]
    feeds = {f"x{i}": raw(k, s, rng) for i, (s, k) in enumerate(shapes)}
    check(shapes, lambda fn, v: [fn.add(quant.IntegerConv, *v, kernel=(3, 3), strides=(1, 2), pads=(1, 0, 2, 1),
                                        dilations=(1, 1), group=2)], feeds=feeds)


QUANTIZED = {ElemKind.QINT8: (0.02, -5), ElemKind.QUINT8: (0.03, 131)}


def _quantized_graph(build, types, constant_rhs):
    module = Module()
    fn = module.create_function("main")
    left = module.create_placeholder("x0", types[0]).result()
    if constant_rhs is not None:
        right = module.create_constant("w", constant_rhs, types[1]).result()
    else:
        right = module.create_placeholder("x1", types[1]).result()
    fn.save(build(fn, left, right), "y0")
    return fn


@pytest.mark.parametrize("left", list(QUANTIZED))
@pytest.mark.parametrize("right", list(QUANTIZED))
@pytest.mark.parametrize("constant", [False, True], ids=["runtime", "constant"])
def test_quantized_matmul_and_conv_give_the_wrapping_accumulator(dot_product, left, right, constant):
    """K large enough that extreme bytes overflow int32: the sum wraps modulo 2^32 as the reference's."""
    rng = np.random.default_rng(11)
    depth = 140000
    lhs, rhs = Type(left, (3, depth), *QUANTIZED[left]), Type(right, (depth, 5), *QUANTIZED[right])
    low = np.iinfo(left.dtype).min
    a = np.full((3, depth), low, left.dtype)
    a[1] = raw(left, (depth,), rng)
    b = np.where(np.arange(5) % 2, np.iinfo(right.dtype).min, np.iinfo(right.dtype).max).repeat(depth)
    b = b.reshape(5, depth).T
    b = b.astype(right.dtype)
    fn = _quantized_graph(lambda f, x, w: f.add(linalg.MatMul, x, w), [lhs, rhs], b if constant else None)
    feeds = {"x0": a} | ({} if constant else {"x1": b})
    got, want, _ = run_both(fn, feeds)
    np.testing.assert_array_equal(got["y0"], want["y0"])
    exact = (a.astype(np.int64) - QUANTIZED[left][1]) @ (b.astype(np.int64) - QUANTIZED[right][1])
    assert np.abs(exact).max() > 2**31  # the case does overflow
    np.testing.assert_array_equal(got["y0"], exact.astype(np.int32))

    x_type = Type(left, (1, 3, 6, 6), *QUANTIZED[left])
    w_type = Type(right, (7, 3, 3, 3), *QUANTIZED[right])
    w = raw(right, (7, 3, 3, 3), rng)
    conv = _quantized_graph(lambda f, x, f_: f.add(nn.Conv, x, f_, None, kernel=(3, 3), strides=(1, 1),
                                                   pads=(1, 1, 1, 1), dilations=(1, 1), group=1),
                            [x_type, w_type], w if constant else None)
    feeds = {"x0": raw(left, (1, 3, 6, 6), rng)} | ({} if constant else {"x1": w})
    got, want, _ = run_both(conv, feeds)
    np.testing.assert_array_equal(got["y0"], want["y0"])


def test_integer_matmul_broadcasts_leading_dims(dot_product):
    shapes = [((2, 1, 4, 9), U8), ((3, 9, 17), I8), ((), U8), ((17,), I8)]
    check(shapes, lambda fn, v: [fn.add(quant.IntegerMatMul, *v)])


def test_matmul_with_an_empty_inner_dim_is_zero():
    """(2, 0) x (0, 3) sums nothing: zeros, also with an element-wise op stacked after it."""
    compiled = check([((2, 0), F32), ((0, 3), F32), ((2, 3), F32)],
                     lambda fn, v: [fn.add(linalg.MatMul, v[0], v[1]),
                                    fn.add(ew.Add, fn.add(linalg.MatMul, v[0], v[1]), v[2])])
    out = compiled.execute({"x0": np.zeros((2, 0), np.float32), "x1": np.zeros((0, 3), np.float32),
                            "x2": np.zeros((2, 3), np.float32)})
    np.testing.assert_array_equal(out["y0"], np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("kind", [I8, ElemKind.UINT16, ElemKind.INT64, ElemKind.FLOAT64])
def test_integer_and_float64_matmul(kind):
    check([((3, 5, 7), kind), ((3, 7, 4), kind)], lambda fn, v: [fn.add(linalg.MatMul, v[0], v[1])])


@pytest.mark.parametrize("kind,dtype", [(F32, np.float32), (ElemKind.INT32, np.int32), (U8, np.uint8),
                                        (ElemKind.INT64, np.int64)])
@pytest.mark.parametrize("largest", [True, False])
def test_top_k_like_onnxruntime(kind, dtype, largest):
    """Many ties: equal values keep index order, lower index first, as onnxruntime's sorted TopK."""
    x = np.random.default_rng(2).integers(0, 4, (3, 9, 4)).astype(dtype)
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=int(largest), sorted=1)
    onnx_kind = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = onnx_model(node, [helper.make_tensor_value_info("x", onnx_kind, x.shape)],
                       [helper.make_tensor_value_info("v", onnx_kind, None),
                        helper.make_tensor_value_info("i", TensorProto.INT64, None)],
                       [numpy_helper.from_array(np.array([5], np.int64), "k")])
    got, want = on_cpu(model, {"x": x}), on_onnxruntime(model, {"x": x})
    np.testing.assert_array_equal(got["v"], want["v"])
    np.testing.assert_array_equal(got["i"], want["i"])


def test_top_k_nan_is_the_greatest():
    x = np.array([[1.0, np.nan, -np.inf, 3.0, np.nan, 3.0, 0.0]], np.float32)
    for largest in (True, False):
        compiled = check([((1, 7), F32)], lambda fn, v: fn.create(reduce.TopK, [v[0]], k=7, axis=1,
                                                                  largest=largest).results,
                         feeds={"x0": x})
        order = compiled.execute({"x0": x})["y1"][0]
        assert list(order) == ([1, 4, 3, 5, 0, 6, 2] if largest else [2, 6, 0, 3, 5, 1, 4])


@pytest.mark.parametrize("k,axis", [(1, 0), (4, 2), (0, 1)])
def test_top_k_shapes(k, axis):
    check([((3, 4, 5), ElemKind.INT16)], lambda fn, v: fn.create(reduce.TopK, [v[0]], k=k, axis=axis).results)
