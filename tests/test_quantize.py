"""Quantization (paper 4): parameters, the integer semantics against oracles we did not write
(onnx.reference's QLinearConv/QLinearMatMul/ConvInteger, exact rational arithmetic, the NPU's
numerics), the conversion into integer islands, and the quantization passes."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from glowsdk import numerics
from glowsdk.errors import GlowError
from glowsdk.graph import ElemKind, Module, Type, nodes
from glowsdk.graph.nodes import linalg, nn, quant
from glowsdk.quantization import (ValueProfile, calibrated_range, choose_params)
from glowsdk.reference.evaluator import evaluate

QI8, QI32, F32 = ElemKind.QINT8, ElemKind.QINT32, ElemKind.FLOAT32
RNG = np.random.default_rng(0)


def f32(value: float) -> float:
    return float(np.float32(value))


# -- parameters ---------------------------------------------------------------------------------
@pytest.mark.parametrize("lo, hi", [(-1.0, 3.0), (0.0, 6.0), (-5.0, -1.0), (2.0, 2.5), (-0.3, 0.0)])
def test_asymmetric_covers_the_range_and_zero_exactly(lo, hi):
    scale, offset = choose_params(lo, hi, "asymmetric")
    assert -128 <= offset <= 127
    lo0, hi0 = min(lo, 0.0), max(hi, 0.0)
    assert (-128 - offset) * scale <= lo0 + scale / 2 and (127 - offset) * scale >= hi0 - scale / 2
    assert scale == pytest.approx((hi0 - lo0) / 255, rel=1e-6)


def test_symmetric_schemas():
    assert choose_params(-1.0, 3.0, "symmetric") == (f32(6.0 / 255), 0)
    assert choose_params(0.0, 5.1, "symmetric-uint8") == (f32(5.1 / 255), -128)
    assert choose_params(-1.0, 5.1, "symmetric-uint8") == choose_params(-1.0, 5.1, "symmetric")
    scale, offset = choose_params(-1.0, 3.0, "power2")
    assert offset == 0 and math.log2(scale).is_integer() and 6.0 / 255 <= scale < 12.0 / 255


def test_scales_are_float32_numbers():
    for schema in ("asymmetric", "symmetric", "symmetric-uint8", "power2"):
        scale, _ = choose_params(-0.123, 1.234567, schema)
        assert scale == f32(scale)


def profiled(name: str, data: np.ndarray) -> ValueProfile:
    value = ValueProfile(name, "Conv", "float32", data.shape)
    value.add(data)
    return value


def test_percentile_and_kl_clip_outliers_that_minmax_keeps():
    data = np.concatenate([RNG.standard_normal(200_000), [80.0, -60.0]]).astype(np.float32)
    value = profiled("v", data)
    assert calibrated_range(value, "minmax") == (pytest.approx(-60.0), pytest.approx(80.0))
    lo, hi = calibrated_range(value, "percentile")
    assert -6.0 < lo < -2.0 and 2.0 < hi < 6.0
    lo, hi = calibrated_range(value, "kl")  # its resolution is the histogram's: at least 128 bins kept
    assert -30.0 < lo < -2.0 and 2.0 < hi < 30.0


def test_kl_keeps_a_range_without_outliers():
    value = profiled("u", RNG.uniform(0.0, 4.0, 100_000).astype(np.float32))
    lo, hi = calibrated_range(value, "kl")
    assert lo >= 0.0 and hi > 3.5


# -- integer semantics against oracles ----------------------------------------------------------
def qlinear_conv_model(w: np.ndarray, b: np.ndarray, scales, zeros, shape) -> onnx.ModelProto:
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
                            pads=[1, 1, 1, 1], strides=[2, 1])
    inits = [numpy_helper.from_array(np.float32(v).reshape(()), n) for v, n in zip(scales, ("xs", "ws", "ys"))]
    inits += [numpy_helper.from_array(np.int8(v).reshape(()), n) for v, n in zip(zeros, ("xz", "wz", "yz"))]
    inits += [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.INT8, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("trial", range(6))
def test_quantized_conv_and_rescale_are_bit_exact_with_onnx_qlinearconv(trial):
    rng = np.random.default_rng(trial)
    sx, sw, sy = (f32(v) for v in rng.uniform(0.001, 0.1, 3))
    ox, oy = (int(v) for v in rng.integers(-30, 30, 2))
    x = rng.integers(-128, 128, (2, 4, 7, 6)).astype(np.int8)
    w = rng.integers(-127, 128, (3, 4, 3, 3)).astype(np.int8)
    b = rng.integers(-9000, 9000, (3,)).astype(np.int32)
    module = Module()
    fn = module.create_function("main")
    xin = module.create_placeholder("x", Type(QI8, x.shape, sx, ox)).result()
    wc = module.create_constant("w", w, Type(QI8, w.shape, sw, 0)).result()
    bc = module.create_constant("b", b, Type(QI32, b.shape, sx * sw, 0)).result()
    acc = fn.add(nn.Conv, xin, wc, bc, kernel=[3, 3], strides=[2, 1], pads=[1, 1, 1, 1], dilations=[1, 1])
    assert acc.type.elem is QI32 and acc.type.scale == sx * sw and acc.type.offset == 0
    fn.save(fn.add(quant.Rescale, acc, result_type=Type(QI8, acc.type.shape, sy, oy)), "y")
    ours = evaluate(fn, {"x": x})["y"]
    oracle = ReferenceEvaluator(qlinear_conv_model(w, b, (sx, sw, sy), (ox, 0, oy), x.shape)).run(None, {"x": x})[0]
    np.testing.assert_array_equal(ours, oracle)


def test_quantized_matmul_accumulator_is_onnx_matmulinteger():
    a = RNG.integers(-128, 128, (5, 7)).astype(np.int8)
    b = RNG.integers(-128, 128, (7, 3)).astype(np.int8)
    module = Module()
    fn = module.create_function("main")
    lhs = module.create_placeholder("a", Type(QI8, a.shape, 0.5, -7)).result()
    rhs = module.create_constant("b", b, Type(QI8, b.shape, 0.25, 3)).result()
    product = fn.add(linalg.MatMul, lhs, rhs)
    assert product.type == Type(QI32, (5, 3), 0.125, 0)
    fn.save(product, "y")
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.INT8, v.shape)
                                            for n, v in (("a", a), ("b", b))],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                              [numpy_helper.from_array(np.int8(-7).reshape(()), "az"),
                               numpy_helper.from_array(np.int8(3).reshape(()), "bz")])
    oracle = ReferenceEvaluator(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    np.testing.assert_array_equal(evaluate(fn, {"a": a})["y"], oracle.run(None, {"a": a, "b": b})[0])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(1 << 24), 1 << 24), min_size=1, max_size=8),
       st.floats(1e-4, 10.0), st.floats(1e-4, 10.0), st.integers(-5, 5), st.integers(-128, 127))
def test_rescale_is_the_npu_requantize_and_exact_rounding(values, s_in, s_out, off_in, off_out):
    s_in, s_out = f32(s_in), f32(s_out)
    q = np.array(values, np.int32)
    module = Module()
    fn = module.create_function("main")
    x = module.create_placeholder("x", Type(QI32, q.shape, s_in, off_in)).result()
    fn.save(fn.add(quant.Rescale, x, result_type=Type(QI8, q.shape, s_out, off_out)), "y")
    ours = evaluate(fn, {"x": q})["y"]
    multiplier, shift = quant.fixed_point_multiplier(s_in, s_out)
    npu = numerics.requantize(q.astype(np.int64) - off_in, multiplier, shift, off_out)
    ratio = Fraction(float(np.float32(s_in) / np.float32(s_out)))
    exact = [min(max(round((int(v) - off_in) * ratio) + off_out, -128), 127) for v in q]
    np.testing.assert_array_equal(ours, npu)
    assert ours.tolist() == exact


def pool_graph(kind, type_, **attrs):
    module = Module()
    fn = module.create_function("main")
    x = module.create_placeholder("x", type_).result()
    fn.save(fn.add(kind, x, **attrs), "y")
    return fn


@pytest.mark.parametrize("count_include_pad", [False, True])
def test_quantized_average_pool_rounds_half_to_even_on_raw_values(count_include_pad):
    x = RNG.integers(-128, 128, (1, 2, 5, 5)).astype(np.int8)
    offset = 9
    fn = pool_graph(nn.AveragePool, Type(QI8, x.shape, 0.1, offset), kernel=[2, 2], strides=[2, 2],
                    pads=[1, 1, 0, 0], dilations=[1, 1], ceil_mode=True, count_include_pad=count_include_pad)
    ours = evaluate(fn, {"x": x})["y"]
    padded = np.full((1, 2, 6, 6), None, object)
    padded[:, :, 1:, 1:] = x
    expected = np.zeros(ours.shape, np.int64)
    for c in range(2):
        for i in range(ours.shape[2]):
            for j in range(ours.shape[3]):
                cells = [(2 * i + a, 2 * j + b) for a in range(2) for b in range(2) if 2 * i + a < 6 and 2 * j + b < 6]
                inside = [int(padded[0, c, r, k]) for r, k in cells if padded[0, c, r, k] is not None]
                pads = len(cells) - len(inside) if count_include_pad else 0
                expected[0, c, i, j] = round(Fraction(sum(inside) + pads * offset, len(inside) + pads))
    np.testing.assert_array_equal(ours, expected)


def test_same_type_add_sub_saturate_and_max_compares_raw():
    module = Module()
    fn = module.create_function("main")
    t = Type(QI8, (4,), 0.5, 10)
    a = module.create_placeholder("a", t).result()
    b = module.create_placeholder("b", t).result()
    for kind in (nodes.Add, nodes.Sub, nodes.Max):
        fn.save(fn.add(kind, a, b), f"y_{kind.spec.name}")
    qa, qb = np.array([100, -128, 10, 127], np.int8), np.array([100, -128, 20, -100], np.int8)
    out = evaluate(fn, {"a": qa, "b": qb})
    real = lambda q: (q.astype(np.int64) - 10) * 0.5  # noqa: E731
    assert out["y_Add"].tolist() == [127, -128, 20, 17]  # 45 + 45 and -69 + -69 saturate
    assert real(out["y_Sub"]).tolist() == [0.0, 0.0, -5.0, 58.5]  # 113.5 saturates to 58.5
    assert out["y_Max"].tolist() == [100, -128, 20, 127]


def test_mixed_quantized_operands_are_rejected():
    module = Module()
    fn = module.create_function("main")
    a = module.create_placeholder("a", Type(QI8, (4,), 0.5, 0)).result()
    b = module.create_placeholder("b", Type(QI8, (4,), 0.25, 0)).result()
    with pytest.raises(GlowError, match="share one element kind"):
        fn.add(nodes.Add, a, b)
    bias = module.create_constant("bias", np.zeros(2, np.int32), Type(QI32, (2,), 0.3, 0)).result()
    w = module.create_constant("w", np.zeros((2, 1, 1, 1), np.int8), Type(QI8, (2, 1, 1, 1), 0.5, 0)).result()
    x = module.create_placeholder("x", Type(QI8, (1, 1, 2, 2), 0.5, 0)).result()
    with pytest.raises(GlowError, match="accumulator"):
        fn.add(nn.Conv, x, w, bias, kernel=[1, 1], strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1])
