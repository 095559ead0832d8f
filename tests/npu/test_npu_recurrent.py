"""Recurrent networks on the NPU with no host fallback: the exported LSTM and GRU (tests/models, issue 23).

Their cells are unrolled by lowering into MatMuls (the gate products on the array), Sigmoid and Tanh tables, and
element-wise products of two run-time int8 tensors (i * g, f * c, r * n, z * h: product.py) and same-type Subs
(1 - z) on the vector engine. Each compiles with `fallback=None`, runs under checked simulation bit-exact with the
reference evaluator, and stays close to the float model; the element-wise product's integer semantics are checked
on hand-made int8 operands against numpy.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import glowsdk
from glowsdk.backends.npu.product import ProductLayer
from glowsdk.quantization import QuantizationConfig, collect_profile
from glowsdk.reference.evaluator import evaluate, run_node
from isa import PRESETS
from sim.binding import run_binary

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from seq_models import seq_inputs, seq_model  # noqa: E402

CALIBRATION = range(10, 74)
"""64 seeded sequences: with 16 a GRU test input's largest logit passed the calibrated range and saturated."""


@pytest.fixture(scope="module", params=["lstm_seq", "gru_seq"])
def compiled(request):
    name = request.param
    network = glowsdk.load(seq_model(name))
    profile = collect_profile(network, [seq_inputs(name, s) for s in CALIBRATION])
    npu = glowsdk.compile(network, "npu", quantization=QuantizationConfig(profile), config="default", fallback="none")
    return name, network, npu


def test_recurrent_model_runs_whole_on_the_npu_bit_exact(compiled):
    name, network, npu = compiled
    assert any(isinstance(layer.body, ProductLayer) for layer in npu.compiled.layers)
    feeds = seq_inputs(name, 0)
    want = evaluate(npu.compiled.function, feeds)
    got = run_binary(npu.compiled.binary, PRESETS["default"], feeds, checked=True).outputs
    for key, value in want.items():
        np.testing.assert_array_equal(got[key], value)
    floats = glowsdk.compile(network, "interpreter")
    for seed in (1, 2):
        feeds = seq_inputs(name, seed)
        a = run_binary(npu.compiled.binary, PRESETS["default"], feeds).outputs["logits"].ravel().astype(np.float64)
        b = floats.run(feeds)["logits"].ravel().astype(np.float64)
        assert a @ b / np.linalg.norm(a) / np.linalg.norm(b) >= 0.99


def test_the_elementwise_product_is_the_offset_product(compiled):
    """Each run-time product the NPU computes is (q_a - z_a)(q_b - z_b) in int32, here on hand-made codes."""
    _, _, npu = compiled
    products = [n for n in npu.compiled.function.nodes if n.kind == "Mul"
                and all(v.type.elem.value == "int8q" for v in n.inputs)]
    assert products
    rng = np.random.default_rng(0)
    for node in products[:4]:
        a, b = (rng.integers(-128, 128, v.type.shape).astype(np.int8) for v in node.inputs)
        (got,) = run_node(node, [a, b])
        want = (a.astype(np.int64) - node.lhs.type.offset) * (b.astype(np.int64) - node.rhs.type.offset)
        np.testing.assert_array_equal(got, want)
