"""The quant family, quantized element-wise kinds and integer/quantized pools on the CPU backend.

Every result is compared bit for bit with the interpreter (the golden reference),
and, where one exists, with an outside oracle: onnx.reference's QuantizeLinear,
DequantizeLinear and MaxPool (with its Indices output), or exact rational
arithmetic (fractions) for the fixed-point rules.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Callable, Sequence

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import glowsdk
from cpu_util import run_both
from glowsdk.backends import get_backend
from glowsdk.compiler.pipeline import compile_function
from glowsdk.errors import UnsupportedError
from glowsdk.graph import ElemKind, Module, Type
from glowsdk.graph.function import Function
from glowsdk.graph.nodes import elementwise as ew, nn, quant
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile

F32, F64, I8, U8 = ElemKind.FLOAT32, ElemKind.FLOAT64, ElemKind.INT8, ElemKind.UINT8
QI8, QU8, QI32 = ElemKind.QINT8, ElemKind.QUINT8, ElemKind.QINT32
PARAMS = {QI8: (0.05, -3), QU8: (0.1, 128), QI32: (0.001, 7)}
"""A per-tensor scale and offset per quantized kind."""


def qtype(kind: ElemKind, shape: Sequence[int], scale: float | None = None, offset: int | None = None) -> Type:
    if not kind.is_quantized:
        return Type(kind, tuple(shape))
    base_scale, base_offset = PARAMS[kind]
    return Type(kind, tuple(shape), base_scale if scale is None else scale, base_offset if offset is None else offset)


def graph(types: Sequence[Type], build: Callable[[Function, list], Sequence]) -> Function:
    module = Module()
    fn = module.create_function("main")
    values = [module.create_placeholder(f"x{i}", t).result() for i, t in enumerate(types)]
    for i, value in enumerate(build(fn, values)):
        fn.save(value, f"y{i}")
    return fn


def raw(kind: ElemKind, shape: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    """Raw integers over the kind's whole range, its extremes included."""
    info = np.iinfo(kind.dtype)
    low, high = max(int(info.min), -(1 << 20)), min(int(info.max), 1 << 20)
    values = rng.integers(low, high + 1, shape).astype(kind.dtype)
    flat = values.reshape(-1)
    flat[:2] = [low, high][:flat.size]
    return values


def same(fn: Function, feeds: dict[str, np.ndarray]) -> tuple[dict, object]:
    """Run on cpu and the interpreter; assert bit-exact equality; the cpu outputs and compiled function."""
    got, want, compiled = run_both(fn, feeds)
    assert got.keys() == want.keys()
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    return got, compiled


@pytest.mark.parametrize("kind", [QI8, QU8, QI32])
@pytest.mark.parametrize("source", [F32, F64])
def test_quantize_rounds_ties_to_even_like_onnx(kind, source):
    scale, offset = PARAMS[kind]
    steps = np.arange(-300, 300, dtype=np.float64)
    x = ((steps + 0.5) * scale).astype(source.dtype).reshape(20, 30)  # ties, and saturation for 8 bits
    fn = graph([Type(source, x.shape)], lambda f, v: [f.add(quant.Quantize, v[0], result_type=qtype(kind, x.shape))])
    got, _ = same(fn, {"x0": x})
    if kind is not QI32 and source is F32:  # ONNX QuantizeLinear has no int32 output before opset 21
        node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
        onnx_kind = TensorProto.INT8 if kind is QI8 else TensorProto.UINT8
        model = helper.make_model(helper.make_graph(
            [node], "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
            [helper.make_tensor_value_info("y", onnx_kind, x.shape)],
            [helper.make_tensor("s", TensorProto.FLOAT, (), [scale]), helper.make_tensor("z", onnx_kind, (), [offset])]),
            opset_imports=[helper.make_opsetid("", 13)])
        np.testing.assert_array_equal(got["y0"], ReferenceEvaluator(model).run(None, {"x": x})[0])


@pytest.mark.parametrize("kind", [QI8, QU8, QI32])
@pytest.mark.parametrize("elem", [F32, F64])
def test_dequantize(kind, elem):
    q = raw(kind, (7, 11), np.random.default_rng(1))
    fn = graph([qtype(kind, q.shape)], lambda f, v: [f.add(quant.Dequantize, v[0], elem=elem)])
    got, _ = same(fn, {"x0": q})
    scale, offset = PARAMS[kind]
    want = (q.astype(np.float32) - np.float32(offset)) * np.float32(scale)
    np.testing.assert_array_equal(got["y0"], want.astype(elem.dtype))


@pytest.mark.parametrize("kind", [QI8, QU8, QI32])
@pytest.mark.parametrize("target, ratio", [(QI8, 2.0), (QU8, 0.5), (QI8, 0.37), (QI32, 3.0), (QI8, 1.0)])
def test_rescale_is_exact_rational_rounding(kind, target, ratio):
    q = raw(kind, (6, 17), np.random.default_rng(2))
    scale, offset = PARAMS[kind]
    out = Type(target, q.shape, float(np.float32(scale) / np.float32(ratio)), -5)
    fn = graph([qtype(kind, q.shape)], lambda f, v: [f.add(quant.Rescale, v[0], result_type=out)])
    got, _ = same(fn, {"x0": q})
    m = Fraction(float(np.float32(scale) / np.float32(out.scale)))
    low, high = quant.integer_range(target)
    if abs(int(q.astype(np.int64).max() - offset)) < (1 << 29):  # the documented exact range
        exact = [min(max(round((int(v) - offset) * m) + out.offset, low), high) for v in q.reshape(-1)]
        assert got["y0"].reshape(-1).tolist() == exact


@pytest.mark.parametrize("kind", [QI8, QU8, QI32])
def test_reinterpret_both_ways(kind):
    plain = quant.storage(kind)
    q = raw(kind, (3, 5), np.random.default_rng(3))
    fn = graph([qtype(kind, q.shape), Type(plain, q.shape)],
               lambda f, v: [f.add(quant.Reinterpret, v[0], result_type=Type(plain, q.shape)),
                             f.add(quant.Reinterpret, v[1], result_type=qtype(kind, q.shape))])
    got, _ = same(fn, {"x0": q, "x1": q.view(plain.dtype)[::-1].copy()})
    np.testing.assert_array_equal(got["y0"], q)


@pytest.mark.parametrize("kind", [QI8, QU8, QI32])
@pytest.mark.parametrize("op", [ew.Add, ew.Sub, ew.Max, ew.Min])
@pytest.mark.parametrize("shapes", [((4, 9), (4, 9)), ((2, 3, 4), (3, 1))])
def test_same_type_binary(kind, op, shapes):
    rng = np.random.default_rng(4)
    a, b = raw(kind, shapes[0], rng), raw(kind, shapes[1], rng)
    fn = graph([qtype(kind, shapes[0]), qtype(kind, shapes[1])], lambda f, v: [f.add(op, v[0], v[1])])
    got, _ = same(fn, {"x0": a, "x1": b})
    offset = PARAMS[kind][1]
    wide_a, wide_b = a.astype(np.int64), b.astype(np.int64)
    exact = {"Add": wide_a + wide_b - offset, "Sub": wide_a - wide_b + offset,
             "Max": np.maximum(wide_a, wide_b), "Min": np.minimum(wide_a, wide_b)}[op.spec.name]
    np.testing.assert_array_equal(got["y0"], np.clip(exact, *quant.integer_range(kind)))


@pytest.mark.parametrize("kinds", [(QI8, QI8), (QU8, QU8), (QI8, QU8)])
def test_mul_gives_the_int32_accumulator(kinds):
    rng = np.random.default_rng(5)
    a, b = raw(kinds[0], (5, 8), rng), raw(kinds[1], (8,), rng)
    fn = graph([qtype(kinds[0], a.shape), qtype(kinds[1], b.shape, 0.2, 11)], lambda f, v: [f.add(ew.Mul, v[0], v[1])])
    got, _ = same(fn, {"x0": a, "x1": b})
    exact = (a.astype(np.int64) - PARAMS[kinds[0]][1]) * (b.astype(np.int64) - 11)
    np.testing.assert_array_equal(got["y0"], exact.astype(np.int32))


def test_accumulator_rescale_clamp_chain_is_one_stacked_loop():
    """The int8 hot path after a Conv: int32q accumulator -> Rescale -> Max (ReLU on raw q) -> Dequantize."""
    rng = np.random.default_rng(6)
    acc = rng.integers(-(1 << 20), 1 << 20, (2, 8, 5, 5)).astype(np.int32)
    out = Type(QI8, acc.shape, 0.5, -10)
    zero = np.full(acc.shape, -10, np.int8)

    def build(f, v):
        y = f.add(quant.Rescale, v[0], result_type=out)
        return [f.add(quant.Dequantize, f.add(ew.Max, y, v[1]), elem=F32)]
    fn = graph([Type(QI32, acc.shape, 0.001, 0), out], build)
    _, compiled = same(fn, {"x0": acc, "x1": zero})
    kinds = [tuple(i.kind for i in step.instrs) for step in compiled.steps]
    assert ("Rescale", "Max", "Dequantize") in kinds


POOLS = [({"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (1, 3, 7, 7)),
         ({"kernel": [2, 2], "strides": [2, 1], "pads": [0, 1, 1, 0], "dilations": [2, 2], "ceil_mode": True}, (2, 2, 6, 5)),
         ({"kernel": [3], "strides": [2], "pads": [1, 1]}, (1, 2, 9))]


def window(attrs: dict, shape: Sequence[int]) -> dict:
    return {"dilations": [1] * (len(shape) - 2), **attrs}


@pytest.mark.parametrize("attrs, shape", POOLS)
@pytest.mark.parametrize("kind", [I8, U8, ElemKind.INT64, ElemKind.UINT32, QI8, QU8, QI32])
def test_max_pool_integers(kind, attrs, shape):
    x = raw(kind, shape, np.random.default_rng(7))
    fn = graph([qtype(kind, shape)], lambda f, v: [f.add(nn.MaxPool, v[0], **window(attrs, shape))])
    same(fn, {"x0": x})


@pytest.mark.parametrize("attrs, shape", POOLS)
@pytest.mark.parametrize("kind", [QI8, QU8])
@pytest.mark.parametrize("include", [False, True])
def test_quantized_average_pool(kind, attrs, shape, include):
    x = raw(kind, shape, np.random.default_rng(8))
    fn = graph([qtype(kind, shape)],
               lambda f, v: [f.add(nn.AveragePool, v[0], count_include_pad=include, **window(attrs, shape))])
    same(fn, {"x0": x})


def onnx_max_pool(x: np.ndarray, attrs: dict) -> tuple[np.ndarray, np.ndarray]:
    """onnx.reference's MaxPool with its Indices output."""
    onnx_kind = helper.np_dtype_to_tensor_dtype(x.dtype)
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=attrs["kernel"], strides=attrs["strides"],
                            pads=attrs["pads"], dilations=attrs.get("dilations", [1] * len(attrs["kernel"])),
                            ceil_mode=int(attrs.get("ceil_mode", False)))
    model = helper.make_model(helper.make_graph(
        [node], "p", [helper.make_tensor_value_info("x", onnx_kind, x.shape)],
        [helper.make_tensor_value_info("y", onnx_kind, None), helper.make_tensor_value_info("i", TensorProto.INT64, None)]),
        opset_imports=[helper.make_opsetid("", 12)])
    return tuple(ReferenceEvaluator(model).run(None, {"x": x}))


@pytest.mark.parametrize("attrs, shape", POOLS[:1] + [({"kernel": [2, 2], "strides": [2, 2], "pads": [0, 0, 0, 0]},
                                                       (2, 3, 6, 6))])
@pytest.mark.parametrize("kind", [F32, F64, ElemKind.FLOAT16, ElemKind.BFLOAT16, I8, U8, ElemKind.INT64, QI8, QI32])
def test_max_pool_with_indices(kind, attrs, shape):
    rng = np.random.default_rng(9)
    x = rng.permutation(np.arange(np.prod(shape)) % 200).reshape(shape).astype(kind.dtype)  # ties too
    fn = graph([qtype(kind, shape)], lambda f, v: list(f.create(nn.MaxPoolWithIndices, [v[0]],
                                                                  **window(attrs, shape)).results))
    got, _ = same(fn, {"x0": x})
    if not kind.is_quantized and "ceil_mode" not in attrs:
        values, indices = onnx_max_pool(x, attrs)
        np.testing.assert_array_equal(got["y0"], values)
        np.testing.assert_array_equal(got["y1"], indices)


@pytest.mark.parametrize("column_major", [False, True])
def test_max_pool_with_indices_edges(column_major):
    """NaN, -inf everywhere (a padding tap wins), ceil_mode and column-major indices."""
    x = np.random.default_rng(10).standard_normal((1, 2, 5, 6)).astype(np.float32)
    x[0, 0, 1, 2], x[0, 0, 3, 3] = np.nan, np.inf
    x[0, 1] = -np.inf
    attrs = {"kernel": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1], "dilations": [1, 1], "ceil_mode": True,
             "column_major": column_major}
    fn = graph([Type(F32, x.shape)], lambda f, v: list(f.create(nn.MaxPoolWithIndices, [v[0]], **attrs).results))
    same(fn, {"x0": x})


def channel_type(kind: ElemKind, shape: Sequence[int], axis: int, rng: np.random.Generator) -> Type:
    """A per-channel type along `axis`: float32 scales spread over two decades, small offsets."""
    count = shape[axis]
    scales = tuple(float(np.float32(s)) for s in rng.uniform(0.001, 0.1, count))
    offsets = tuple(int(o) for o in rng.integers(-5, 6, count)) if kind is not QU8 else (128,) * count
    return Type(kind, tuple(shape), scales, offsets, axis=axis)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_per_channel_quant_family(axis):
    """Per-channel scales and offsets (one per index along `axis`) in every conversion of the family."""
    rng = np.random.default_rng(11)
    shape = (3, 4, 5)
    acc_type = channel_type(QI32, shape, axis, rng)
    q_type = channel_type(QI8, shape, axis, rng)
    acc = rng.integers(-(1 << 13), 1 << 13, shape).astype(np.int32)  # real values inside int8q<8, -3>
    x = (rng.standard_normal(shape) * 2).astype(np.float32)

    def build(f, v):
        down = f.add(quant.Rescale, v[0], result_type=qtype(QI8, shape, 8.0, -3))
        back = f.add(quant.Rescale, down, result_type=q_type)
        quantized = f.add(quant.Quantize, v[1], result_type=q_type)
        return [down, back, f.add(quant.Dequantize, back, elem=F32), quantized,
                f.add(ew.Add, quantized, back), f.add(ew.Max, quantized, back)]
    fn = graph([acc_type, Type(F32, shape)], build)
    got, _ = same(fn, {"x0": acc, "x1": x})
    scales, offsets = np.asarray(acc_type.scale), np.asarray(acc_type.offset)
    view = [-1 if i == axis else 1 for i in range(3)]
    real = (acc - offsets.reshape(view)) * scales.reshape(view)
    np.testing.assert_allclose((got["y0"].astype(np.float64) + 3) * 8.0, real, atol=4.0 + 1e-9)  # half a step


def test_half_precision_quantize_is_refused_by_name():
    """A division rounded to float16 is not computed here, so it is reported unsupported, not approximated."""
    fn = graph([Type(F32, (4,))], lambda f, v: [f.add(quant.Quantize, v[0], result_type=qtype(QI8, (4,)),
                                                      precision=ElemKind.FLOAT16)])
    with pytest.raises(UnsupportedError, match="Quantize"):
        compile_function(fn, get_backend("cpu"))


@pytest.mark.parametrize("per_channel", [False, True])
def test_quantized_digits_cnn_is_bit_exact(per_channel):
    """The digits CNN quantized with a min-max profile (int8 Conv, Rescale, MaxPool, MatMul, Add,
    Dequantize): one quantized graph, run on both backends, equal bit for bit."""
    network = glowsdk.load(glowsdk.zoo.digits_model_path(), input_shapes={"image": (4, 1, 8, 8)})
    config = QuantizationConfig(collect_profile(network, calibration_random(network, 2)), per_channel=per_channel)
    seen = {}
    compile_function(network.function, get_backend("interpreter"), quantization=config,
                     on_stage=lambda stage, fn: seen.setdefault(stage, fn.module.clone().functions[fn.name]))
    quantized = seen["quantized"]
    assert quantized.count_kinds().get("Rescale")
    image = np.random.default_rng(13).uniform(0, 16, (4, 1, 8, 8)).astype(np.float32)
    same(quantized, {"image": image})
