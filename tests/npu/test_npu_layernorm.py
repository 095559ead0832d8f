"""Integer LayerNormalization (quant.IntegerLayerNorm, layernorm_int8.py) on the NPU's vector engine.

The evaluator's kernel is checked on hand-quantized groups against a plain-Python implementation of the steps that
vendor_guide/quantization.md documents (written here from the text: integers, round half to even, floor shifts);
the int8 result is checked against the float LayerNorm within a few steps; a network with LayerNorms (the last
one the graph's output) compiles with no host fallback and runs under checked simulation bit-exact with the
reference evaluator.
"""
from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import glowsdk
from glowsdk.backends.npu.layernorm import LayerNormLayer, TransposeLayer
from glowsdk.graph.nodes.layernorm_int8 import integer_layernorm, layernorm_params
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile
from glowsdk.reference.evaluator import evaluate
from isa import PRESETS
from isa.config import resolve_config
from sim.binding import run_binary


def _round(value: Fraction) -> int:
    """To the nearest integer, ties to even."""
    low = value.numerator // value.denominator
    rest = value - low
    return low + (rest > Fraction(1, 2) or (rest == Fraction(1, 2) and low % 2 == 1))


def _sat32(v: int) -> int:
    return max(-(1 << 31), min((1 << 31) - 1, v))


def _documented(x: list[int], gamma: list[int], beta: list[int], epsilon: int, shift: int, zero: int) -> list[int]:
    d = len(x)
    mu = _round(Fraction(sum(x), d))
    diff = [v - mu for v in x]
    w = _sat32(_round(Fraction(sum(v * v for v in diff) * 2 ** 14, d)))
    n = max(_sat32(w + epsilon), 1)
    r = 1 << 16
    for _ in range(20):
        r = min(r, (r + _round(Fraction(n, r))) // 2)
    q = [_sat32(_round(Fraction(v * 2 ** 19, r))) for v in diff]
    t = [_sat32(_sat32(qi * g) + b) for qi, g, b in zip(q, gamma, beta)]
    return [max(-128, min(127, _round(Fraction(ti, 2 ** shift)) + zero)) for ti in t]


@pytest.mark.parametrize("length,x_scale,seed", [(8, 0.05, 0), (64, 0.02, 1), (31, 0.3, 2)])
def test_the_kernel_is_the_documented_integer_arithmetic(length, x_scale, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (5, length)).astype(np.int8)
    x[0] = 7                                   # a constant group: variance 0, epsilon alone
    x[1, : length // 2], x[1, length // 2:] = -128, 127
    gamma, beta = rng.uniform(0.5, 1.5, length), rng.uniform(-0.3, 0.3, length)
    y_scale, zero = 0.03, -5
    p = layernorm_params(gamma, beta, 1e-5, x_scale, y_scale)
    got = integer_layernorm(x, length, p.gamma, p.beta, p.epsilon, p.shift, zero)
    for row, out in zip(x.tolist(), got.tolist()):
        assert out == _documented(row, p.gamma.tolist(), p.beta.tolist(), p.epsilon, p.shift, zero)
    # and it is the float LayerNorm of the codes, within a few output steps
    real = x.astype(np.float64) * x_scale
    mean, var = real.mean(axis=1, keepdims=True), real.var(axis=1, keepdims=True)
    want = np.clip(np.rint(((real - mean) / np.sqrt(var + 1e-5) * gamma + beta) / y_scale) + zero, -128, 127)
    assert np.abs(got.astype(np.int64) - want).max() <= 2


def _net(tokens: int, width: int, seed: int = 0) -> glowsdk.api.Network:
    """x [tokens, width] -> Linear -> LayerNorm -> Linear -> LayerNorm (the output)."""
    rng = np.random.default_rng(seed)
    weights = []
    for k in (1, 2):
        weights += [numpy_helper.from_array((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32),
                                            f"w{k}"),
                    numpy_helper.from_array(rng.uniform(0.7, 1.3, width).astype(np.float32), f"g{k}"),
                    numpy_helper.from_array(rng.uniform(-0.2, 0.2, width).astype(np.float32), f"b{k}")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h1"]),
             helper.make_node("LayerNormalization", ["h1", "g1", "b1"], ["n1"], axis=-1),
             helper.make_node("MatMul", ["n1", "w2"], ["h2"]),
             helper.make_node("LayerNormalization", ["h2", "g2", "b2"], ["out"], axis=-1)]
    graph = helper.make_graph(nodes, "norms", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (tokens, width))],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], weights)
    return glowsdk.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.mark.parametrize("tokens,width,config", [(16, 32, "edge"), (12, 96, "default")])
def test_layernorm_on_the_vector_engine_bit_exact(tokens, width, config):
    network = _net(tokens, width)
    profile = collect_profile(network, calibration_random(network, 2))
    npu = glowsdk.compile(network, "npu", quantization=QuantizationConfig(profile), config=config, fallback="none")
    assert sum(isinstance(layer.body, LayerNormLayer) for layer in npu.compiled.layers) == 2
    inputs = network.random_inputs(3)
    want = evaluate(npu.compiled.function, inputs)
    got = run_binary(npu.compiled.binary, PRESETS[config], inputs, checked=True).outputs
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)
    floats = glowsdk.compile(network, "interpreter").run(inputs)["out"]
    cosine = float((got["out"] * floats).sum() / np.linalg.norm(got["out"]) / np.linalg.norm(floats))
    assert cosine > 0.99


def _bit_exact(network, config, fallback: str = "none"):
    profile = collect_profile(network, calibration_random(network, 2))
    npu = glowsdk.compile(network, "npu", quantization=QuantizationConfig(profile), config=config, fallback=fallback)
    inputs = network.random_inputs(3)
    want = evaluate(npu.compiled.function, inputs)
    got = run_binary(npu.compiled.binary, resolve_config(config), inputs, checked=True).outputs
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)
    return npu


@pytest.mark.parametrize("tokens,width,config", [
    (8, 384, "default"),           # the D x D identity (convnext_tiny's 384-channel stage): 147,456 bytes
    (512, 256, {"preset": "server", "name": "big_acc", "accumulator_bytes": 2 * 1024 * 1024}),
])                                 # T = 256: a tile's D x T block and the T x T identity are 65,536 bytes each
def test_layernorm_rows_beyond_a_dma_element_bit_exact(tokens, width, config, tmp_path):
    """Every DMA of a LayerNorm and of its TransposeLayer within elem_bytes' 16 bits: a run longer than 65,535
    bytes is moved as rows one after another (one DRAM run still), under checked simulation, bit-exact."""
    if isinstance(config, dict):
        path = tmp_path / "config.json"
        path.write_text(json.dumps(config))
        config = str(path)
    network = _net(tokens, width)
    npu = _bit_exact(network, config)
    kinds = [type(layer.body) for layer in npu.compiled.layers]
    assert kinds.count(LayerNormLayer) == 2 and kinds.count(TransposeLayer) == 2
    largest = max(layer.body.length * max(layer.body.length, layer.body.tokens)
                  for layer in npu.compiled.layers if isinstance(layer.body, TransposeLayer))
    assert largest > 65535
