"""The narrow storage kinds (float8, float4, int4, int2): Cast, CastLike, QuantizeLinear and
DequantizeLinear against onnx.reference and, where it runs them, onnxruntime, bit for bit, on
seeded random values plus the edge cases (saturation, +-inf, NaN, ties to even, subnormals).

Where onnx.reference departs from the ONNX spec (float8e8m0 of inf, zero and float32
subnormals; float64 sources rounded twice), the expected values are written out by hand from
the spec instead.
"""
import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from glowsdk.errors import GraphError, UnsupportedError
from glowsdk.graph import ElemKind, Module, Type, nodes

from oracle import glow_run, reference_run, single_op_model

RNG = np.random.default_rng(11)
FLOAT8 = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2,
          ml_dtypes.float8_e5m2fnuz]
NARROW_INTS = [ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2]
E8M0 = ml_dtypes.float8_e8m0fnu
F4 = ml_dtypes.float4_e2m1fn


def onnx_type(dtype) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal dtype, shape and bits (signed zeros included; NaNs of any payload count as equal)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
        return
    nan = np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan)
    bits = f"u{want.itemsize}"
    np.testing.assert_array_equal(got.view(bits)[~nan], want.view(bits)[~nan])


def float_values(dtype, target) -> np.ndarray:
    """Random values across the target's range (and beyond), then its edge cases, in `dtype`."""
    info = ml_dtypes.finfo(target)
    top = int(np.log2(float(info.max)))
    bottom = int(np.log2(float(info.smallest_subnormal)))
    random = RNG.standard_normal(300) * 2.0 ** RNG.integers(bottom - 2, top + 3, 300)
    one, eps, sub = 1.0, float(info.eps), float(info.smallest_subnormal)
    edges = [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, float(info.max), -float(info.max),
             float(info.max) * 1.03, -float(info.max) * 1.03, float(info.max) * 4, 1e30,
             one + eps / 2, one + 3 * eps / 2, -(one + eps / 2),  # ties to even, down and up
             sub / 2, sub * 1.5, -sub * 2.5, sub * 0.51, float(info.tiny) * 0.75]
    with np.errstate(over="ignore"):
        return np.concatenate([random, edges]).astype(dtype)


def cast_model(x: np.ndarray, to: int, opset: int = 21, **attrs) -> onnx.ModelProto:
    return single_op_model("Cast", {"x": x}, opset=opset, to=to, **attrs)


def ort_cast(x: np.ndarray, to: int, **attrs) -> np.ndarray:
    """onnxruntime's Cast to `to`, read back through a Cast to float32 (exact)."""
    nodes_ = [helper.make_node("Cast", ["x"], ["y"], to=to, **attrs),
              helper.make_node("Cast", ["y"], ["z"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes_, "g", [helper.make_tensor_value_info("x", onnx_type(x.dtype), x.shape)],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, x.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


# -- the type system --------------------------------------------------------------------------
def test_narrow_kinds_are_storage_only():
    narrow = [k for k in ElemKind if k.is_narrow]
    assert len(narrow) == 10
    for kind in narrow:
        assert not kind.is_float and not kind.is_integer and not kind.is_quantized
        assert ElemKind.from_dtype(kind.dtype) is kind and kind.itemsize == 1
    assert str(Type(ElemKind.FLOAT8E4M3FN, (2, 3))) == "float8e4m3fn<2x3>"


@pytest.mark.parametrize("op", ["Add", "Mul", "Max"])
@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, ml_dtypes.int4])
def test_arithmetic_on_narrow_kinds_is_refused(op, dtype):
    a = np.ones(3, dtype)
    with pytest.raises(GraphError, match=rf"\({op}\): operands must be a numeric"):
        glow_run(single_op_model(op, {"a": a, "b": a}), {"a": a, "b": a})


def test_cast_verify_rules():
    module = Module()
    fn = module.create_function()
    x = module.create_placeholder("x", Type(ElemKind.FLOAT32, (2,))).result()
    with pytest.raises(GraphError, match=r"node 'bad' \(Cast\): round_mode must be one of up, down"):
        fn.add(nodes.Cast, x, name="bad", to=ElemKind.FLOAT8E8M0, round_mode="sideways")
    with pytest.raises(GraphError, match=r"\(Cast\): cannot cast to the quantized kind uint8q"):
        fn.add(nodes.Cast, x, to=ElemKind.QUINT8)


# -- Cast into and out of the narrow kinds ------------------------------------------------------
@pytest.mark.parametrize("saturate", [1, 0])
@pytest.mark.parametrize("source", [np.float32, np.float16])
@pytest.mark.parametrize("target", FLOAT8)
def test_cast_to_float8(target, source, saturate):
    x = float_values(source, target)
    model = cast_model(x, onnx_type(target), saturate=saturate)
    got, = glow_run(model, {"x": x})
    assert_same(got, reference_run(model, {"x": x})[0])
    # Without saturation onnxruntime departs from the spec table just past the largest value
    # ([x] > FLT_MAX gives 448 instead of NaN for e4m3fn, NaN instead of inf for e5m2).
    checked = np.abs(x.astype(np.float32)) <= float(ml_dtypes.finfo(target).max)
    checked |= bool(saturate)
    np.testing.assert_array_equal(got.astype(np.float32)[checked],
                                  ort_cast(x, onnx_type(target), saturate=saturate)[checked])


def test_float8_special_values_follow_the_spec_tables():
    x = np.array([np.inf, -np.inf, 1e6, -0.0, np.nan], np.float32)
    e4m3 = TensorProto.FLOAT8E4M3FN
    saturated = glow_run(cast_model(x, e4m3), {"x": x})[0].astype(np.float32)
    np.testing.assert_array_equal(saturated, [448, -448, 448, -0.0, np.nan])
    raw = glow_run(cast_model(x, TensorProto.FLOAT8E5M2, saturate=0), {"x": x})[0].astype(np.float32)
    np.testing.assert_array_equal(raw, [np.inf, -np.inf, np.inf, -0.0, np.nan])
    fnuz = glow_run(cast_model(x, TensorProto.FLOAT8E4M3FNUZ, saturate=0), {"x": x})[0].astype(np.float32)
    assert np.isnan(fnuz[[0, 1, 2, 4]]).all() and not np.signbit(fnuz[3])


def test_float64_sources_round_once():
    # 1.0625 is the tie between 1 and 1.125 in e4m3; just above it must round up. Through
    # float32 first (as onnx.reference and onnxruntime do) it would become the tie, then 1.
    x = np.array([1.0625 + 2.0 ** -40, 1.0625, -(1.0625 + 2.0 ** -40), 1.1875, 1e300], np.float64)
    got, = glow_run(cast_model(x, TensorProto.FLOAT8E4M3FN), {"x": x})
    np.testing.assert_array_equal(got.astype(np.float32), [1.125, 1.0, -1.125, 1.25, 448])
    ordinary = float_values(np.float64, ml_dtypes.float8_e5m2)
    model = cast_model(ordinary, TensorProto.FLOAT8E5M2, saturate=0)
    assert_same(glow_run(model, {"x": ordinary})[0], reference_run(model, {"x": ordinary})[0])


@pytest.mark.parametrize("source", [np.float32, np.float16, np.float64])
def test_cast_to_float4(source):
    x = float_values(source, F4)
    got, = glow_run(cast_model(x, TensorProto.FLOAT4E2M1, opset=23), {"x": x})
    want, = reference_run(cast_model(x, TensorProto.FLOAT4E2M1, opset=23), {"x": x})
    nan = np.isnan(x)
    assert_same(got[~nan], want[~nan])
    assert (got[nan].view(np.uint8) == 0x8).all()  # -0: the reference gives a zero for NaN
    assert float(got.astype(np.float32).max()) == 6.0


@pytest.mark.parametrize("mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_to_e8m0_matches_reference_on_normal_floats(mode, saturate):
    x = np.abs(RNG.standard_normal(400) * 2.0 ** RNG.integers(-125, 126, 400)).astype(np.float32)
    x[:6] = [1.5, 3.0, 0.75, 2.0 ** 127 * 1.25, 2.0 ** 127, 2.0 ** -126]  # ties and the top
    model = cast_model(x, TensorProto.FLOAT8E8M0, opset=24, saturate=saturate, round_mode=mode)
    assert_same(glow_run(model, {"x": x})[0], reference_run(model, {"x": x})[0])


def test_cast_to_e8m0_special_values_follow_the_spec_table():
    tiny = np.float32(2.0 ** -130)
    x = np.array([0.0, np.nan, np.inf, 3e38, tiny, 2.0 ** -127 * 1.2], np.float32)
    up = glow_run(cast_model(x, TensorProto.FLOAT8E8M0, opset=24, saturate=1, round_mode="up"), {"x": x})[0]
    np.testing.assert_array_equal(up.view(np.uint8), [0, 0xFF, 0xFE, 0xFE, 0, 1])
    near = glow_run(cast_model(x, TensorProto.FLOAT8E8M0, opset=24, saturate=0, round_mode="nearest"),
                    {"x": x})[0]
    np.testing.assert_array_equal(near.view(np.uint8), [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0])


@pytest.mark.parametrize("target", NARROW_INTS)
@pytest.mark.parametrize("source", [np.float32, np.float16, np.int8, np.int32, np.uint16, np.bool_])
def test_cast_to_narrow_integers_wraps(target, source):
    if np.dtype(source).kind == "f":
        x = (RNG.standard_normal(200) * 40).astype(source)  # truncation toward zero, then wrap
    elif source is np.bool_:
        x = RNG.integers(0, 2, 200).astype(bool)
    else:
        info = np.iinfo(source)
        x = RNG.integers(info.min, int(info.max) + 1, 200).astype(source)
    model = cast_model(x, onnx_type(target), opset=25)
    got, = glow_run(model, {"x": x})
    assert_same(got, reference_run(model, {"x": x})[0])
    if target in (ml_dtypes.int4, ml_dtypes.uint4) and source is np.float32:
        whole = np.trunc(x)  # onnxruntime rounds non-integers instead, so compare whole values
        np.testing.assert_array_equal(got.astype(np.float32)[x == whole],
                                      ort_cast(whole, onnx_type(target))[x == whole])


def _oracle_converts(source, target) -> bool:
    """Whether onnx.reference (through ml_dtypes) can cast `source` to `target` at all; the pairs
    it cannot (e8m0 -> e5m2/int4, uint4/uint2 -> int4) are checked by hand in the tests below."""
    try:
        np.zeros(1, source).astype(target)
    except TypeError:
        return False
    return True


@pytest.mark.parametrize("source,target", [
    (source, target) for source in [*FLOAT8, F4, E8M0, *NARROW_INTS]
    for target in [np.float32, np.float16, np.float64, np.int8, np.bool_, ml_dtypes.float8_e5m2, ml_dtypes.int4]
    if _oracle_converts(source, target)])
def test_cast_from_narrow_kinds(source, target):
    bits = 1 << (4 if source in (F4, ml_dtypes.int4, ml_dtypes.uint4) else
                 2 if source in (ml_dtypes.int2, ml_dtypes.uint2) else 8)
    x = np.arange(bits, dtype=np.uint8).view(source) if source not in NARROW_INTS else \
        np.arange(ml_dtypes.iinfo(source).min, ml_dtypes.iinfo(source).max + 1).astype(source)
    wide = x.astype(np.float32)
    if target is np.int8:
        x = x[np.abs(wide) < 128]  # out-of-range float to int8 is undefined
    elif target is ml_dtypes.int4:
        x = x[np.isfinite(wide)]  # NaN/inf to an integer is undefined; finite values wrap
    model = cast_model(x, onnx_type(target), opset=25)
    assert_same(glow_run(model, {"x": x})[0], reference_run(model, {"x": x})[0])


def test_unsigned_to_signed_narrow_integers_reinterpret_the_bits():
    x = np.arange(16).astype(ml_dtypes.uint4)
    got, = glow_run(cast_model(x, TensorProto.INT4, opset=25), {"x": x})
    np.testing.assert_array_equal(got.astype(np.int8), [0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1])
    x = np.arange(4).astype(ml_dtypes.uint2)
    got, = glow_run(cast_model(x, TensorProto.INT2, opset=25), {"x": x})
    np.testing.assert_array_equal(got.astype(np.int8), [0, 1, -2, -1])


def test_castlike_takes_saturate():
    x = float_values(np.float32, ml_dtypes.float8_e5m2)
    like = np.zeros(1, ml_dtypes.float8_e5m2)
    model = single_op_model("CastLike", {"x": x, "like": like}, opset=21, saturate=0)
    got, = glow_run(model, {"x": x, "like": like})
    assert_same(got, reference_run(model, {"x": x, "like": like})[0])
    assert np.isinf(got.astype(np.float32)).any()


# -- data movement ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [ml_dtypes.float8_e4m3fn, F4, ml_dtypes.int4, ml_dtypes.uint2, E8M0])
def test_data_movement_accepts_narrow_kinds(dtype):
    x = RNG.integers(0, 4, (2, 3, 4)).astype(np.uint8).view(dtype)  # codes valid in every kind
    slices = {"starts": np.array([1]), "ends": np.array([3]), "axes": np.array([1])}
    for op, inits, attrs in [("Transpose", {}, {"perm": [2, 0, 1]}),
                             ("Reshape", {"shape": np.array([4, -1])}, {}),
                             ("Gather", {"idx": np.array([2, 0])}, {"axis": 2}),
                             ("Concat", {"other": x}, {"axis": 1}),
                             ("Slice", slices, {})]:
        model = single_op_model(op, {"x": x}, initializers=inits, **attrs)
        assert_same(glow_run(model, {"x": x})[0], reference_run(model, {"x": x})[0])


# -- QuantizeLinear / DequantizeLinear ------------------------------------------------------------------
def _scales(x_shape, granularity):
    """(scale shape, axis, block_size) for per-tensor, per-axis (axis 1) and blocked (axis 1, 4)."""
    if granularity == "tensor":
        return (), 1, 0
    if granularity == "axis":
        return (x_shape[1],), 1, 0
    return (x_shape[0], -(-x_shape[1] // 4), x_shape[2]), 1, 4


@pytest.mark.parametrize("granularity", ["tensor", "axis", "blocked"])
@pytest.mark.parametrize("target", [*NARROW_INTS, *FLOAT8, F4])
def test_quantize_to_narrow_kinds(target, granularity):
    shape = (2, 10, 3)
    scale_shape, axis, block = _scales(shape, granularity)
    scale = RNG.uniform(0.05, 0.5, scale_shape).astype(np.float32)
    x = (RNG.standard_normal(shape) * 3).astype(np.float32)
    first = float(scale.reshape(-1)[0])
    x.reshape(-1)[:6] = np.float32(first) * np.float32([0.5, 1.5, -2.5, 1e5, -1e5, 3.25])
    x.reshape(-1)[6:9] = [np.inf, -np.inf, np.nan] if target in FLOAT8 else [0, 0, 0]
    if target in NARROW_INTS:
        info = ml_dtypes.iinfo(target)
        zero = RNG.integers(info.min, int(info.max) + 1, scale_shape).astype(target)
    elif target is F4:
        zero = RNG.integers(0, 16, scale_shape).astype(np.uint8).view(F4)
    else:
        zero = np.zeros(scale_shape, target)  # onnx.reference ignores float8 zero points
    for saturate in ([1, 0] if target in FLOAT8 else [1]):
        model = single_op_model("QuantizeLinear", {"x": x}, opset=25, axis=axis, block_size=block,
                                saturate=saturate, initializers={"scale": scale, "zero": zero})
        got, = glow_run(model, {"x": x})
        want, = reference_run(model, {"x": x})
        np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))  # -0 == +0
        assert got.dtype == want.dtype


def test_quantize_with_e8m0_block_scales():
    """MX-style: float4 elements, one power-of-two scale per block of 8."""
    x = (RNG.standard_normal((2, 16)) * 10).astype(np.float32)
    scale = np.array([[0.5, 2.0], [4.0, 0.25]], np.float32).astype(E8M0)
    for target in (F4, ml_dtypes.float8_e4m3fn):
        model = single_op_model("QuantizeLinear", {"x": x}, opset=25, axis=1, block_size=8,
                                output_dtype=onnx_type(target), initializers={"scale": scale})
        assert_same(glow_run(model, {"x": x})[0], reference_run(model, {"x": x})[0])


@pytest.mark.parametrize("granularity", ["tensor", "axis", "blocked"])
@pytest.mark.parametrize("source", [*NARROW_INTS, *FLOAT8, F4])
def test_dequantize_from_narrow_kinds(source, granularity):
    shape = (2, 10, 3)
    scale_shape, axis, block = _scales(shape, granularity)
    scale = RNG.uniform(0.05, 0.5, scale_shape).astype(np.float32)
    if source in NARROW_INTS:
        info = ml_dtypes.iinfo(source)
        x = RNG.integers(info.min, int(info.max) + 1, shape).astype(source)
        zero = RNG.integers(info.min, int(info.max) + 1, scale_shape).astype(source)
    else:
        x = RNG.integers(0, 16 if source is F4 else 256, shape).astype(np.uint8).view(source)
        zero = np.zeros(scale_shape, source)  # onnx.reference refuses non-zero float zero points
    for out, opset in ((None, 25), (TensorProto.FLOAT16, 25)):
        attrs = {"output_dtype": out} if out else {}
        model = single_op_model("DequantizeLinear", {"x": x}, opset=opset, axis=axis, block_size=block,
                                initializers={"scale": scale, "zero": zero}, **attrs)
        assert_same(glow_run(model, {"x": x})[0], reference_run(model, {"x": x})[0])


def test_dequantize_with_e8m0_scales():
    x = RNG.integers(-8, 8, (2, 16)).astype(ml_dtypes.int4)
    scale = np.array([[2.0 ** -127, 2.0], [8.0, 2.0 ** 100]], np.float32).astype(E8M0)
    model = single_op_model("DequantizeLinear", {"x": x}, opset=25, axis=1, block_size=8,
                            output_dtype=TensorProto.FLOAT, initializers={"scale": scale})
    assert_same(glow_run(model, {"x": x})[0], reference_run(model, {"x": x})[0])


@pytest.mark.parametrize("target", [ml_dtypes.float8_e4m3fn, ml_dtypes.int4, ml_dtypes.uint4])
def test_quantize_round_trip_against_onnxruntime(target):
    x = (RNG.standard_normal((4, 6)) * 4).astype(np.float32)
    scale, zero = np.float32(0.37), np.zeros((), target)
    quantize = helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"])
    dequantize = helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"])
    inits = [onnx.numpy_helper.from_array(np.asarray(scale), "scale"), onnx.numpy_helper.from_array(zero, "zero")]
    graph = helper.make_graph([quantize, dequantize], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(glow_run(model, {"x": x})[0], session.run(None, {"x": x})[0])


def test_quantize_to_e8m0_is_unsupported():
    x = np.ones((2, 2), np.float32)
    model = single_op_model("QuantizeLinear", {"x": x}, opset=25, output_dtype=TensorProto.FLOAT8E8M0,
                            initializers={"scale": np.float32(1.0)})
    with pytest.raises(UnsupportedError, match=r"QuantizeLinear\): quantizing to float8e8m0"):
        glow_run(model, {"x": x})


def test_e8m0_to_e5m2_and_int4_by_hand():
    """Powers of two: exact in e5m2 up to its largest value, which larger ones saturate to;
    to int4, whole values wrap in two's complement and fractions truncate toward zero."""
    x = np.array([2.0 ** -3, 1.0, 4.0, 2.0 ** 10, 2.0 ** 20], np.float32).astype(E8M0)
    got, = glow_run(cast_model(x, TensorProto.FLOAT8E5M2, opset=25), {"x": x})
    np.testing.assert_array_equal(got.astype(np.float32), [0.125, 1.0, 4.0, 1024.0, 57344.0])
    small = np.array([2.0 ** -1, 1.0, 4.0, 8.0], np.float32).astype(E8M0)
    got, = glow_run(cast_model(small, TensorProto.INT4, opset=25), {"x": small})
    np.testing.assert_array_equal(got.astype(np.int8), [0, 1, 4, -8])
