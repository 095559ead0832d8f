"""Products of two int8 activations on the NPU (bmm.py): attention's Q.K^T and P.V, batched over heads.

Each network is quantized, compiled with no host fallback and run under checked simulation, bit-exact with the
reference evaluator on the quantized graph; the zero-point folding is exercised for both operands, including
the -128 zero point of a Softmax output (which needs two fill blocks), and a Transpose feeding a product is read
in place by the product's strided loads rather than copied. The int32 products are also checked against numpy
computing sum((a - za)(b - zb)) from the quantized operands.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import glowsdk
from glowsdk.backends.npu.bmm import BatchMatMulLayer, plan_block, zero_fills
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile
from glowsdk.graph.node import Constant
from glowsdk.reference.evaluator import evaluate, run_node
from isa import PRESETS
from sim.binding import run_binary


def _attention(tokens: int, dim: int, heads: int, seed: int = 0, rhs_softmax: bool = False) -> glowsdk.api.Network:
    """x [1, tokens, dim] -> per-head Q.K^T -> Softmax -> .V -> [1, heads, tokens, dim / heads]; with
    `rhs_softmax` the last product is V^T.P^T-like: a Softmax output on the right."""
    rng = np.random.default_rng(seed)
    d = dim // heads
    weights = [numpy_helper.from_array((rng.standard_normal((dim, dim)) / np.sqrt(dim)).astype(np.float32), n)
               for n in ("wq", "wk", "wv")]
    weights.append(numpy_helper.from_array(np.array([1, tokens, heads, d], np.int64), "split"))
    nodes = []
    for name in ("q", "k", "v"):
        nodes += [helper.make_node("MatMul", ["x", "w" + name], [name + "2d"]),
                  helper.make_node("Reshape", [name + "2d", "split"], [name + "4d"])]
    nodes += [helper.make_node("Transpose", ["q4d"], ["q"], perm=[0, 2, 1, 3]),
              helper.make_node("Transpose", ["k4d"], ["kt"], perm=[0, 2, 3, 1]),
              helper.make_node("Transpose", ["v4d"], ["v"], perm=[0, 2, 1, 3]),
              helper.make_node("MatMul", ["q", "kt"], ["scores"]),
              helper.make_node("Softmax", ["scores"], ["p"], axis=-1)]
    if rhs_softmax:
        nodes += [helper.make_node("Transpose", ["v"], ["vt"], perm=[0, 1, 3, 2]),
                  helper.make_node("MatMul", ["vt", "p"], ["out"])]
    else:
        nodes.append(helper.make_node("MatMul", ["p", "v"], ["out"]))
    # the output projection (a graph output is quantized where an int8 op makes it)
    rows = tokens if not rhs_softmax else d
    weights += [numpy_helper.from_array(np.array([heads * rows, -1], np.int64), "flat"),
                numpy_helper.from_array(rng.standard_normal((tokens if rhs_softmax else d, 8)).astype(np.float32),
                                        "wo"),
                numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "bo")]
    nodes[-1].output[0] = "product"
    nodes += [helper.make_node("Reshape", ["product", "flat"], ["rows"]),
              helper.make_node("MatMul", ["rows", "wo"], ["projected"]),
              helper.make_node("Add", ["projected", "bo"], ["out"])]
    graph = helper.make_graph(nodes, "attention", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                 (1, tokens, dim))],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], weights)
    return glowsdk.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))


def _run(network, config: str = "edge"):
    profile = collect_profile(network, calibration_random(network, 2))
    npu = glowsdk.compile(network, "npu", quantization=QuantizationConfig(profile), config=config, fallback="none")
    inputs = network.random_inputs(3)
    want = evaluate(npu.compiled.function, inputs)
    got = run_binary(npu.compiled.binary, PRESETS[config], inputs, checked=True).outputs
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)
    return npu


@pytest.mark.parametrize("tokens,dim,heads,config", [(16, 32, 4, "edge"), (24, 48, 2, "default")])
def test_attention_products_on_the_array_bit_exact(tokens, dim, heads, config):
    npu = _run(_attention(tokens, dim, heads), config)
    layers = npu.compiled.layers
    products = [layer for layer in layers if isinstance(layer.body, BatchMatMulLayer)]
    assert len(products) == 2
    # the Q and K^T transposes feed a product: read in place, no copy layer for them
    copied = {layer.name for layer in layers if layer.kind == "Copy"}
    transposes = [n for n in npu.compiled.function.nodes if n.kind == "Transpose"
                  and all(u.kind == "MatMul" for u in n.users)]
    assert transposes and not copied & {n.name for n in transposes}
    assert any(layer.body.rhs.strides[-1] != 1 for layer in products)  # K^T: a strided (transposed) load


def test_a_softmax_output_as_right_operand_folds_zero_point_minus_128():
    npu = _run(_attention(16, 32, 4, rhs_softmax=True))
    products = [layer.body for layer in npu.compiled.layers if isinstance(layer.body, BatchMatMulLayer)]
    assert any(p.fills == [127, 1] for p in products)


def test_products_match_numpy_on_hand_quantized_operands():
    """The evaluator's int32 product of the graph's own product nodes, on hand-made int8 operands at their
    zero points (-128 among them), is sum((a - za)(b - zb)), written here independently."""
    network = _attention(16, 32, 4, rhs_softmax=True)
    profile = collect_profile(network, calibration_random(network, 2))
    npu = glowsdk.compile(network, "npu", quantization=QuantizationConfig(profile), config="edge", fallback="none")
    products = [n for n in npu.compiled.function.nodes if n.kind == "MatMul" and not isinstance(n.rhs.node, Constant)]
    assert len(products) == 2 and {p.rhs.type.offset for p in products} >= {-128}
    rng = np.random.default_rng(0)
    for p in products:
        a = rng.integers(-128, 128, p.lhs.type.shape).astype(np.int8)
        b = rng.integers(-128, 128, p.rhs.type.shape).astype(np.int8)
        (got,) = run_node(p, [a, b])
        za, zb = p.lhs.type.offset, p.rhs.type.offset
        want = np.einsum("...mk,...kn->...mn", a.astype(np.int64) - za, b.astype(np.int64) - zb)
        np.testing.assert_array_equal(got, want)


def test_fills_and_blocks():
    assert zero_fills(0) == [] and zero_fills(5) == [-5] and zero_fills(-128) == [127, 1]
    assert sum(zero_fills(-128)) == 128
    rows, cols = plan_block(4096, 64, 4096, 1, PRESETS["edge"])
    assert rows * cols < 4096 * 4096 and rows >= 1 and cols >= 1
