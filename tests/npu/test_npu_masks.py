"""Attention masks on the NPU: -inf as int8's saturated minimum, a masked Softmax giving it probability 0.

An additive mask of 0 and -inf (a constant causal mask, or a padding mask the host gives) becomes Min(x, C) with C
127 or -128 in x's own type; the Softmax reading it gets `masked`, so the code -128 weighs nothing. The division of
attention scores by sqrt(d) folds into the accumulator's Rescale. Checked here: the masked Softmax kernel against a
plain implementation of its documented semantics, the host lowering against the kernel, small attention blocks and
the exported BERT-style and causal decoder layers compiled with no host fallback, bit-exact under checked
simulation, close to the float model.
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import glowsdk
from glowsdk.backends.registry import get_backend
from glowsdk.compiler.lowering.driver import lower_function
from glowsdk.graph.function import Module
from glowsdk.graph.nodes import nn
from glowsdk.graph.types import ElemKind, Type
from glowsdk.quantization import QuantizationConfig, collect_profile
from glowsdk.reference.evaluator import evaluate
from isa import PRESETS
from sim.binding import run_binary

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from seq_models import seq_inputs, seq_model  # noqa: E402

SCALE = 0.07


def _documented(row: list[int], scale: float) -> list[int]:
    """nn.Softmax's doc with `masked`: T[j] = round(2^k exp(-s j)), -128 weighs 0, S at least 1."""
    length = len(row)
    k = min(30, 31 - length.bit_length())
    table = [round(2 ** k * math.exp(-float(np.float32(scale)) * j)) for j in range(256)]
    peak = max(row)
    e = [0 if v == -128 else table[min(peak - v, 255)] for v in row]
    total = max(sum(e), 1)

    def half_even(num: int, den: int) -> int:
        q, r = divmod(num, den)
        return q + (2 * r > den or (2 * r == den and q % 2 == 1))
    return [max(-128, min(127, half_even(256 * v, total) - 128)) for v in e]


def _masked_softmax(shape):
    module = Module()
    fn = module.create_function("main")
    x = module.create_placeholder("x", Type(ElemKind.QINT8, shape, SCALE, 3)).result()
    fn.save(fn.add(nn.Softmax, x, axes=(len(shape) - 1,), masked=True), "y")
    return fn


def _rows(shape):
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    x[..., 0, 1:] = -128                # one live element
    x[..., 1, :] = -128                 # nothing live: all zeros (probability 0), not a division by zero
    x[..., 2, ::2] = -128
    return x


def test_masked_softmax_is_the_documented_arithmetic():
    shape = (2, 5, 12)
    x = _rows(shape)
    got = evaluate(_masked_softmax(shape), {"x": x})["y"]
    for row, out in zip(x.reshape(-1, shape[-1]).tolist(), got.reshape(-1, shape[-1]).tolist()):
        assert out == _documented(row, SCALE)
    assert (got[x == -128] == -128).all()


def test_masked_softmax_host_lowering_is_the_kernel():
    shape = (3, 4, 9)
    fn = _masked_softmax(shape)
    feeds = {"x": _rows(shape)}
    lowered = fn.module.clone().functions["main"]
    lower_function(lowered, get_backend("cpu"))
    assert "Softmax" not in {n.kind for n in lowered.nodes}
    np.testing.assert_array_equal(evaluate(lowered, feeds)["y"], evaluate(fn, feeds)["y"])


def _attention(padding: bool, tokens: int = 12, dim: int = 16) -> glowsdk.api.Network:
    """x [1, tokens, dim] -> Q.K^T / sqrt(dim) + mask -> Softmax -> . V, one head; the mask a constant causal one,
    or a padding mask input [1, 1, tokens]."""
    rng = np.random.default_rng(1)
    weights = [numpy_helper.from_array((rng.standard_normal((dim, dim)) / 2).astype(np.float32), n)
               for n in ("wq", "wk", "wv")]
    weights += [numpy_helper.from_array(np.array(math.sqrt(dim), np.float32), "root"),
                numpy_helper.from_array(np.array([tokens, dim], np.int64), "rows"),
                numpy_helper.from_array((rng.standard_normal((dim, 8)) / 4).astype(np.float32), "wo"),
                numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "bo")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, tokens, dim))]
    if padding:
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, (1, 1, tokens)))
    else:
        causal = np.triu(np.full((tokens, tokens), -np.inf, np.float32), 1)
        weights.append(numpy_helper.from_array(causal, "mask"))
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]), helper.make_node("MatMul", ["x", "wk"], ["k"]),
             helper.make_node("MatMul", ["x", "wv"], ["v"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["raw"]), helper.make_node("Div", ["raw", "root"], ["scaled"]),
             helper.make_node("Add", ["scaled", "mask"], ["scores"]),
             helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["context"]),
             helper.make_node("Reshape", ["context", "rows"], ["flat"]),       # the output projection
             helper.make_node("MatMul", ["flat", "wo"], ["projected"]), helper.make_node("Add", ["projected", "bo"],
                                                                                         ["out"])]
    graph = helper.make_graph(nodes, "attention", inputs, [helper.make_tensor_value_info("out", TensorProto.FLOAT,
                                                                                         None)], weights)
    return glowsdk.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))


def _feeds(padding: bool, seed: int, tokens: int = 12) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.standard_normal((1, tokens, 16)).astype(np.float32)}
    if padding:
        mask = np.zeros((1, 1, tokens), np.float32)
        mask[..., int(rng.integers(3, tokens)):] = -np.inf
        feeds["mask"] = mask
    return feeds


def _bit_exact(network, calibration, tests, config="edge"):
    profile = collect_profile(network, calibration)
    npu = glowsdk.compile(network, "npu", quantization=QuantizationConfig(profile), config=config, fallback="none")
    for feeds in tests:
        want = evaluate(npu.compiled.function, feeds)
        got = run_binary(npu.compiled.binary, PRESETS[config], feeds, checked=True).outputs
        for name, value in want.items():
            np.testing.assert_array_equal(got[name], value)
    return npu


@pytest.mark.parametrize("padding", [False, True])
def test_masked_attention_on_the_npu_bit_exact(padding):
    network = _attention(padding)
    npu = _bit_exact(network, [_feeds(padding, s) for s in range(10, 18)], [_feeds(padding, s) for s in range(2)])
    nodes = npu.compiled.function.nodes
    softmax = next(n for n in nodes if n.kind == "Softmax")
    assert softmax.masked and "Div" not in {n.kind for n in nodes}
    floats = glowsdk.compile(network, "interpreter")
    for seed in (7, 8):
        feeds = _feeds(padding, seed)
        got = run_binary(npu.compiled.binary, PRESETS["edge"], feeds).outputs["out"]
        want = floats.run(feeds)["out"]
        assert float((got * want).sum() / np.linalg.norm(got) / np.linalg.norm(want)) > 0.99


@pytest.mark.parametrize("name", ["bert_layer", "decoder_layer"])
def test_exported_transformer_layers_run_whole_on_the_npu(name):
    """issue 23: each compiles with no host partition, is bit-exact with the evaluator under checked
    simulation, and its output has cosine >= 0.99 to the float model's."""
    network = glowsdk.load(seq_model(name))
    npu = _bit_exact(network, [seq_inputs(name, s) for s in (10, 11, 12, 13)], [seq_inputs(name, 0)],
                     config="default")
    feeds = seq_inputs(name, 1)
    got = run_binary(npu.compiled.binary, PRESETS["default"], feeds).outputs
    want = glowsdk.compile(network, "interpreter").run(feeds)
    for key, value in want.items():
        a, b = got[key].ravel().astype(np.float64), value.ravel().astype(np.float64)
        assert a @ b / np.linalg.norm(a) / np.linalg.norm(b) >= 0.99
