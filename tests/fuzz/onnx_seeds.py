"""The models the ONNX fuzzer starts from: the bundled zoo networks, the digits CNN, and one small
graph per op family (each imports cleanly, so every mutant is one or two edits away from valid).

A seed is the serialized model: parsing a fresh copy per mutant is cheaper than deep-copying.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from glowsdk import zoo

F, I64 = TensorProto.FLOAT, TensorProto.INT64

ZOO_SEEDS = ("squeezenet", "shufflenet", "bvlc_alexnet", "resnet50", "inception_v1", "zfnet512")
"""Bundled networks used as seeds (densenet121, inception_v2 and vgg19 add size, not new ops)."""


def _model(nodes, inputs, outputs, consts=None, opset=18) -> onnx.ModelProto:
    """A one-graph model; `inputs`/`outputs` are (name, shape) float tensors, `consts` initializers."""
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (consts or {}).items()]
    graph = helper.make_graph(nodes, "seed", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                              [_output(n, s) for n, s in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _output(name, shape) -> onnx.ValueInfoProto:
    """A graph output; with no shape also no element type, so any converter result fits."""
    return helper.make_tensor_value_info(name, F if shape else TensorProto.UNDEFINED, shape)


def _unary(op, shape=(2, 3, 4), opset=18, consts=None, extra=(), **attrs) -> onnx.ModelProto:
    """`op` applied to float input x (plus named constant inputs `extra`); output shape left open."""
    node = helper.make_node(op, ["x", *extra], ["y"], name=f"{op.lower()}_node", **attrs)
    return _model([node], [("x", list(shape))], [("y", None)], consts, opset)


def _i64(*values) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def small_graphs() -> dict[str, onnx.ModelProto]:
    """One small model per op or op form, named after it."""
    w = np.ones((4, 3, 3, 3), np.float32)
    lstm_w, lstm_r = np.ones((1, 16, 3), np.float32), np.ones((1, 16, 4), np.float32)
    seeds = {
        "Transpose": _unary("Transpose", perm=[2, 0, 1]),
        "Flatten": _unary("Flatten", axis=1),
        "Reshape": _unary("Reshape", consts={"s": _i64(6, -1)}, extra=["s"]),
        "Squeeze": _unary("Squeeze", (2, 1, 4), consts={"a": _i64(1)}, extra=["a"]),
        "Unsqueeze": _unary("Unsqueeze", consts={"a": _i64(0)}, extra=["a"]),
        "Slice": _unary("Slice", consts={"b": _i64(0), "e": _i64(2), "a": _i64(1)}, extra=["b", "e", "a"]),
        "Pad": _unary("Pad", consts={"p": _i64(0, 1, 0, 0, 1, 0)}, extra=["p"]),
        "Split": helper.make_model(helper.make_graph(
            [helper.make_node("Split", ["x"], ["y", "z"], axis=2, num_outputs=2)], "seed",
            [helper.make_tensor_value_info("x", F, [2, 3, 4])],
            [_output("y", None), _output("z", None)]),
            opset_imports=[helper.make_opsetid("", 18)]),
        "Gather": _unary("Gather", consts={"i": _i64(0, 1)}, extra=["i"], axis=1),
        "Tile": _unary("Tile", consts={"r": _i64(1, 2, 1)}, extra=["r"]),
        "Expand": _unary("Expand", (3, 1), consts={"s": _i64(2, 3, 4)}, extra=["s"]),
        "DepthToSpace": _unary("DepthToSpace", (1, 4, 2, 2), blocksize=2),
        "Trilu": _unary("Trilu", (3, 3), upper=1),
        "Shape": _unary("Shape", start=1),
        "Concat": _model([helper.make_node("Concat", ["x", "x"], ["y"], axis=1)],
                         [("x", [2, 3])], [("y", None)]),
        "Mean": _model([helper.make_node("Mean", ["x", "x", "x"], ["y"])], [("x", [2, 3])], [("y", None)]),
        "Max": _model([helper.make_node("Max", ["x", "x"], ["y"])], [("x", [2, 3])], [("y", None)]),
        "Where": _model([helper.make_node("Greater", ["x", "x"], ["c"]),
                         helper.make_node("Where", ["c", "x", "x"], ["y"])],
                        [("x", [2, 3])], [("y", None)]),
        "Range": _model([helper.make_node("Range", ["a", "b", "c"], ["y"])], [], [("y", None)],
                        {"a": np.array(0, np.int64), "b": np.array(10, np.int64), "c": np.array(2, np.int64)}),
        "ConstantOfShape": _model([helper.make_node("ConstantOfShape", ["s"], ["y"],
                                                    value=numpy_helper.from_array(np.array([1.5], np.float32)))],
                                  [], [("y", None)], {"s": _i64(2, 3)}),
        "Constant": _model([helper.make_node("Constant", [], ["c"],
                                             value=numpy_helper.from_array(np.ones((2, 3), np.float32))),
                            helper.make_node("Add", ["x", "c"], ["y"])], [("x", [2, 3])], [("y", None)]),
        "ConstantInts": _model([helper.make_node("Constant", [], ["c"], value_ints=[2, 3]),
                                helper.make_node("Reshape", ["x", "c"], ["y"])], [("x", [6])], [("y", None)]),
        "ReduceSum": _unary("ReduceSum", consts={"a": _i64(1)}, extra=["a"], keepdims=1),
        "ReduceMean": _unary("ReduceMean", axes=[1], keepdims=0, opset=13),
        "ArgMax": _unary("ArgMax", axis=1, keepdims=1),
        "TopK": _model([helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1)], [("x", [2, 5])],
                       [("v", None)], {"k": _i64(2)}),
        "CumSum": _unary("CumSum", consts={"a": _i64(1)}, extra=["a"]),
        "Softmax": _unary("Softmax", axis=-1),
        "Conv": _unary("Conv", (1, 3, 8, 8), consts={"w": w}, extra=["w"], pads=[1, 1, 1, 1], strides=[2, 2]),
        "ConvTranspose": _unary("ConvTranspose", (1, 4, 4, 4), consts={"w": w}, extra=["w"], strides=[2, 2]),
        "MaxPool": _unary("MaxPool", (1, 3, 8, 8), kernel_shape=[2, 2], strides=[2, 2]),
        "AveragePool": _unary("AveragePool", (1, 3, 8, 8), kernel_shape=[3, 3], auto_pad="SAME_UPPER"),
        "GlobalAveragePool": _unary("GlobalAveragePool", (1, 3, 4, 4)),
        "BatchNormalization": _unary("BatchNormalization", (1, 3, 4, 4), extra=["s", "b", "m", "v"],
                                     consts={k: np.ones(3, np.float32) for k in "sbmv"}, epsilon=1e-3),
        "LayerNormalization": _unary("LayerNormalization", consts={"s": np.ones(4, np.float32)}, extra=["s"],
                                     axis=-1),
        "LRN": _unary("LRN", (1, 3, 4, 4), size=3),
        "Gemm": _unary("Gemm", (2, 3), consts={"b": np.ones((3, 4), np.float32)}, extra=["b"], transA=0, alpha=2.0),
        "MatMul": _unary("MatMul", (2, 3), consts={"b": np.ones((3, 4), np.float32)}, extra=["b"]),
        "Einsum": _unary("Einsum", (2, 3), consts={"b": np.ones((3, 4), np.float32)}, extra=["b"],
                         equation="ij,jk->ik"),
        "LeakyRelu": _unary("LeakyRelu", alpha=0.2),
        "Gelu": _unary("Gelu", opset=20, approximate="tanh"),
        "Clip": _unary("Clip", consts={"lo": np.array(0, np.float32)}, extra=["lo"]),
        "Cast": _unary("Cast", to=TensorProto.FLOAT16),
        "Mod": _unary("Mod", consts={"d": np.array(3, np.float32)}, extra=["d"], fmod=1),
        "Dropout": _unary("Dropout"),
        "Resize": _unary("Resize", (1, 1, 2, 2), consts={"r": np.zeros(0, np.float32),
                                                         "sc": np.array([1, 1, 2, 2], np.float32)},
                         extra=["r", "sc"], mode="linear"),
        "Upsample": _unary("Upsample", (1, 1, 2, 2), opset=9, consts={"sc": np.array([1, 1, 2, 2], np.float32)},
                           extra=["sc"]),
        "LSTM": _unary("LSTM", (5, 2, 3), consts={"w": lstm_w, "r": lstm_r}, extra=["w", "r"], hidden_size=4),
        "QuantizeLinear": _unary("QuantizeLinear", consts={"s": np.array(0.1, np.float32),
                                                           "z": np.array(3, np.uint8)}, extra=["s", "z"]),
        "Old Slice": _unary("Slice", opset=9, starts=[0], ends=[2], axes=[1]),
        "If": _if_seed(),
    }
    return seeds


def _if_seed() -> onnx.ModelProto:
    """An If with initializers inside its branches: sub-graph tensors (and their external data) are
    read by the loader even though glowsdk refuses If itself."""
    def branch(value: float) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node("Identity", ["t"], ["o"])], "b", [],
                                 [helper.make_tensor_value_info("o", F, [2])],
                                 [numpy_helper.from_array(np.full(2, value, np.float32), "t")])
    node = helper.make_node("If", ["c"], ["y"], then_branch=branch(1.0), else_branch=branch(2.0))
    graph = helper.make_graph([node], "seed", [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", F, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@lru_cache(maxsize=1)
def seeds() -> dict[str, bytes]:
    """Every seed, serialized: zoo networks, the digits CNN, the small graphs."""
    out = {name: zoo.bundled_path(name).read_bytes() for name in ZOO_SEEDS}
    digits = onnx.load(str(zoo.digits_model_path()))
    digits.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1  # the batch dim is symbolic
    out["digits_cnn"] = digits.SerializeToString()
    for name, model in small_graphs().items():
        model.ir_version = min(model.ir_version, 10)
        out[name] = model.SerializeToString()
    return out
