"""Conv as patch extraction + MatMul, for a backend that runs MatMul but not Conv.

Each case imports a one-Conv ONNX model, compiles it for a GEMM-only chip (whose compiled
function is the interpreter's, so the lowered graph runs on the reference kernels) and checks
the structure (no Conv left, the multiply-adds in one canonical MatMul) and the numbers
against onnxruntime running the original Conv.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from glowsdk.backends.interpreter.backend import InterpreterFunction
from glowsdk.compiler.backend import Backend, CompiledFunction, CompileOptions
from glowsdk.compiler.lowering.driver import lower_function
from glowsdk.compiler.lowering.primitives import PRIMITIVES
from glowsdk.compiler.lowering.rules import conv_as_matmul
from glowsdk.compiler.pipeline import compile_function
from glowsdk.errors import UnsupportedOpsError
from glowsdk.frontend.onnx.importer import import_model
from glowsdk.graph.function import Function
from glowsdk.graph.node import Node
from glowsdk.graph.types import ElemKind

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(41)
F32 = frozenset({ElemKind.FLOAT32})


class GemmChip(Backend):
    """A MAC array and a vector unit, no convolution unit; runs on the interpreter's kernels."""

    name = "gemmchip"
    primitives = {**dict.fromkeys(("MatMul", "Add", "Max", "Concat", "Reshape", "Transpose", "Splat"), F32),
                  "Gather": F32 | {ElemKind.INT32}}

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        return InterpreterFunction(function)


class ConvChip(GemmChip):
    """The same chip with a convolution unit: its Convs are never rewritten."""

    name = "convchip"
    primitives = {**GemmChip.primitives, "Conv": F32}


class RefusesConvAsMatMul(GemmChip):
    """Would rather send its Convs to a fallback device than gather patches."""

    name = "refuser"

    def should_lower(self, node: Node) -> bool:
        return node.kind != "Conv"


class Int64Gather(GemmChip):
    """Gathers with int64 indices only: the rule's int32 index array does not run, so it is undone."""

    name = "int64gather"
    primitives = {**GemmChip.primitives, "Gather": F32 | {ElemKind.INT64}}


def conv_model(x_shape: tuple, w_shape: tuple, bias: bool = True, **attrs) -> tuple[onnx.ModelProto, dict]:
    feeds = {"x": RNG.standard_normal(x_shape).astype(np.float32),
             "w": RNG.standard_normal(w_shape).astype(np.float32)}
    if bias:
        feeds["b"] = RNG.standard_normal(w_shape[0]).astype(np.float32)
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in feeds.items()]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Conv", list(feeds), ["y"], **attrs)], "conv", inputs, [output])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), feeds


def import_function(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], constants=("w", "b")) -> Function:
    bound = {n: a for n, a in feeds.items() if n in constants}
    shapes = {n: a.shape for n, a in feeds.items() if n not in bound}
    return import_model(model, input_shapes=shapes, constants=bound).functions["main"]


CASES = {
    "1d-long-kernel-stride": ((1, 1, 400), (4, 1, 80), dict(strides=[16])),
    "1d-pads-dilation": ((2, 3, 11), (5, 3, 3), dict(pads=[2, 1], dilations=[2])),
    "2d-3x3-pad1": ((1, 3, 8, 8), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1])),
    "2d-stride2": ((1, 2, 9, 7), (3, 2, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    "2d-dilation2": ((1, 2, 9, 9), (3, 2, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2])),
    "2d-asymmetric-pads": ((1, 2, 6, 7), (3, 2, 3, 2), dict(pads=[0, 2, 1, 0], strides=[1, 2])),
    "2d-groups2": ((1, 4, 6, 6), (6, 2, 3, 3), dict(group=2, pads=[1, 1, 1, 1])),
    "2d-depthwise": ((1, 5, 7, 6), (5, 1, 3, 3), dict(group=5, pads=[1, 0, 1, 2], strides=[2, 1])),
    "2d-batch2": ((2, 3, 6, 5), (4, 3, 2, 3), dict(pads=[1, 1, 0, 1])),
    "2d-batch2-groups-no-pad": ((2, 4, 5, 5), (4, 2, 3, 3), dict(group=2)),
    "2d-1x1": ((2, 6, 4, 4), (3, 6, 1, 1), dict()),
    "3d": ((2, 2, 4, 5, 4), (3, 2, 2, 3, 2), dict(pads=[1, 0, 1, 0, 1, 1], strides=[1, 2, 1])),
}


def compile_for(backend: Backend, function: Function) -> tuple[CompiledFunction, dict[str, int]]:
    """Compile with verification after every rewrite; also return the lowered graph's node counts."""
    stages: dict[str, dict[str, int]] = {}
    compiled = compile_function(function, backend, verify_each=True,
                                on_stage=lambda stage, fn: stages.__setitem__(stage, fn.count_kinds()))
    return compiled, stages["lowered"]


def onnxruntime_run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, dict(feeds))[0]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("case", CASES)
def test_conv_lowers_onto_gather_and_matmul(case, bias):
    x_shape, w_shape, attrs = CASES[case]
    model, feeds = conv_model(x_shape, w_shape, bias=bias, **attrs)
    compiled, counts = compile_for(GemmChip(), import_function(model, feeds))
    assert "Conv" not in counts and counts["MatMul"] == 1 and counts["Gather"] == 1, counts
    assert ("Add" in counts) == bias and ("Transpose" in counts) == (x_shape[0] > 1), counts
    assert ("Concat" in counts) == any(attrs.get("pads", ())), counts  # the zero only padding taps read
    got = compiled.execute({"x": feeds["x"]})["y"]
    np.testing.assert_allclose(got, onnxruntime_run(model, feeds), rtol=1e-4, atol=1e-4)


def test_runtime_filter_and_bias():
    """A filter and bias known only at run time are reshaped by the graph, not at compile time."""
    x_shape, w_shape, attrs = CASES["2d-groups2"]
    model, feeds = conv_model(x_shape, w_shape, **attrs)
    compiled, counts = compile_for(GemmChip(), import_function(model, feeds, constants=()))
    assert "Conv" not in counts and counts["MatMul"] == 1
    np.testing.assert_allclose(compiled.execute(feeds)["y"], onnxruntime_run(model, feeds), rtol=1e-4, atol=1e-4)


def test_matmul_is_canonical_and_batched_over_groups():
    x_shape, w_shape, attrs = CASES["2d-depthwise"]
    model, feeds = conv_model(x_shape, w_shape, **attrs)
    function = import_function(model, feeds)
    lower_function(function, GemmChip())
    (matmul,) = (n for n in function.nodes if n.kind == "MatMul")
    assert PRIMITIVES["MatMul"].accepts(matmul)
    # 5 groups x (1 filter x 9 taps) x (9 taps x 4*6 output positions)
    assert [v.type.shape for v in matmul.inputs] == [(5, 1, 9), (5, 9, 24)]
    (gather,) = (n for n in function.nodes if n.kind == "Gather")
    assert gather.inputs[1].type.elem == ElemKind.INT32


def test_backend_with_conv_keeps_it():
    model, feeds = conv_model(*CASES["2d-3x3-pad1"][:2], **CASES["2d-3x3-pad1"][2])
    function = import_function(model, feeds)
    report = lower_function(function, ConvChip())
    assert function.count_kinds().get("Conv") == 1 and "MatMul" not in function.count_kinds()
    assert not report.lowered and not report.kept


def test_should_lower_false_keeps_conv_unsupported():
    model, feeds = conv_model(*CASES["2d-3x3-pad1"][:2], **CASES["2d-3x3-pad1"][2])
    function = import_function(model, feeds)
    with pytest.raises(UnsupportedOpsError) as caught:
        lower_function(function, RefusesConvAsMatMul())
    assert caught.value.ops == ["Conv"]
    report = lower_function(function, RefusesConvAsMatMul(), check_support=False)
    assert report.kept["Conv"] == 1 and function.count_kinds().get("Conv") == 1


def test_undone_when_the_backend_cannot_run_the_result():
    """An alternative lowering that yields nodes the backend refuses is taken back, constants too."""
    model, feeds = conv_model(*CASES["2d-3x3-pad1"][:2], **CASES["2d-3x3-pad1"][2])
    function = import_function(model, feeds)
    storage = set(function.module.constants)
    report = lower_function(function, Int64Gather(), check_support=False)
    assert function.count_kinds() == {"Conv": 1, "Save": 1} and not report.lowered
    assert set(function.module.constants) == storage


def test_declared_kinds_gate_the_rewrite():
    """A backend without Gather never pays for building the index array."""

    class NoGather(GemmChip):
        name = "nogather"
        primitives = {k: v for k, v in GemmChip.primitives.items() if k != "Gather"}

    model, feeds = conv_model(*CASES["2d-3x3-pad1"][:2], **CASES["2d-3x3-pad1"][2])
    function = import_function(model, feeds)
    lower_function(function, NoGather(), check_support=False)
    assert function.count_kinds() == {"Conv": 1, "Save": 1}


def test_huge_index_array_is_refused(monkeypatch):
    monkeypatch.setattr(conv_as_matmul, "MAX_INDICES", 1000)
    model, feeds = conv_model(*CASES["2d-3x3-pad1"][:2], **CASES["2d-3x3-pad1"][2])  # 3*9*64 = 1728 indices
    function = import_function(model, feeds)
    lower_function(function, GemmChip(), check_support=False)
    assert function.count_kinds() == {"Conv": 1, "Save": 1}
