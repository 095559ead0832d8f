"""The wide int8 Softmax (nn.Softmax `wide`): int32q probabilities of scale 2^-16 where they leave the network.

An int8 result (scale 1/256) ties near-equal probabilities: a 1000-class classifier's output keeps a handful of
distinct values and its top-1 flips. The quantizer gives a Softmax whose probabilities are the network's output the
wide type; the kernel is checked against the documented arithmetic, the host lowering against the kernel, and a
1000-class classifier on the NPU (checked simulation, bit-exact) resolves probabilities finer than int8 could.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import glowsdk
from glowsdk.backends.registry import get_backend
from glowsdk.compiler.lowering.driver import lower_function
from glowsdk.graph.function import Module
from glowsdk.graph.nodes import nn
from glowsdk.graph.types import ElemKind, Type
from glowsdk.reference.evaluator import evaluate
from isa import PRESETS
from sim.binding import run_binary
from test_npu_backend import assert_bit_exact

from npu_nets import NetBuilder

SCALE = 0.05


def _wide(shape):
    module = Module()
    fn = module.create_function("main")
    x = module.create_placeholder("x", Type(ElemKind.QINT8, shape, SCALE, -7)).result()
    fn.save(fn.add(nn.Softmax, x, axes=(len(shape) - 1,), wide=True), "y")
    return fn


def _documented(row: list[int]) -> list[int]:
    k = min(30, 31 - len(row).bit_length())
    table = [round(2 ** k * math.exp(-float(np.float32(SCALE)) * j)) for j in range(256)]
    e = [table[min(max(row) - v, 255)] for v in row]
    total = sum(e)

    def half_even(num: int, den: int) -> int:
        q, r = divmod(num, den)
        return q + (2 * r > den or (2 * r == den and q % 2 == 1))
    return [half_even(2 ** 16 * v, total) for v in e]


def test_wide_softmax_is_the_documented_arithmetic_and_lowers_alike():
    shape = (3, 40)
    x = np.random.default_rng(0).integers(-128, 128, shape).astype(np.int8)
    fn = _wide(shape)
    got = evaluate(fn, {"x": x})["y"]
    assert next(n for n in fn.nodes if n.kind == "Softmax").type == Type(ElemKind.QINT32, shape, 2.0 ** -16, 0)
    for row, out in zip(x.tolist(), got.tolist()):
        assert out == _documented(row)
    lowered = fn.module.clone().functions["main"]
    lower_function(lowered, get_backend("cpu"))
    np.testing.assert_array_equal(evaluate(lowered, {"x": x})["y"], got)


@pytest.mark.parametrize("classes", [1000])
def test_a_classifier_keeps_its_ranking_on_the_npu(classes):
    b = NetBuilder((4, 64))
    logits = b.node("Gemm", ["x", b.weight((64, classes)), b.weight((classes,))])
    network = b.network(b.node("Softmax", [logits], axis=1))
    npu = assert_bit_exact(network)  # checked simulation, bit-exact with the evaluator
    softmax = next(n for n in npu.compiled.function.nodes if n.kind == "Softmax")
    assert softmax.wide and softmax.type.elem is ElemKind.QINT32
    floats = glowsdk.compile(network, "interpreter")
    for seed in (5, 6):
        feeds = network.random_inputs(seed)
        got = run_binary(npu.compiled.binary, PRESETS["edge"], feeds).outputs
        name = next(iter(got))
        want = floats.run(feeds)[name]
        # the int8 logits before the Softmax may still tie two classes the float model tells apart
        assert (got[name].argmax(axis=1) == want.argmax(axis=1)).sum() >= 3
        # finer than int8's 1/256 steps: more distinct probabilities than the float ones rounded to those steps
        assert len(np.unique(got[name])) > len(np.unique(np.round(want * 256)))
