"""The CPU backend as a whole: light models, the primitive table, unsupported ops, --dump-llvm."""
from __future__ import annotations

import platform
import re

import numpy as np
import onnx
import pytest
from onnx import helper

import glowsdk
from cpu_util import make
from glowsdk.backends import get_backend
from glowsdk.backends.cpu.kernels import KERNELS
from glowsdk.cli.main import main
from glowsdk.compiler.backend import CompileOptions
from glowsdk.compiler.lowering.primitives import PRIMITIVES
from glowsdk.compiler.pipeline import compile_function
from glowsdk.errors import UnsupportedError, UnsupportedOpsError
from glowsdk.graph import ElemKind
from glowsdk.graph.nodes import linalg, quant

F32 = ElemKind.FLOAT32
MODEL_TOL = 1e-4
"""Relative to the largest output: a whole network sums in another order at every layer."""


@pytest.mark.parametrize("name", ["squeezenet"])
def test_light_model_matches_the_interpreter(name):
    network = glowsdk.load(name, random_weights=0)
    cpu = compile_function(network.function, get_backend("cpu"))
    feeds = network.random_inputs(0)
    got = cpu.execute(feeds)
    want = compile_function(network.function, get_backend("interpreter")).execute(feeds)
    for key in want:
        scale = np.abs(want[key]).max()
        assert np.abs(got[key] - want[key]).max() <= MODEL_TOL * scale, key
        assert (got[key].argmax(axis=-1) == want[key].argmax(axis=-1)).all()


def test_primitives_come_from_the_kernel_table():
    backend = get_backend("cpu")
    assert set(backend.primitives) <= set(PRIMITIVES)
    assert set(backend.primitives) == set(KERNELS) & set(PRIMITIVES)
    assert "Conv" in backend.primitives and "TopK" in backend.primitives


def test_unsupported_ops_are_reported_not_computed():
    """A 3-d IntegerConv: a kind in the table whose kernel refuses this layout (its `accepts`)."""
    shapes = [((1, 2, 3, 3, 3), ElemKind.UINT8), ((2, 2, 1, 1, 1), ElemKind.INT8)]
    fn = make(shapes, lambda fn, v: [fn.add(quant.IntegerConv, v[0], v[1], None, None, None, kernel=(1, 1, 1),
                                            strides=(1, 1, 1), pads=(0,) * 6, dilations=(1, 1, 1))])
    with pytest.raises(UnsupportedOpsError, match="IntegerConv"):
        compile_function(fn, get_backend("cpu"))


def test_unsupported_element_kind_is_reported(monkeypatch):
    """An element kind a kind does not declare is reported, not computed (the table now declares
    every primitive cell, so the test takes float16 out of MatMul's)."""
    backend = get_backend("cpu")
    monkeypatch.setitem(backend.primitives, "MatMul", backend.primitives["MatMul"] - {ElemKind.FLOAT16})
    fn = make([((3, 4), ElemKind.FLOAT16), ((4, 2), ElemKind.FLOAT16)],
              lambda fn, v: [fn.add(linalg.MatMul, v[0], v[1])])
    with pytest.raises(UnsupportedOpsError, match="MatMul"):
        compile_function(fn, backend)


def test_unknown_option_is_one_line_error():
    fn = make([((3,), F32)], lambda fn, v: [v[0]])
    with pytest.raises(UnsupportedError, match="no option"):
        compile_function(fn, get_backend("cpu"), CompileOptions(extra={"unroll": 2}))


def _chain_model(tmp_path) -> str:
    """x -> Add(x, x) -> Tanh -> Mul(., x): three element-wise ops that stack into one loop."""
    nodes = [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Tanh", ["a"], ["t"]),
             helper.make_node("Mul", ["t", "x"], ["y"])]
    value = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4, 8])
    result = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4, 8])
    model = helper.make_model(helper.make_graph(nodes, "chain", [value], [result]),
                              opset_imports=[helper.make_opsetid("", 21)])
    onnx.save(model, tmp_path / "chain.onnx")
    return str(tmp_path / "chain.onnx")


def test_cli_dump_llvm_shows_the_stacked_loop(tmp_path, capsys):
    path = tmp_path / "chain.ll"
    assert main(["compile", _chain_model(tmp_path), "--target", "cpu", "--dump-llvm", str(path)]) == 0
    text = path.read_text()
    assert "@\"glowsdk_main\"(ptr noalias %\"constants\", ptr noalias %\"activations\"" in text
    kernels = re.findall(r'^define internal i32 @"([^"]+)"', text, re.M)
    called = [k for k in kernels if not k.endswith(".call")]  # the entry calls a kernel through a k.call
    assert len(called) == 1 and called[0].startswith("stack3.") and len(kernels) == 2  # add, tanh, mul: one loop
    assert "for target cpu" in capsys.readouterr().out


def test_cli_dump_asm_shows_the_stacked_kernel_as_vector_code(tmp_path):
    path = tmp_path / "chain.s"
    assert main(["compile", _chain_model(tmp_path), "--target", "cpu", "--no-cache", "--dump-asm", str(path)]) == 0
    text = path.read_text()
    kernels = [line for line in text.splitlines() if line.startswith(("stack", "\"stack")) and line.endswith(":")]
    assert len(kernels) == 1, kernels  # add, tanh, mul: one kernel
    if platform.machine() in ("x86_64", "AMD64"):
        assert re.search(r"\bv?mulps\b", text)  # the multiply runs on packed (vector) floats
