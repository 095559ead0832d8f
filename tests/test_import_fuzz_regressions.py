"""One test per root cause the ONNX fuzzer found (issue 22): each malformed model gives a one-line
GlowError naming what is wrong, or, for the silently wrong cases, the right network."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

import glowsdk
from glowsdk.errors import GlowError, GraphError, ModelFileError, UnsupportedError
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile

F = TensorProto.FLOAT


def model(nodes, inputs=(("x", [2, 3]),), outputs=("y",), inits=(), opset=18) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs],
                              list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def header(name: str, dims: list[int]) -> onnx.TensorProto:
    """A float tensor with dims and no data (helper.make_tensor insists on the data)."""
    tensor = TensorProto(name=name, data_type=F)
    tensor.dims.extend(dims)
    return tensor


def refused(source, kind=GlowError, *words: str) -> str:
    """The one-line message `glowsdk.load(source)` fails with; it holds every one of `words`."""
    with pytest.raises(kind) as caught:
        glowsdk.load(source)
    message = str(caught.value)
    assert "\n" not in message and "\r" not in message and message.isprintable(), message
    for word in words:
        assert word in message, message
    return message


def saved(tmp_path, proto: onnx.ModelProto, patches=()) -> str:
    """`proto` written to tmp_path/model.onnx, with byte `patches` (old, new) applied."""
    data = proto.SerializeToString()
    for old, new in patches:
        assert len(old) == len(new) and old in data
        data = data.replace(old, new)
    path = tmp_path / "model.onnx"
    path.write_bytes(data)
    return str(path)


def test_empty_name_for_a_required_input():
    refused(model([helper.make_node("Transpose", [""], ["y"], name="t")]), GraphError,
            "node 't' (Transpose)", "input 0 (data) is required")


@pytest.mark.parametrize("node, expected", [
    (helper.make_node("Concat", ["x", "x"], ["y"], axis=[0, 1]), "must be INT, got INTS"),
    (helper.make_node("Flatten", ["x"], ["y"], axis="s"), "must be INT, got STRING"),
    (helper.make_node("Flatten", ["x"], ["y"]), "must be INT, got SPARSE_TENSOR"),
])
def test_attributes_of_the_wrong_type(node, expected):
    if not node.attribute:
        node.attribute.append(AttributeProto(name="axis", type=AttributeProto.SPARSE_TENSOR))
    refused(model([node]), GraphError, "attribute 'axis'", expected)


@pytest.mark.parametrize("spoil, expected", [
    (lambda t: (t.segment.__setattr__("begin", 0), t.segment.__setattr__("end", 1)), "segment"),
    (lambda t: t.__setattr__("raw_data", t.raw_data[:5]), "cannot read tensor data"),
    (lambda t: t.__setattr__("data_type", TensorProto.UNDEFINED), "element type UNDEFINED"),
])
def test_tensor_attributes_with_unreadable_data(spoil, expected):
    value = numpy_helper.from_array(np.ones((2, 3), np.float32))
    spoil(value)
    node = helper.make_node("Constant", [], ["y"], value=value, name="c")
    refused(model([node], inputs=()), GlowError, "node 'c' (Constant)", "attribute 'value'", expected)


def test_invalid_utf8_in_a_string_attribute_and_in_op_type(tmp_path):
    bad_mode = helper.make_node("Pad", ["x", "p"], ["y"], mode=b"\xff\xfe")
    pads = numpy_helper.from_array(np.zeros(4, np.int64), "p")
    refused(model([bad_mode], inits=[pads]), GraphError, "attribute 'mode' is not valid UTF-8", "\\xff")
    # protobuf hands Python an op_type that is not UTF-8 as bytes; the message must still build
    path = saved(tmp_path, model([helper.make_node("OPTYPE", ["x"], ["y"])]), [(b"OPTYPE", b"Re\xffLu\xc3")])
    refused(path, ModelFileError, "op_type is not valid UTF-8", "Re\\xffLu\\xc3")


def test_negative_dimensions():
    refused(model([helper.make_node("Relu", ["x"], ["y"])], inputs=[("x", [2, -3])]), GlowError,
            "graph value 'x'", "negative")
    weights = header("w", [-1, 3])
    refused(model([helper.make_node("Add", ["x", "w"], ["y"])], inits=[weights]), ModelFileError,
            "initializer 'w'", "negative dimension")


def test_variadic_op_with_no_inputs():
    refused(model([helper.make_node("Mean", [], ["y"], name="m")]), GraphError,
            "node 'm' (Mean)", "takes at least 1 inputs, got 0")
    refused(model([helper.make_node("Sum", ["x", ""], ["y"], name="s")]), GraphError, "input 1", "empty")


def _external(tmp_path, fields: dict[str, str], subgraph: bool = False) -> str:
    (tmp_path / "w.bin").write_bytes(np.ones(6, np.float32).tobytes())
    weights = header("w", [2, 3])
    weights.data_location = TensorProto.EXTERNAL
    for key, value in {"location": "w.bin", **fields}.items():
        entry = weights.external_data.add()
        entry.key, entry.value = key, value
    if not subgraph:
        proto = model([helper.make_node("Add", ["x", "w"], ["y"])], inits=[weights])
    else:
        branch = helper.make_graph([helper.make_node("Identity", ["w"], ["o"])], "b", [],
                                   [helper.make_tensor_value_info("o", F, [2, 3])], [weights])
        proto = model([helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)],
                      inputs=())
    return saved(tmp_path, proto)


@pytest.mark.parametrize("fields, expected", [
    ({"offset": "1e3"}, "offset '1e3' is not a whole number"),
    ({"length": "abc"}, "length 'abc' is not a whole number"),
    ({"offset": "-4"}, "offset '-4' is not a whole number"),
    ({"length": "100"}, "outside 'w.bin'"),
    ({"location": "w\0.bin"}, "NUL"),
])
def test_external_data_fields(tmp_path, fields, expected):
    refused(_external(tmp_path, fields), ModelFileError, "tensor 'w'", expected)


def test_external_data_of_a_subgraph_cannot_escape_the_folder(tmp_path):
    (tmp_path / "outside.bin").write_bytes(b"\0" * 24)
    folder = tmp_path / "model"
    folder.mkdir()
    refused(_external(folder, {"location": "../outside.bin"}, subgraph=True), ModelFileError,
            "outside the model's folder")
    (folder / "w.bin").unlink()
    assert "unsupported op(s): If" in refused(_external(folder, {}, subgraph=True))  # read, then refused


def _shape_input(op: str, shape: list[int], **attrs) -> onnx.ModelProto:
    data = numpy_helper.from_array(np.array(shape, np.int64), "s")
    inputs = ["x", "s"] if op in ("Expand", "Tile") else ["s"]
    return model([helper.make_node(op, inputs, ["y"], name="big", **attrs)],
                 inputs=[("x", [1, 3])] if len(inputs) == 2 else (), inits=[data])


def test_size_guard_before_any_allocation(monkeypatch):
    start, limit, delta = (numpy_helper.from_array(np.array(v, np.int64), n)
                           for n, v in (("a", 0), ("b", 1 << 40), ("c", 1)))
    refused(model([helper.make_node("Range", ["a", "b", "c"], ["y"], name="big")], inputs=(),
                  inits=[start, limit, delta]), UnsupportedError, "node 'big' (Range)", "GLOWSDK_MAX_TENSOR_BYTES")
    refused(_shape_input("ConstantOfShape", [1 << 20, 1280]), UnsupportedError,
            "node 'big' (ConstantOfShape)", "5368709120 bytes")
    refused(_shape_input("Expand", [1 << 31, 3]), UnsupportedError, "node 'big' (Expand)")
    refused(_shape_input("Tile", [1 << 20, 1 << 12]), UnsupportedError, "node 'big' (Tile)")
    refused(model([helper.make_node("Relu", ["x"], ["y"])], inputs=[("x", [1 << 40])]), UnsupportedError,
            "input 'x'")
    huge = header("w", [1 << 40])
    refused(model([helper.make_node("Add", ["x", "w"], ["y"])], inits=[huge]), UnsupportedError, "initializer 'w'")
    refused(_shape_input("ConstantOfShape", [0, 1 << 62]), UnsupportedError, "node 'big' (ConstantOfShape)")
    # the limit is the environment's to set
    small = _shape_input("ConstantOfShape", [64, 64])
    glowsdk.load(small)
    monkeypatch.setenv("GLOWSDK_MAX_TENSOR_BYTES", "1000")
    refused(small, UnsupportedError, "above the limit of 1000")


def test_newlines_in_names_and_paths_stay_escaped(tmp_path):
    message = refused(model([helper.make_node("Transpose", ["x", "x"], ["y"], name="a\nb")]), GraphError,
                      "node 'a\\nb' (Transpose)")
    assert message.count("\\n") == 1
    refused(model([helper.make_node("Relu", ["z\r\n"], ["y"])]), GraphError, "reads 'z\\r\\n'")
    folder = tmp_path / "new\nline"
    folder.mkdir()
    path = folder / "model.onnx"
    path.write_bytes(b"not onnx")
    refused(str(path), ModelFileError, "new\\nline")


PASS_THROUGH_TARGETS = ["interpreter", "cpu", "npu"]


def _pass_through_model(conv: bool) -> onnx.ModelProto:
    """Input x also listed as output x (an identity, as onnxruntime runs it), beside a conv of x, or alone."""
    shape = [1, 4, 5, 5]
    nodes, inits, outputs = [], [], [helper.make_tensor_value_info("x", F, shape)]
    if conv:
        rng = np.random.default_rng(0)
        inits = [numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.2, "w")]
        nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])]
        outputs.insert(0, helper.make_tensor_value_info("y", F, shape))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, shape)], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("target", PASS_THROUGH_TARGETS)
@pytest.mark.parametrize("conv", [True, False], ids=["beside-a-conv", "alone"])
def test_a_graph_output_that_is_a_graph_input_keeps_its_name_and_value(target, conv):
    proto = _pass_through_model(conv)
    x = np.random.default_rng(1).standard_normal((1, 4, 5, 5)).astype(np.float32)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"x": x})))
    net = glowsdk.load(proto)
    assert [o.name for o in net.outputs] == list(want) and [i.name for i in net.inputs] == ["x"]
    quant = QuantizationConfig(collect_profile(net, calibration_random(net, 2))) if target == "npu" else None
    exe = glowsdk.compile(net, target, quantization=quant, fallback=None)
    got = exe.run({"x": x})
    assert [o.name for o in exe.outputs] == list(want) == list(got)
    np.testing.assert_array_equal(got["x"], want["x"])  # an identity: the same bits, on every target
    if conv:
        tolerance = 0.1 * np.abs(want["y"]).max() if target == "npu" else 1e-5  # int8 against float
        np.testing.assert_allclose(got["y"], want["y"], atol=tolerance)


def test_an_initializer_that_is_a_graph_output_keeps_its_name():
    # an initializer that is also a graph output keeps its name: constants take another one
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    net = glowsdk.load(model([helper.make_node("Add", ["x", "w"], ["y"])], outputs=("y", "w"), inits=[w]))
    assert [o.name for o in net.outputs] == ["y", "w"]
    out = glowsdk.compile(net, "interpreter").run({"x": np.zeros((2, 3), np.float32)})
    np.testing.assert_array_equal(out["w"], np.ones((2, 3), np.float32))


def test_two_nodes_defining_one_value():
    refused(model([helper.make_node("Relu", ["x"], ["y"], name="first"),
                   helper.make_node("Neg", ["x"], ["y"], name="second")]), GraphError,
            "node 'second' (Neg) defines 'y'", "already defined by node 'first'")
    refused(model([helper.make_node("Relu", ["x"], ["x"], name="r")], outputs=("x",)), GraphError,
            "defines 'x', which is already a graph input")
    refused(model([helper.make_node("Relu", ["x"], ["y"])], outputs=("y", "y")), GraphError, "listed 2 times")


def test_keepdims_must_be_0_or_1():
    axes = numpy_helper.from_array(np.array([1], np.int64), "a")
    refused(model([helper.make_node("ReduceSum", ["x", "a"], ["y"], keepdims=2, name="r")], inits=[axes]),
            GraphError, "node 'r' (ReduceSum)", "attribute 'keepdims' is a flag and must be 0 or 1, got 2")
    net = glowsdk.load(model([helper.make_node("ReduceSum", ["x", "a"], ["y"], keepdims=0)], inits=[axes]))
    assert net.outputs[0].type.shape == (2,)
