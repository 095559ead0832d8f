"""Data-movement ops against onnx.reference (and onnxruntime where the reference lacks a form)."""
import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import helper, numpy_helper

from glowsdk.errors import GlowError, GraphError, InputError, UnsupportedError
from glowsdk.frontend.onnx.importer import import_model
from glowsdk.graph.function import Module
from glowsdk.graph.nodes import tensor as t
from glowsdk.graph.types import ElemKind, Type
from glowsdk.reference.evaluator import evaluate

from oracle import glow_run, reference_run

RNG = np.random.default_rng(7)
X = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)


def model(nodes, inputs, outputs=("y",), opset=21, initializers=None):
    """A graph of `nodes` (helper.make_node) with typed inputs and untyped outputs."""
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                    for n, a in inputs.items()]
    graph_outputs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in outputs]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in (initializers or {}).items()]
    graph = helper.make_graph(nodes, "g", graph_inputs, graph_outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def op(op_type, inputs, opset=21, consts=None, outputs=("y",), **attrs):
    """One node reading graph inputs `inputs` then initializers `consts` ('' for an absent input)."""
    consts = consts or {}
    names = list(inputs) + list(consts)
    present = {n: v for n, v in consts.items() if v is not None}
    node = helper.make_node(op_type, [n if consts.get(n, 0) is not None else "" for n in names],
                            list(outputs), **attrs)
    return model([node], inputs, outputs, opset, present)


def check(m, feeds, oracle=reference_run):
    want = oracle(m, feeds)
    got = glow_run(m, feeds)
    assert len(want) == len(got)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(g, w)


def ort_run(m, feeds):
    m = onnx.shape_inference.infer_shapes(m)  # onnxruntime needs typed outputs
    m.ir_version = min(m.ir_version, 10)  # the newest IR version onnxruntime reads
    session = onnxruntime.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, dict(feeds))


def i64(values):
    return np.array(values, dtype=np.int64)


# -- reshaping ------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [[6, 20], [0, -1], [2, 0, 20], [-1], [1, 2, 1, 60], [2, 3, -1, 1]])
def test_reshape(shape):
    check(op("Reshape", {"x": X}, consts={"s": i64(shape)}), {"x": X})


def test_reshape_allowzero_keeps_zero_dims():
    x = np.zeros((0, 3, 4), np.float32)
    check(op("Reshape", {"x": x}, consts={"s": i64([3, 0, 4])}, allowzero=1), {"x": x})


@pytest.mark.parametrize("axis", range(-4, 5))
def test_flatten(axis):
    check(op("Flatten", {"x": X}, axis=axis), {"x": X})


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze_axes_forms(opset):
    x = RNG.standard_normal((1, 3, 1, 2)).astype(np.float32)
    if opset < 13:
        check(op("Squeeze", {"x": x}, opset, axes=[0, -2]), {"x": x})
        check(op("Unsqueeze", {"x": x}, opset, axes=[-1, 0, 3]), {"x": x})
    else:
        check(op("Squeeze", {"x": x}, opset, consts={"a": i64([0, -2])}), {"x": x})
        check(op("Unsqueeze", {"x": x}, opset, consts={"a": i64([-1, 0, 3])}), {"x": x})
    check(op("Squeeze", {"x": x}, opset), {"x": x})


@pytest.mark.parametrize("seed", range(4))
def test_transpose(seed):
    perm = np.random.default_rng(seed).permutation(4).tolist()
    check(op("Transpose", {"x": X}, perm=perm), {"x": X})
    check(op("Transpose", {"x": X}), {"x": X})


# -- joining and cutting --------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 2, -1])
def test_concat(axis):
    parts = {}
    for i, extra in enumerate([1, 3, 2]):
        shape = list(X.shape)
        shape[axis] = extra
        parts[f"p{i}"] = RNG.integers(-9, 9, shape).astype(np.int32)
    check(op("Concat", parts, axis=axis), parts)


@pytest.mark.parametrize("opset,sizes,attrs", [
    (11, [1, 3, 1], {}), (13, [2, 0, 3], {}), (13, None, {}), (18, None, {"num_outputs": 3}),
    (18, [4, 1, 0], {})])
def test_split(opset, sizes, attrs):
    x = RNG.standard_normal((3, 5, 2)).astype(np.float32)
    if opset < 13 and sizes is not None:
        attrs = {**attrs, "split": sizes}
    consts = {} if sizes is None or opset < 13 else {"s": i64(sizes)}
    outputs = ("a", "b", "c") if sizes is not None or attrs else ("a",)
    check(op("Split", {"x": x}, opset, consts, outputs, axis=1, **attrs), {"x": x})


def test_slice_attribute_form():
    check(op("Slice", {"x": X}, 9, starts=[1, -3], ends=[100, -1], axes=[1, 3]), {"x": X})


@pytest.mark.parametrize("seed", range(20))
def test_slice_random_bounds(seed):
    rng = np.random.default_rng(seed)
    axes = rng.permutation(4)[:rng.integers(1, 5)]
    dims = np.array(X.shape)[axes]
    starts = rng.integers(-dims - 2, dims + 2)
    ends = rng.integers(-dims - 2, dims + 2)
    steps = rng.choice([-3, -2, -1, 1, 2, 3], len(axes))
    signed_axes = axes - 4 * rng.integers(0, 2, len(axes))
    consts = {"st": i64(starts), "en": i64(ends), "ax": i64(signed_axes), "sp": i64(steps)}
    # onnxruntime follows the spec's clamping for negative steps; onnx.reference uses numpy's.
    check(op("Slice", {"x": X}, 13, consts), {"x": X}, oracle=ort_run)


def test_slice_extreme_bounds_and_default_axes():
    big = np.iinfo(np.int64)
    check(op("Slice", {"x": X}, 13, {"st": i64([big.max, 1]), "en": i64([big.min, big.max]),
                                      "ax": None, "sp": i64([-1, 2])}), {"x": X})


# -- padding --------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_attribute_form(mode):
    x = X[0]
    check(op("Pad", {"x": x}, 10, mode=mode, pads=[0, 1, 2, 1, 2, 0], value=1.5), {"x": x})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_input_form_with_axes(mode):
    consts = {"p": i64([2, 1, 1, 3]), "v": np.array(-2.0, np.float32), "a": i64([-1, 1])}
    check(op("Pad", {"x": X}, 21, consts, mode=mode), {"x": X})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_negative_pads_crop_first_like_onnxruntime(mode):
    x = RNG.integers(-100, 100, (4, 6)).astype(np.int64)
    m = op("Pad", {"x": x}, 19, {"p": i64([-1, -2, 1, 3]), "v": i64(7)}, mode=mode)
    check(m, {"x": x}, oracle=ort_run)


# -- gathering ------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_runtime_indices(axis):
    dim = X.shape[axis]
    idx = RNG.integers(-dim, dim, (2, 3)).astype(np.int64)
    check(op("Gather", {"x": X, "i": idx}, axis=axis), {"x": X, "i": idx})
    check(op("Gather", {"x": X}, consts={"i": idx[0].astype(np.int32)}, axis=axis), {"x": X})


def test_gather_out_of_range_is_an_input_error():
    idx = np.array([0, 5], np.int64)
    with pytest.raises(InputError, match="index 5 is out of range"):
        glow_run(op("Gather", {"x": X, "i": idx}, axis=2), {"x": X, "i": idx})


@pytest.mark.parametrize("axis", [0, 2, 3])
def test_gather_elements(axis):
    shape = list(X.shape)
    shape[axis] = 6
    idx = RNG.integers(-X.shape[axis], X.shape[axis], shape).astype(np.int64)
    check(op("GatherElements", {"x": X, "i": idx}, axis=axis), {"x": X, "i": idx})
    smaller = np.ascontiguousarray(idx[:1, :2, :3, :4])  # other dims below data's: onnxruntime allows it
    m = op("GatherElements", {"x": X, "i": smaller}, axis=axis - 4)
    check(m, {"x": X, "i": smaller}, oracle=ort_run)


# -- repeating, blocks, triangles -------------------------------------------------------------
def test_tile_and_expand():
    x = RNG.standard_normal((3, 1, 2)).astype(np.float32)
    check(op("Tile", {"x": x}, consts={"r": i64([2, 3, 1])}), {"x": x})
    check(op("Expand", {"x": x}, consts={"s": i64([2, 1, 4, 1])}), {"x": x})
    check(op("Expand", {"x": x}, consts={"s": i64([1])}), {"x": x})


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(mode):
    x = RNG.standard_normal((2, 8, 3, 2)).astype(np.float32)
    check(op("DepthToSpace", {"x": x}, blocksize=2, mode=mode), {"x": x})


@pytest.mark.parametrize("opset,mode", [(13, None), (28, "DCR"), (28, "CRD")])
def test_space_to_depth(opset, mode):
    x = RNG.standard_normal((2, 3, 6, 4)).astype(np.float32)
    attrs = {"mode": mode} if mode else {}
    check(op("SpaceToDepth", {"x": x}, opset, blocksize=2, **attrs), {"x": x})


@pytest.mark.parametrize("upper,k", [(1, None), (0, None), (1, -1), (0, 2), (1, 9)])
def test_trilu(upper, k):
    check(op("Trilu", {"x": X}, 14, {"k": None if k is None else i64(k)}, upper=upper), {"x": X})


# -- values known at import ---------------------------------------------------------------------
def test_shape_gather_slice_concat_fold_into_reshape():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["batch"]),
             helper.make_node("Constant", [], ["minus_one"], value_ints=[-1]),
             helper.make_node("Slice", ["s", "two", "three"], ["last"]),
             helper.make_node("Concat", ["batch", "minus_one", "last"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Shape", ["r"], ["y"], start=-2)]
    m = model(nodes, {"x": X}, ("r", "y"), 21, {"zero": i64([0]), "two": i64([2]), "three": i64([3])})
    assert import_model(m).functions["main"].count_kinds() == {"Reshape": 1, "Save": 2}
    check(m, {"x": X})


def test_constant_attribute_forms():
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.array([5.0, 6.0], np.float32)),
                                       numpy_helper.from_array(i64([1, 7])), [2, 4])
    forms = [{"value": numpy_helper.from_array(X[0, 0])}, {"value_float": 2.5},
             {"value_floats": [1.0, 2.0]}, {"value_int": 3}, {"value_ints": [4, 5, 6]}]
    for attrs in forms:
        nodes = [helper.make_node("Constant", [], ["c"], **attrs), helper.make_node("Identity", ["c"], ["y"])]
        check(model(nodes, {}), {})
    nodes = [helper.make_node("Constant", [], ["y"], sparse_value=sparse)]
    dense = np.zeros(8, np.float32)
    dense[[1, 7]] = [5.0, 6.0]
    np.testing.assert_array_equal(glow_run(model(nodes, {}), {})[0], dense.reshape(2, 4))


def test_constant_of_shape_is_a_splat():
    value = numpy_helper.from_array(np.array([3], np.int32))
    m = op("ConstantOfShape", {}, consts={"s": i64([2, 0, 3])}, value=value)
    assert import_model(m).functions["main"].count_kinds() == {"Save": 1, "Splat": 1}
    check(m, {})
    check(op("ConstantOfShape", {}, consts={"s": i64([4, 1])}), {})


@pytest.mark.parametrize("args", [(0, 10, 3), (10, -4, -3), (5, 1, 2), (1.5, 4.25, 0.5), (2.0, -1.0, -0.7)])
def test_range(args):
    dtype = np.float32 if isinstance(args[0], float) else np.int32
    consts = {n: np.array(v, dtype) for n, v in zip(("a", "b", "c"), args)}
    check(op("Range", {}, consts=consts), {})


# -- types: quantized pass-through and ill-typed graphs ------------------------------------------
def test_data_movement_keeps_quantization():
    module = Module()
    fn = module.create_function()
    q = Type(ElemKind.QUINT8, (2, 3), scale=0.5, offset=10)
    x = module.create_placeholder("x", q).result()
    y = fn.add(t.Transpose, x, perm=(1, 0))
    z = fn.add(t.Pad, y, pads=(1, 0, 0, 0), value=0.0)
    w = fn.add(t.Concat, z, z, axis=1)
    assert w.type == Type(ElemKind.QUINT8, (4, 4), scale=0.5, offset=10)
    fn.save(w, "out")
    data = np.arange(6, dtype=np.uint8).reshape(2, 3)
    out = evaluate(fn, {"x": data})["out"]
    assert out[0].tolist() == [10, 10, 10, 10] and out[1:, :2].tolist() == data.T.tolist()


def test_ill_typed_nodes_name_themselves():
    module = Module()
    fn = module.create_function()
    a = module.create_placeholder("a", Type(ElemKind.FLOAT32, (2, 3))).result()
    b = module.create_placeholder("b", Type(ElemKind.INT32, (2, 3))).result()
    with pytest.raises(GraphError, match="node 'cat'.*Concat.*share one element kind"):
        fn.add(t.Concat, a, b, axis=0, name="cat")
    with pytest.raises(GraphError, match="node 'r'.*Reshape.*cannot reshape"):
        fn.add(t.Reshape, a, shape=(4, 2), name="r")
    with pytest.raises(GraphError, match="node 'g'.*Gather.*indices must be int32 or int64"):
        fn.add(t.Gather, b, a, name="g")
    with pytest.raises(GraphError, match="node 's'.*Slice.*not normalised"):
        fn.add(t.Slice, a, starts=(0, 4), ends=(2, 3), steps=(1, 1), name="s")


def test_unsupported_forms():
    nodes = [helper.make_node("Constant", [], ["y"], value_string="hi", name="text")]
    with pytest.raises(UnsupportedError, match="node 'text'.*string constants"):
        import_model(model(nodes, {}))
    with pytest.raises(GlowError, match="Split.*do not cut"):
        glow_run(op("Split", {"x": X}, 13, {"s": i64([1, 1])}, ("a", "b"), axis=1), {"x": X})
