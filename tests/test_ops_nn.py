"""Neural-network ops against onnxruntime and onnx.reference on seeded random inputs.

Each case builds a one-node ONNX model with weights as initializers, runs it in
glowsdk's interpreter and in an oracle glowsdk did not write, and compares.
onnxruntime is the oracle where it is fast and supports the form; onnx.reference
covers the rest (opset-23 RMSNormalization, integer Gemm, ...).
"""
import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import helper, numpy_helper

from glowsdk.errors import GraphError, UnsupportedError
from glowsdk.frontend.onnx.importer import import_model

from oracle import glow_run, reference_run

RNG = np.random.default_rng(11)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def op(op_type, inputs, weights=None, outputs=("y",), opset=17, **attrs):
    """A one-node model: graph inputs `inputs`, then initializers `weights` (None = absent input)."""
    weights = weights or {}
    names = list(inputs) + [n if w is not None else "" for n, w in weights.items()]
    while names[-1] == "":
        names.pop()
    node = helper.make_node(op_type, names, list(outputs), **attrs)
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                    for n, a in inputs.items()]
    graph_outputs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in outputs]
    inits = [numpy_helper.from_array(w, n) for n, w in weights.items() if w is not None]
    graph = helper.make_graph([node], op_type.lower(), graph_inputs, graph_outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def ort_run(model, feeds):
    model = onnx.shape_inference.infer_shapes(model)  # onnxruntime wants typed outputs
    model.ir_version = min(model.ir_version, 10)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, dict(feeds))


def check(model, feeds, oracle=ort_run, rtol=1e-4, atol=1e-5):
    want = oracle(model, feeds)
    got = glow_run(model, feeds)
    assert len(want) == len(got)
    for w, g in zip(want, got):
        w = np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)


# -- convolution ---------------------------------------------------------------------------------
CONV_CASES = [
    ((2, 4, 9, 8), (6, 4, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 4, 9, 8), (6, 2, 3, 2), dict(strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2], group=2)),
    ((1, 6, 11), (12, 1, 3), dict(group=6, dilations=[2], pads=[2, 1])),
    ((1, 3, 5, 6, 7), (4, 3, 2, 3, 2), dict(strides=[1, 2, 1], pads=[0, 1, 0, 1, 0, 1])),
    ((1, 3, 10, 9), (5, 3, 4, 3), dict(auto_pad="SAME_UPPER", strides=[3, 2])),
    ((1, 3, 10, 9), (5, 3, 4, 3), dict(auto_pad="SAME_LOWER", strides=[3, 2])),
    ((1, 3, 10, 9), (5, 3, 3, 3), dict(auto_pad="VALID", strides=[2, 2])),
    ((2, 8, 7, 7), (8, 1, 3, 3), dict(group=8, pads=[1, 1, 1, 1], strides=[2, 2])),
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_CASES)
@pytest.mark.parametrize("bias", [False, True])
def test_conv(x_shape, w_shape, attrs, bias):
    x, w = f32(*x_shape), f32(*w_shape)
    b = f32(w_shape[0]) if bias else None
    check(op("Conv", {"x": x}, {"w": w, "b": b}, **attrs), {"x": x})


def test_conv_float16_computes_in_float32():
    x, w = f32(1, 8, 6, 6).astype(np.float16), f32(4, 8, 3, 3).astype(np.float16)
    check(op("Conv", {"x": x}, {"w": w}, pads=[1, 1, 1, 1]), {"x": x}, rtol=2e-3, atol=2e-2)


CONV_TRANSPOSE_CASES = [
    ((1, 2, 3, 4), (2, 3, 3, 3), dict()),
    ((2, 2, 4, 3), (2, 2, 3, 2), dict(strides=[3, 2], pads=[1, 0, 2, 1], output_padding=[1, 1])),
    ((1, 4, 3, 3), (4, 2, 3, 3), dict(group=2, strides=[2, 2], dilations=[2, 1])),
    ((1, 1, 3, 3), (1, 2, 3, 3), dict(strides=[3, 2], output_shape=[10, 8])),
    ((1, 1, 3, 3), (1, 2, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 2, 5), (2, 3, 4), dict(strides=[2], pads=[1, 2])),
    ((1, 2, 3, 2, 3), (2, 2, 2, 2, 2), dict(strides=[2, 1, 2])),
]


@pytest.mark.parametrize("x_shape,w_shape,attrs", CONV_TRANSPOSE_CASES)
def test_conv_transpose(x_shape, w_shape, attrs):
    x, w = f32(*x_shape), f32(*w_shape)
    b = f32(w_shape[1] * attrs.get("group", 1))
    check(op("ConvTranspose", {"x": x}, {"w": w, "b": b}, **attrs), {"x": x})


# -- pooling ------------------------------------------------------------------------------------
POOL_CASES = [
    ((1, 3, 9, 9), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((2, 2, 8, 7), dict(kernel_shape=[3, 2], strides=[2, 3], ceil_mode=1)),
    ((1, 2, 9, 10), dict(kernel_shape=[2, 3], strides=[3, 2], pads=[1, 0, 1, 2], ceil_mode=1)),
    ((1, 2, 10, 10), dict(kernel_shape=[3, 3], dilations=[2, 2], strides=[2, 1])),
    ((1, 2, 9, 8), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 2, 9, 8), dict(kernel_shape=[2, 2], strides=[1, 1], auto_pad="SAME_LOWER")),
    ((1, 2, 9, 8), dict(kernel_shape=[3, 2], strides=[2, 2], auto_pad="VALID")),
    ((2, 3, 12), dict(kernel_shape=[4], strides=[3], pads=[2, 1])),
    ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[2, 2, 1], pads=[0, 1, 1, 1, 1, 0])),
]


@pytest.mark.parametrize("shape,attrs", POOL_CASES)
def test_max_pool_with_indices(shape, attrs):
    x = f32(*shape)
    check(op("MaxPool", {"x": x}, outputs=("y", "i"), opset=12, **attrs), {"x": x})


@pytest.mark.parametrize("shape,attrs", POOL_CASES[:3])
def test_max_pool_column_major_indices(shape, attrs):
    x = f32(*shape)
    check(op("MaxPool", {"x": x}, outputs=("y", "i"), opset=12, storage_order=1, **attrs), {"x": x})


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.float16])
def test_max_pool_other_kinds(dtype):
    x = (f32(1, 2, 7, 7) * 40).astype(dtype)
    check(op("MaxPool", {"x": x}, opset=12, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]), {"x": x})


@pytest.mark.parametrize("shape,attrs", POOL_CASES)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool(shape, attrs, count_include_pad):
    x = f32(*shape)
    check(op("AveragePool", {"x": x}, opset=19, count_include_pad=count_include_pad, **attrs), {"x": x})


@pytest.mark.parametrize("kind", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 4, 3, 5), (1, 2, 3, 4, 2)])
def test_global_pools(kind, shape):
    x = f32(*shape)
    check(op(kind, {"x": x}), {"x": x})


# -- normalisation ------------------------------------------------------------------------------
@pytest.mark.parametrize("opset", [9, 15])
def test_batch_norm(opset):
    x = f32(2, 5, 4, 3)
    weights = {"s": f32(5), "b": f32(5), "m": f32(5), "v": np.abs(f32(5)) + 0.1}
    check(op("BatchNormalization", {"x": x}, weights, opset=opset, epsilon=1e-3), {"x": x})


def test_batch_norm_mixed_precision():
    x = f32(1, 4, 3, 3).astype(np.float16)
    weights = {"s": f32(4), "b": f32(4), "m": f32(4), "v": np.abs(f32(4)) + 0.1}
    check(op("BatchNormalization", {"x": x}, weights, opset=15), {"x": x}, oracle=reference_run,
          rtol=2e-3, atol=2e-3)


def test_instance_norm():
    x = f32(2, 3, 5, 4)
    check(op("InstanceNormalization", {"x": x}, {"s": f32(3), "b": f32(3)}, epsilon=1e-3), {"x": x})


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
def test_layer_norm_all_outputs(axis):
    x = f32(2, 3, 4)
    inner = x.shape[axis % 3:]
    weights = {"s": f32(*inner), "b": f32(*inner[1:])}
    model = op("LayerNormalization", {"x": x}, weights, outputs=("y", "mean", "inv"), axis=axis, epsilon=1e-3)
    check(model, {"x": x})


def test_layer_norm_without_bias():
    x = f32(3, 6)
    check(op("LayerNormalization", {"x": x}, {"s": f32(6), "b": None}), {"x": x})


@pytest.mark.parametrize("opset", [18, 21])
def test_group_norm(opset):
    x = f32(2, 6, 3, 2)
    per = 3 if opset == 18 else 6  # opset 18 scales per group, 21 per channel
    weights = {"s": f32(per), "b": f32(per)}
    check(op("GroupNormalization", {"x": x}, weights, opset=opset, num_groups=3, epsilon=1e-3), {"x": x},
          oracle=reference_run)


@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_norm(axis):
    x = f32(2, 3, 4)
    check(op("RMSNormalization", {"x": x}, {"s": f32(4)}, opset=23, axis=axis), {"x": x},
          oracle=reference_run)


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5])
def test_lrn(size):
    # onnxruntime takes odd sizes only; onnx.reference loops its channels over range(N),
    # so it is right only when N == C
    x = f32(7, 7, 3, 3)
    oracle = ort_run if size % 2 else reference_run
    check(op("LRN", {"x": x}, size=size, alpha=1e-2, beta=0.6, bias=1.5), {"x": x}, oracle=oracle)


# -- matrix products ----------------------------------------------------------------------------
@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, (), (5,), (1, 5), (4, 1), (4, 5)])
def test_gemm(trans_a, trans_b, c_shape):
    a = f32(3, 4) if trans_a else f32(4, 3)
    b = f32(5, 3) if trans_b else f32(3, 5)
    c = None if c_shape is None else f32(*c_shape)
    check(op("Gemm", {"a": a}, {"b": b, "c": c}, opset=13, alpha=0.7, beta=1.3, transA=trans_a, transB=trans_b),
          {"a": a})


def test_gemm_integers():
    a, b = RNG.integers(-9, 9, (3, 4)).astype(np.int32), RNG.integers(-9, 9, (4, 2)).astype(np.int32)
    check(op("Gemm", {"a": a}, {"b": b, "c": np.arange(2, dtype=np.int32)}), {"a": a}, oracle=reference_run)


@pytest.mark.parametrize("a_shape,b_shape", [((4,), (4,)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,)), ((3, 4), (4, 5)),
                                             ((2, 1, 3, 4), (5, 4, 2)), ((1, 3, 4), (2, 4, 6))])
def test_matmul(a_shape, b_shape):
    a, b = f32(*a_shape), f32(*b_shape)
    check(op("MatMul", {"a": a, "b": b}), {"a": a, "b": b})


@pytest.mark.parametrize("equation,shapes", [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij->ji", [(3, 4)]), ("i,j->ij", [(3,), (4,)]),
    ("ij->i", [(3, 4)]), ("...ii->...i", [(2, 4, 4)]), ("ij,jk", [(2, 3), (3, 4)]), ("i,i", [(5,), (5,)]),
    ("bhqd, bhkd -> bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("...j,j", [(2, 3, 4), (4,)])])
def test_einsum(equation, shapes):
    feeds = {f"x{i}": f32(*s) for i, s in enumerate(shapes)}
    check(op("Einsum", feeds, opset=12, equation=equation), feeds, oracle=reference_run)


# -- softmax ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset,axis", [(11, None), (11, 0), (11, -2), (13, None), (13, 0), (13, 1), (13, -3)])
def test_softmax(kind, opset, axis):
    x = f32(2, 3, 4) * 5
    attrs = {} if axis is None else {"axis": axis}
    check(op(kind, {"x": x}, opset=opset, **attrs), {"x": x})


# -- dropout ------------------------------------------------------------------------------------
@pytest.mark.parametrize("opset", [10, 13])
def test_dropout_inference_is_identity_with_full_mask(opset):
    x = f32(3, 4)
    check(op("Dropout", {"x": x}, outputs=("y", "mask"), opset=opset), {"x": x}, oracle=reference_run)


def test_dropout_7_mask_has_the_data_type():
    """Dropout-7's mask is of type T (the spec; neither oracle implements that form)."""
    x = f32(3, 4)
    y, mask = glow_run(op("Dropout", {"x": x}, outputs=("y", "mask"), opset=7, ratio=0.3), {"x": x})
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.float32 and np.all(mask == 1)


def test_dropout_zero_ratio_training_is_identity():
    x = f32(3, 4)
    weights = {"r": np.array(0.0, np.float32), "t": np.array(True)}
    model = op("Dropout", {"x": x}, weights, outputs=("y", "mask"), opset=13)
    check(model, {"x": x}, oracle=reference_run)
    kinds = {n.kind for n in import_model(model).functions["main"].nodes}
    assert kinds == {"Splat", "Save"}


# -- errors -------------------------------------------------------------------------------------
def test_training_modes_are_unsupported():
    x = f32(2, 3, 2, 2)
    weights = {"s": f32(3), "b": f32(3), "m": f32(3), "v": np.abs(f32(3))}
    model = op("BatchNormalization", {"x": x}, weights, outputs=("y", "rm", "rv"), opset=15, training_mode=1)
    with pytest.raises(UnsupportedError, match="node 'y' .*training_mode"):
        import_model(model)
    model = op("Dropout", {"x": x}, {"r": np.array(0.3, np.float32), "t": np.array(True)}, opset=13)
    with pytest.raises(UnsupportedError, match="node 'y' .*training_mode"):
        import_model(model)


def test_conv_channel_mismatch_names_node():
    model = op("Conv", {"x": f32(1, 3, 5, 5)}, {"w": f32(4, 2, 3, 3)})
    with pytest.raises(GraphError, match="node 'y' \\(Conv\\).*channels"):
        import_model(model)


def test_pool_window_larger_than_input_names_node():
    model = op("MaxPool", {"x": f32(1, 1, 2, 2)}, kernel_shape=[3, 3])
    with pytest.raises(GraphError, match="node 'y' \\(MaxPool\\).*does not fit"):
        import_model(model)


def test_gemm_inner_dims_must_agree():
    model = op("Gemm", {"a": f32(2, 3)}, {"b": f32(4, 5)})
    with pytest.raises(GraphError, match="node 'y' \\(Gemm\\).*inner dims"):
        import_model(model)


def test_einsum_label_size_mismatch():
    model = op("Einsum", {"a": f32(2, 3), "b": f32(4, 5)}, equation="ij,jk->ik")
    with pytest.raises(GraphError, match="node 'y' \\(Einsum\\).*label 'j'"):
        import_model(model)


def test_layer_norm_scale_must_fit_normalised_dims():
    model = op("LayerNormalization", {"x": f32(2, 3, 4)}, {"s": f32(3)}, axis=-1)
    with pytest.raises(GraphError, match="node 'y' \\(LayerNormalization\\).*scale"):
        import_model(model)
