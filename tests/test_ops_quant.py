"""Quantization ops against onnx.reference and onnxruntime, bit for bit, on seeded random inputs.

Ops that sum integer products (MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv) are
checked against onnx.reference alone: onnxruntime's u8 x s8 kernel on an x86 host without
VNNI adds each pair of products into int16 with saturation (vpmaddubsw), so on full-range
bytes it is wrong there; onnx.reference sums exactly on every host.

Scales given as initializers take the typed path (Quantize/Dequantize/Rescale on
quantized types); scales fed at run time, per-axis and blocked scales and
16-bit kinds take the element-wise path. Both are checked, and each test asserts
which path the importer chose.
"""
import importlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from glowsdk.errors import GraphError, UnsupportedError
from glowsdk.frontend.onnx.importer import import_model
from glowsdk.graph.function import Module
from glowsdk.graph.nodes import quant
from glowsdk.graph.types import ElemKind, Type
from glowsdk.reference.evaluator import evaluate

from oracle import glow_run, reference_run, single_op_model

RNG = np.random.default_rng(7)


def ort_run(model: onnx.ModelProto, feeds: dict, out_types: list) -> list:
    """onnxruntime on `model`, with output element types declared as it requires."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    model.ir_version = 9
    for value, dtype in zip(model.graph.output, out_types):
        value.type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def kinds(model: onnx.ModelProto, feeds: dict) -> set:
    module = import_model(model, input_shapes={n: a.shape for n, a in feeds.items()})
    return set(module.functions["main"].count_kinds())


def check_exact(model, feeds, use_ort=True):
    """glowsdk equals onnx.reference (and onnxruntime, unless `use_ort` is False) exactly, dtype included."""
    got = glow_run(model, feeds)
    want = reference_run(model, feeds)
    oracles = [want] + ([ort_run(model, feeds, [w.dtype for w in want])] if use_ort else [])
    for oracle in oracles:
        for w, g in zip(oracle, got):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)


def check_exact_products(model, feeds):
    """check_exact for an op summing integer products: onnx.reference alone (see the module docstring)."""
    check_exact(model, feeds, use_ort=False)


def split(params: dict, const: bool) -> tuple[dict, dict]:
    """(initializers, run-time feeds) for the scale and zero-point inputs."""
    return (params, {}) if const else ({}, params)


def quantize_inputs(shape, zero_dtype, scale_shape=(), spread=40.0):
    scale = RNG.uniform(0.05, 0.5, scale_shape).astype(np.float32)
    x = (RNG.standard_normal(shape) * spread).astype(np.float32)
    # exact halfway points and far out-of-range values: rounding and saturation
    first = float(scale.reshape(-1)[0])
    x.reshape(-1)[:8] = (np.array([-3.5, -2.5, -0.5, 0.5, 1.5, 2.5, 1e6, -1e6]) * first).astype(np.float32)
    info = np.iinfo(zero_dtype)
    zero = RNG.integers(info.min // 2, info.max // 2 + 1, scale_shape).astype(zero_dtype)
    return x, scale, zero


@pytest.mark.parametrize("zero_dtype", [np.uint8, np.int8, np.int16, np.uint16])
@pytest.mark.parametrize("const", [True, False])
def test_quantize_per_tensor(zero_dtype, const):
    x, scale, zero = quantize_inputs((3, 4, 5), zero_dtype)
    inits, params = split({"y_scale": scale, "y_zero_point": zero}, const)
    model = single_op_model("QuantizeLinear", {"x": x, **params}, initializers=inits)
    check_exact(model, {"x": x, **params})
    typed = const and zero_dtype in (np.uint8, np.int8)
    assert ("Quantize" in kinds(model, {"x": x, **params})) == typed


@pytest.mark.parametrize("opset,axis,block,scale_shape", [
    (13, 1, 0, (4,)), (13, -1, 0, (5,)), (21, 1, 3, (3, 2, 5)), (21, 2, 2, (3, 4, 3))])
def test_quantize_per_axis_and_blocked(opset, axis, block, scale_shape):
    x, scale, zero = quantize_inputs((3, 4, 5), np.int8, scale_shape)
    attrs = {"axis": axis} | ({"block_size": block} if block else {})
    model = single_op_model("QuantizeLinear", {"x": x}, opset=opset,
                            initializers={"y_scale": scale, "y_zero_point": zero}, **attrs)
    check_exact(model, {"x": x})
    assert "Quantize" not in kinds(model, {"x": x})


def test_quantize_defaults_and_float16():
    x, scale, _ = quantize_inputs((2, 7), np.uint8)
    check_exact(single_op_model("QuantizeLinear", {"x": x}, opset=10, initializers={"y_scale": scale}), {"x": x})
    model = single_op_model("QuantizeLinear", {"x": x}, initializers={"y_scale": scale},
                            output_dtype=onnx.TensorProto.INT8)
    check_exact(model, {"x": x})
    # keep x / scale finite: onnx.reference maps inf to the kind's minimum, not its maximum
    half = np.clip(x, -300, 300).astype(np.float16)
    model = single_op_model("QuantizeLinear", {"x": half}, initializers={"y_scale": scale.astype(np.float16)})
    check_exact(model, {"x": half}, use_ort=False)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.uint16, np.int32])
@pytest.mark.parametrize("const", [True, False])
def test_dequantize_per_tensor(dtype, const):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, (3, 4, 5), endpoint=True).astype(dtype)
    params = {"x_scale": np.float32(RNG.uniform(0.01, 2.0))}
    if dtype is not np.int32:
        params["x_zero_point"] = np.array(RNG.integers(info.min // 2, info.max // 2), dtype)
    inits, feeds = split({k: np.asarray(v) for k, v in params.items()}, const)
    model = single_op_model("DequantizeLinear", {"x": x, **feeds}, initializers=inits)
    check_exact(model, {"x": x, **feeds})
    assert ("Dequantize" in kinds(model, {"x": x, **feeds})) == (const and dtype not in (np.int16, np.uint16))


@pytest.mark.parametrize("opset,axis,block,scale_shape,out", [
    (19, 1, 0, (4,), 0), (21, 0, 2, (2, 4, 5), 0), (23, -1, 0, (5,), onnx.TensorProto.FLOAT16)])
def test_dequantize_per_axis_blocked_and_output_dtype(opset, axis, block, scale_shape, out):
    x = RNG.integers(0, 255, (3, 4, 5), endpoint=True).astype(np.uint8)
    scale = RNG.uniform(0.01, 2.0, scale_shape).astype(np.float32)
    zero = RNG.integers(0, 255, scale_shape).astype(np.uint8)
    attrs = {"axis": axis} | ({"block_size": block} if block else {}) | ({"output_dtype": out} if out else {})
    model = single_op_model("DequantizeLinear", {"x": x}, opset=opset,
                            initializers={"x_scale": scale, "x_zero_point": zero}, **attrs)
    check_exact(model, {"x": x})


def test_quantize_dequantize_round_trip_keeps_the_quantized_type():
    x, scale, zero = quantize_inputs((2, 6), np.uint8)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    graph = helper.make_graph(
        nodes, "qdq", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, x.shape)],
        [onnx.numpy_helper.from_array(scale, "s"), onnx.numpy_helper.from_array(zero, "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    check_exact(model, {"x": x})
    assert kinds(model, {"x": x}) == {"Quantize", "Dequantize", "Save"}


def integers(dtype, shape):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("a_shape,b_shape", [((5, 16), (16, 7)), ((2, 5, 16), (2, 16, 7)), ((3, 4, 9), (9, 2))])
def test_matmul_integer(dtype, a_shape, b_shape):
    a, b = integers(dtype, a_shape), integers(dtype, b_shape)
    per_column = (b_shape[-1],) if len(b_shape) == 2 else (*b_shape[:-2], 1, b_shape[-1])
    zeros = {"a_zero_point": integers(dtype, (1,)), "b_zero_point": integers(dtype, per_column)}
    model = single_op_model("MatMulInteger", {"a": a, "b": b, **zeros}, opset=10)
    check_exact_products(model, {"a": a, "b": b, **zeros})
    check_exact_products(single_op_model("MatMulInteger", {"a": a, "b": b}, opset=10), {"a": a, "b": b})


def test_matmul_integer_where_a_saturating_kernel_would_differ():
    """255 x -128 four times: -130560. vpmaddubsw saturates each pair of products to -32768, so
    onnxruntime on an AVX2 host without VNNI gives -65536; glowsdk and onnx.reference are exact."""
    a, b = np.full((1, 4), 255, np.uint8), np.full((4, 1), -128, np.int8)
    model = single_op_model("MatMulInteger", {"a": a, "b": b}, opset=10)
    check_exact_products(model, {"a": a, "b": b})
    assert glow_run(model, {"a": a, "b": b})[0].item() == 4 * 255 * -128


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize("shapes", [((6, 40), (40, 5)), ((2, 3, 40), (2, 40, 5))])
def test_qlinear_matmul(dtype, const, shapes):
    a, b = integers(dtype, shapes[0]), integers(dtype, shapes[1])
    params = {"a_scale": np.array([0.0173], np.float32), "a_zero_point": integers(dtype, (1,)),
              "b_scale": np.array([0.0091], np.float32), "b_zero_point": integers(dtype, (1,)),
              "y_scale": np.array([0.37], np.float32), "y_zero_point": integers(dtype, (1,))}
    inits, feeds = split(params, const)
    names = ["a", "a_scale", "a_zero_point", "b", "b_scale", "b_zero_point", "y_scale", "y_zero_point"]
    node = helper.make_node("QLinearMatMul", names, ["y"])
    values = {"a": a, "b": b, **feeds}
    graph = helper.make_graph(
        [node], "qmm", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                        for n, v in values.items()],
        [helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)],
        [onnx.numpy_helper.from_array(v, n) for n, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    check_exact_products(model, values)
    assert ("Rescale" in kinds(model, values)) == const
    assert ("IntegerMatMul" in kinds(model, values)) != const  # compile-time scales: the quantized IR


CONV_CASES = [
    dict(),
    dict(pads=[1, 0, 2, 1], strides=[2, 1]),
    dict(auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(auto_pad="SAME_LOWER", strides=[1, 2]),
    dict(group=2, pads=[1, 1, 1, 1]),
    dict(dilations=[2, 1], pads=[1, 0, 1, 0]),
]


@pytest.mark.parametrize("attrs", CONV_CASES)
def test_conv_integer(attrs):
    x, w = integers(np.uint8, (2, 4, 7, 6)), integers(np.uint8, (6, 4 // attrs.get("group", 1), 3, 2))
    zeros = {"x_zero_point": integers(np.uint8, ()), "w_zero_point": integers(np.uint8, ())}
    model = single_op_model("ConvInteger", {"x": x, "w": w, **zeros}, opset=10, **attrs)
    check_exact_products(model, {"x": x, "w": w, **zeros})


def test_conv_integer_per_channel_filter_zero_point():
    x, w = integers(np.uint8, (1, 3, 5, 5)), integers(np.uint8, (4, 3, 2, 2))
    feeds = {"x": x, "w": w, "x_zero_point": integers(np.uint8, ()), "w_zero_point": integers(np.uint8, (4,))}
    check_exact_products(single_op_model("ConvInteger", feeds, opset=10), feeds)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("const", [True, False])
@pytest.mark.parametrize("attrs", CONV_CASES)
def test_qlinear_conv(dtype, const, attrs):
    group = attrs.get("group", 1)
    x, w = integers(dtype, (2, 4, 7, 6)), integers(dtype, (6, 4 // group, 3, 2))
    params = {"x_scale": np.array(0.021, np.float32), "x_zero_point": integers(dtype, ()),
              "w_scale": np.array(0.013, np.float32), "w_zero_point": np.zeros((), dtype),
              "y_scale": np.array(0.25, np.float32), "y_zero_point": integers(dtype, ())}
    bias = RNG.integers(-3000, 3000, (6,)).astype(np.int32)
    inits, feeds = split(params, const)
    names = ["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale", "y_zero_point", "B"]
    values = {"x": x, "w": w, **feeds}
    node = helper.make_node("QLinearConv", names, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "qconv", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                          for n, v in values.items()],
        [helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)],
        [onnx.numpy_helper.from_array(v, n) for n, v in {**inits, "B": bias}.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])
    check_exact_products(model, values)
    assert ("Rescale" in kinds(model, values)) == const
    assert ("IntegerConv" in kinds(model, values)) != const  # compile-time scales: the quantized IR


def test_qlinear_conv_per_channel_scale():
    x, w = integers(np.uint8, (1, 3, 6, 6)), integers(np.int8, (5, 3, 3, 3))
    inits = {"x_scale": np.array(0.02, np.float32), "x_zero_point": np.array(128, np.uint8),
             "w_scale": RNG.uniform(0.005, 0.02, (5,)).astype(np.float32), "w_zero_point": np.zeros(5, np.int8),
             "y_scale": np.array(0.1, np.float32), "y_zero_point": np.array(100, np.uint8)}
    names = ["x", "x_scale", "x_zero_point", "w", "w_scale", "w_zero_point", "y_scale", "y_zero_point"]
    node = helper.make_node("QLinearConv", names, ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node], "qconv", [helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, x.shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.UNDEFINED, None)],
        [onnx.numpy_helper.from_array(v, n) for n, v in {**inits, "w": w}.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])
    check_exact_products(model, {"x": x})
    assert {"Conv", "Rescale"} <= kinds(model, {"x": x}) and "IntegerConv" not in kinds(model, {"x": x})


def official_cases(modules):
    """The ONNX node-test cases that `modules` (under onnx.backend.test.case.node) declare.

    Importing a case module runs its exports; collecting only these is much
    faster than the whole suite.
    """
    import onnx.backend.test.case.node as cases

    prefixes = tuple(f"test_{m}" for m in modules)
    for module in modules:
        importlib.import_module(f"onnx.backend.test.case.node.{module}")
    return [c for c in cases._NodeTestCases if c.name.startswith(prefixes)]


def test_official_vectors_on_the_typed_path():
    """The ONNX node tests feed scales at run time (element-wise path); bound as
    initializers they must give the same expected outputs through the typed kinds."""
    typed = 0
    for case in official_cases(["quantizelinear", "dequantizelinear", "qlinearmatmul", "qlinearconv"]):
        inputs, expected = case.data_sets[0]
        names = [i.name for i in case.model.graph.input]
        feeds = {n: np.asarray(v) for n, v in zip(names, inputs) if not isinstance(v, onnx.TensorProto)}
        if len(feeds) != len(names):
            continue  # int4, float8...: kinds glowsdk does not have
        data = {n: feeds[n] for n in ("x", "a", "b", "w") if n in feeds}
        module = import_model(case.model, input_shapes={n: v.shape for n, v in data.items()},
                              constants={n: v for n, v in feeds.items() if n not in data})
        function = module.functions["main"]
        typed += bool({"Quantize", "Dequantize", "Rescale"} & set(function.count_kinds()))
        got = evaluate(function, data)[case.model.graph.output[0].name]
        want = expected[0] if isinstance(expected[0], np.ndarray) else onnx.numpy_helper.to_array(expected[0])
        np.testing.assert_array_equal(got, want, err_msg=case.name)
    assert typed == 7  # the per-tensor cases with float32 scales


# -- ill-typed graphs and unsupported forms -----------------------------------------------------------
def test_integer_matmul_rejects_float_operands():
    module = Module()
    fn = module.create_function()
    a = module.create_placeholder("a", Type(ElemKind.FLOAT32, (2, 3))).result()
    b = module.create_placeholder("b", Type(ElemKind.UINT8, (3, 4))).result()
    with pytest.raises(GraphError, match=r"node 'mm' \(IntegerMatMul\): lhs must be int8 or uint8"):
        fn.create(quant.IntegerMatMul, [a, b, None, None], "mm")


def test_reinterpret_needs_matching_storage():
    module = Module()
    fn = module.create_function()
    a = module.create_placeholder("a", Type(ElemKind.UINT8, (4,))).result()
    with pytest.raises(GraphError, match=r"node 'r' \(Reinterpret\): cannot reinterpret"):
        fn.create(quant.Reinterpret, [a], "r", result_type=Type(ElemKind.QINT8, (4,), 0.5, 0))


def test_rescale_result_type_keeps_the_shape():
    module = Module()
    fn = module.create_function()
    a = module.create_placeholder("a", Type(ElemKind.QINT8, (4,), 0.5, 1)).result()
    with pytest.raises(GraphError, match=r"node 'r' \(Rescale\): result_type .* must have the operand's shape"):
        fn.create(quant.Rescale, [a], "r", result_type=Type(ElemKind.QINT8, (2, 2), 0.25, 0))


def test_unsupported_forms_name_the_node():
    a, b = integers(np.uint8, (3, 4)), integers(np.uint8, (4, 2))
    model = single_op_model("MatMulInteger", {"a": a, "b": b}, opset=10,
                            initializers={"a_zero_point": integers(np.uint8, (3,))})
    with pytest.raises(UnsupportedError, match=r"node 'y' \(MatMulInteger\): a_zero_point of shape \[3\]"):
        import_model(model)
    x = RNG.standard_normal((4,)).astype(np.float32)
    model = single_op_model("QuantizeLinear", {"x": x}, initializers={"y_scale": np.float32(0.1)},
                            output_dtype=onnx.TensorProto.INT32)
    with pytest.raises(UnsupportedError, match=r"node 'y' \(QuantizeLinear\): quantizing to int32"):
        import_model(model)
