"""Every gradient rule against central finite differences (float64, seeded), and its lowering
to primitives against the reference evaluator on the unlowered graph."""
from __future__ import annotations

import numpy as np
import pytest
from grad_util import check_against_finite_differences, check_lowered

from glowsdk.errors import UnsupportedError
from glowsdk.graph.nodes import elementwise as ew, linalg, nn, reduce as rd, tensor, training as tr
from glowsdk.graph.types import ElemKind
from glowsdk.training import GRADIENTS

def _conv(**window):
    def build(f, x, w, b):
        return f.add(nn.Conv, x, w, b, kernel=w.type.shape[2:], **window)
    return build


def _labels(f, logits):
    n, k = logits.type.shape
    labels = f.module.create_constant("labels", (np.arange(n) * 7 % k).astype(np.int64))
    return f.add(tr.SoftmaxCrossEntropy, logits, labels.result())


def _batch_norm(f, x, scale, bias):
    """Inference BatchNorm: its statistics are frozen Constants, so they carry no gradient."""
    mean = f.module.create_constant("mean", np.array([0.5, -1.0, 0.0]))
    var = f.module.create_constant("var", np.array([0.3, 2.0, 1.0]))
    return f.add(nn.BatchNorm, x, scale, bias, mean.result(), var.result())


def _regression(f, x):
    expected = f.module.create_constant("expected", np.linspace(-1, 1, x.type.size).reshape(x.type.shape))
    return f.add(tr.Regression, x, expected.result())


# name: (build(function, *operands) -> value, operand shapes)
CASES = {
    "Add": (lambda f, x, y: f.add(ew.Add, x, y), [(2, 3), (3,)]),
    "Sub": (lambda f, x, y: f.add(ew.Sub, x, y), [(2, 1), (2, 3)]),
    "Mul": (lambda f, x, y: f.add(ew.Mul, x, y), [(2, 3), (1, 3)]),
    "Div": (lambda f, x, y: f.add(ew.Div, x, f.add(ew.Exp, y)), [(2, 3), (2, 3)]),
    "Max": (lambda f, x, y: f.add(ew.Max, x, y), [(2, 3), (2, 3)]),
    "Min": (lambda f, x, y: f.add(ew.Min, x, y), [(3,), (2, 3)]),
    "Neg": (lambda f, x: f.add(ew.Neg, x), [(4,)]),
    "Relu": (lambda f, x: f.add(ew.Relu, x), [(2, 5)]),
    "LeakyRelu": (lambda f, x: f.add(ew.LeakyRelu, x, alpha=0.1), [(2, 5)]),
    "Sigmoid": (lambda f, x: f.add(ew.Sigmoid, x), [(2, 5)]),
    "Tanh": (lambda f, x: f.add(ew.Tanh, x), [(2, 5)]),
    "Exp": (lambda f, x: f.add(ew.Exp, x), [(2, 5)]),
    "Log": (lambda f, x: f.add(ew.Log, f.add(ew.Exp, x)), [(2, 5)]),
    "Sqrt": (lambda f, x: f.add(ew.Sqrt, f.add(ew.Exp, x)), [(2, 5)]),
    "Reciprocal": (lambda f, x: f.add(ew.Reciprocal, f.add(ew.Exp, x)), [(2, 5)]),
    "Abs": (lambda f, x: f.add(ew.Abs, x), [(2, 5)]),
    "Cast": (lambda f, x: f.add(ew.Cast, x, to=ElemKind.FLOAT64), [(2, 5)]),
    "Where": (lambda f, x, y: f.add(ew.Where, f.add(ew.Less, x, y), x, y), [(2, 5), (5,)]),
    "Reshape": (lambda f, x: f.add(tensor.Reshape, x, shape=(3, 4)), [(2, 6)]),
    "Transpose": (lambda f, x: f.add(tensor.Transpose, x, perm=(2, 0, 1)), [(2, 3, 4)]),
    "Expand": (lambda f, x: f.add(tensor.Expand, x, shape=(2, 3, 4)), [(3, 1)]),
    "Concat": (lambda f, x, y: f.add(tensor.Concat, x, y, x, axis=1), [(2, 3), (2, 2)]),
    "Split": (lambda f, x: f.create(tensor.Split, [x], axis=1, sizes=(1, 3, 2)).result(1), [(2, 6)]),
    "Slice": (lambda f, x: f.add(tensor.Slice, x, starts=(1, 4), ends=(3, 0), steps=(1, -1)), [(4, 6)]),
    "Pad": (lambda f, x: f.add(tensor.Pad, x, pads=(1, 0, 2, 1), value=3.0), [(2, 3)]),
    "ReduceSum": (lambda f, x: f.add(rd.ReduceSum, x, axes=(0, 2), keepdims=False), [(2, 3, 4)]),
    "ReduceMean": (lambda f, x: f.add(rd.ReduceMean, x, axes=(1,), keepdims=True), [(2, 3, 4)]),
    "MatMul": (lambda f, x, y: f.add(linalg.MatMul, x, y), [(2, 3, 4), (4, 5)]),
    "Gemm": (lambda f, a, b, c: f.add(linalg.Gemm, a, b, c, alpha=0.5, beta=2.0, trans_b=True),
             [(3, 4), (5, 4), (5,)]),
    "GemmTransA": (lambda f, a, b, c: f.add(linalg.Gemm, a, b, c, trans_a=True), [(4, 3), (4, 5), (3, 5)]),
    "Conv": (_conv(strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1)), [(2, 3, 5, 5), (4, 3, 3, 3), (4,)]),
    "ConvStridedDilated": (_conv(strides=(2, 1), pads=(1, 0, 0, 2), dilations=(1, 2)),
                           [(1, 2, 6, 7), (3, 2, 2, 3), (3,)]),
    "ConvGrouped": (lambda f, x, w: f.add(nn.Conv, x, w, None, kernel=(3,), strides=(2,), pads=(1, 1),
                                          dilations=(1,), group=2), [(2, 4, 7), (6, 2, 3)]),
    "MaxPool": (lambda f, x: f.add(nn.MaxPool, x, kernel=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0),
                                   dilations=(1, 1)), [(2, 3, 4, 4)]),
    "MaxPoolOverlapping": (lambda f, x: f.add(nn.MaxPool, x, kernel=(3, 2), strides=(1, 2), pads=(1, 0, 1, 1),
                                              dilations=(1, 1), ceil_mode=True), [(1, 2, 5, 5)]),
    "MaxPoolWithIndices": (lambda f, x: f.create(nn.MaxPoolWithIndices, [x], kernel=(2,), strides=(1,),
                                                 pads=(1, 0), dilations=(2,)).result(0), [(2, 3, 6)]),
    "GlobalMaxPool": (lambda f, x: f.add(nn.GlobalMaxPool, x), [(2, 3, 3, 2)]),
    "AveragePool": (lambda f, x: f.add(nn.AveragePool, x, kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1),
                                       dilations=(1, 1)), [(1, 2, 5, 5)]),
    "AveragePoolCeilIncludePad": (lambda f, x: f.add(nn.AveragePool, x, kernel=(2,), strides=(2,), pads=(1, 0),
                                                     dilations=(1,), ceil_mode=True, count_include_pad=True),
                                  [(2, 2, 6)]),
    "GlobalAveragePool": (lambda f, x: f.add(nn.GlobalAveragePool, x), [(2, 3, 2, 2)]),
    "Softmax": (lambda f, x: f.add(nn.Softmax, x, axes=(1,)), [(3, 4)]),
    "LogSoftmax": (lambda f, x: f.add(nn.LogSoftmax, x, axes=(0, 1)), [(3, 4)]),
    "BatchNorm": (_batch_norm, [(2, 3, 2, 2), (3,), (3,)]),
    "SoftmaxCrossEntropy": (_labels, [(4, 5)]),
}

@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name):
    build, shapes = CASES[name]
    check_against_finite_differences(build, shapes)


def test_regression_gradient_is_input_minus_expected():
    """Paper 3.4: the Regression node's gradient is x - expected, not d/dx of its identity output."""
    from grad_util import gradient_function

    from glowsdk.reference.evaluator import evaluate

    fn, feeds = gradient_function(_regression, [(2, 3)])
    got = evaluate(fn, feeds)["g0"]
    np.testing.assert_allclose(got, feeds["x0"] - np.linspace(-1, 1, 6).reshape(2, 3))


@pytest.mark.parametrize("name", ["Conv", "ConvStridedDilated", "ConvGrouped", "MaxPoolOverlapping",
                                  "AveragePoolCeilIncludePad", "SoftmaxCrossEntropy", "Gemm", "Slice"])
def test_lowered_gradient_runs_on_the_interpreter(name):
    build, shapes = CASES[name]
    check_lowered(build, shapes, "interpreter")


@pytest.mark.parametrize("name", ["ConvStridedDilated", "MaxPoolOverlapping", "SoftmaxCrossEntropy"])
def test_lowered_gradient_runs_on_cpu(name):
    build, shapes = CASES[name]
    check_lowered(build, shapes, "cpu")


def test_every_rule_has_a_case():
    """A gradient rule without a finite-difference case would be unchecked."""
    covered = set(CASES) | {"Regression"}  # checked by its own test
    assert set(GRADIENTS) - covered == set()


def test_missing_rule_names_the_node():
    from grad_util import gradient_function

    with pytest.raises(UnsupportedError, match="no gradient rule for Erf"):
        gradient_function(lambda f, x: f.add(ew.Erf, x), [(3,)])
