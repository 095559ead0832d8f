"""Every primitive the CPU backend compiles, against the interpreter on seeded random inputs."""
from __future__ import annotations

import math

import numpy as np
import pytest

from cpu_util import check, make
from glowsdk.backends import get_backend
from glowsdk.compiler.pipeline import compile_function
from glowsdk.errors import GlowError
from glowsdk.graph import ElemKind
from glowsdk.graph.nodes import core, elementwise as ew, linalg, nn, reduce, tensor

F32, F64, I32, I64, BOOL = ElemKind.FLOAT32, ElemKind.FLOAT64, ElemKind.INT32, ElemKind.INT64, ElemKind.BOOL


@pytest.mark.parametrize("kind", [ew.Add, ew.Sub, ew.Mul, ew.Div, ew.Max, ew.Min, ew.Pow, ew.Equal, ew.Less])
@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (3, 1)), ((1, 5), (4, 1)), ((), (3,))])
def test_binary_float_broadcasting(kind, shapes):
    check([(shapes[0], F32), (shapes[1], F32)], lambda fn, v: [fn.add(kind, v[0], v[1])])


@pytest.mark.parametrize("fmod", [False, True])
def test_mod(fmod):
    check([((4, 5), F32), ((5,), F32)], lambda fn, v: [fn.add(ew.Mod, v[0], v[1], fmod=fmod)])


@pytest.mark.parametrize("elem", [I32, I64, ElemKind.UINT8, F64])
@pytest.mark.parametrize("kind", [ew.Add, ew.Sub, ew.Mul, ew.Max, ew.Min, ew.Less, ew.Equal])
def test_binary_other_kinds(kind, elem):
    check([((3, 4), elem), ((4,), elem)], lambda fn, v: [fn.add(kind, v[0], v[1])])


@pytest.mark.parametrize("kind", [ew.And, ew.Or, ew.Equal])
def test_bool_binary(kind):
    check([((3, 4), BOOL), ((3, 4), BOOL)], lambda fn, v: [fn.add(kind, v[0], v[1])])


def test_not_and_where():
    check([((2, 5), BOOL), ((2, 5), F32), ((5,), F32)],
          lambda fn, v: [fn.add(ew.Not, v[0]), fn.add(ew.Where, v[0], v[1], v[2])])


@pytest.mark.parametrize("kind", [ew.Exp, ew.Tanh, ew.Erf, ew.Sin, ew.Cos, ew.Floor, ew.Round])
def test_unary_math(kind):
    check([((3, 70), F32)], lambda fn, v: [fn.add(kind, v[0])])


@pytest.mark.parametrize("kind", [ew.Log, ew.Sqrt])
def test_unary_math_positive(kind):
    feeds = {"x0": np.random.default_rng(1).uniform(1e-3, 10, (4, 33)).astype(np.float32)}
    check([((4, 33), F32)], lambda fn, v: [fn.add(kind, v[0])], feeds=feeds)


def test_nan_propagates_like_numpy():
    x = np.array([np.nan, 1.0, -np.inf, 2.0], np.float32)
    y = np.array([0.0, np.nan, 1.0, np.inf], np.float32)
    check([((4,), F32), ((4,), F32)],
          lambda fn, v: [fn.add(ew.Max, v[0], v[1]), fn.add(ew.Min, v[0], v[1]), fn.add(ew.Less, v[0], v[1])],
          feeds={"x0": x, "x1": y})


@pytest.mark.parametrize("source, target", [(F32, I32), (F32, I64), (I64, F32), (I32, I64), (I64, I32),
                                            (F32, BOOL), (BOOL, F32), (F32, F64), (F64, F32),
                                            (ElemKind.UINT8, F32), (I32, ElemKind.INT8)])
def test_cast(source, target):
    check([((3, 7), source)], lambda fn, v: [fn.add(ew.Cast, v[0], to=target)])


@pytest.mark.parametrize("a, b", [((7, 9), (9, 13)), ((2, 3, 5), (2, 5, 4)), ((1, 64), (64, 33))])
def test_matmul(a, b):
    check([(a, F32), (b, F32)], lambda fn, v: [fn.add(linalg.MatMul, v[0], v[1])], accumulates=True)


CONVS = [  # input shape, filter shape, attributes
    ((1, 3, 9, 9), (4, 3, 3, 3), dict(strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1], group=1)),
    ((2, 4, 11, 10), (6, 2, 3, 2), dict(strides=[2, 1], pads=[0, 1, 2, 0], dilations=[1, 2], group=2)),
    ((1, 6, 8, 8), (6, 1, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], dilations=[1, 1], group=6)),
    ((1, 5, 7, 7), (8, 5, 1, 1), dict(strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1], group=1)),
    ((2, 3, 17), (4, 3, 5), dict(strides=[3], pads=[2, 1], dilations=[2], group=1)),
    ((1, 2, 5, 6, 4), (3, 2, 2, 3, 2), dict(strides=[1, 2, 1], pads=[1, 0, 1, 0, 1, 1], dilations=[1, 1, 2],
                                            group=1)),
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("image, weights, attrs", CONVS)
def test_conv(image, weights, attrs, bias):
    inputs = [(image, F32), (weights, F32)] + ([((weights[0],), F32)] if bias else [])
    kernel = list(weights[2:])
    check(inputs, lambda fn, v: [fn.add(nn.Conv, v[0], v[1], v[2] if bias else None, kernel=kernel, **attrs)],
          accumulates=True)


POOLS = [
    dict(kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], dilations=[1, 1]),
    dict(kernel=[2, 3], strides=[2, 2], pads=[0, 1, 0, 1], dilations=[1, 1], ceil_mode=True),
    dict(kernel=[3, 2], strides=[1, 2], pads=[1, 0, 1, 1], dilations=[2, 1]),
    dict(kernel=[3], strides=[2], pads=[1, 1], dilations=[1]),
]


@pytest.mark.parametrize("attrs", POOLS)
@pytest.mark.parametrize("kind, extra", [(nn.MaxPool, {}), (nn.AveragePool, {}),
                                         (nn.AveragePool, {"count_include_pad": True})])
def test_pool(kind, extra, attrs):
    shape = (2, 3, 9, 8)[:2 + len(attrs["kernel"])]
    check([(shape, F32)], lambda fn, v: [fn.add(kind, v[0], **attrs, **extra)], accumulates=True)


@pytest.mark.parametrize("axes, keepdims", [((1,), True), ((2, 3), True), ((0, 2), False), ((0, 1, 2, 3), False),
                                            ((), True)])
@pytest.mark.parametrize("kind", [reduce.ReduceSum, reduce.ReduceMax, reduce.ReduceMin, reduce.ReduceProd])
def test_reduce(kind, axes, keepdims):
    check([((2, 3, 4, 5), F32)], lambda fn, v: [fn.add(kind, v[0], axes=list(axes), keepdims=keepdims)],
          accumulates=True)


@pytest.mark.parametrize("kind", [reduce.ReduceSum, reduce.ReduceMax])
def test_reduce_integers(kind):
    check([((3, 4, 5), I32)], lambda fn, v: [fn.add(kind, v[0], axes=[1], keepdims=False)])


@pytest.mark.parametrize("last", [False, True])
@pytest.mark.parametrize("kind", [reduce.ArgMax, reduce.ArgMin])
def test_arg_extreme_with_ties_and_nan(kind, last):
    x = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [np.nan, 1, np.nan, 5], [4, 1, 1, 4]], np.float32)
    build = lambda fn, v: [fn.add(kind, v[0], axis=a, keepdims=k, select_last_index=last)  # noqa: E731
                           for a, k in ((0, True), (1, False))]
    check([((4, 4), F32)], build, feeds={"x0": x})
    check([((3, 5, 2), I32)], lambda fn, v: [fn.add(kind, v[0], axis=1, select_last_index=last)])


@pytest.mark.parametrize("elem", [F32, ElemKind.UINT8, I64, ElemKind.FLOAT16])
def test_data_movement(elem):
    def build(fn, v):
        x = v[0]
        return [fn.add(tensor.Transpose, x, perm=[2, 0, 1]),
                fn.add(tensor.Slice, x, starts=[1, 3, 0], ends=[-1, 0, 5], steps=[-1, -2, 2]),
                fn.add(tensor.Concat, x, fn.add(tensor.Transpose, x, perm=[0, 1, 2]), axis=1),
                fn.add(tensor.Expand, fn.add(tensor.Slice, x, starts=[0, 0, 0], ends=[2, 1, 5],
                                             steps=[1, 1, 1]), shape=[3, 2, 4, 5]),
                fn.add(tensor.Reshape, fn.add(tensor.Transpose, x, perm=[1, 0, 2]), shape=[4, 10])]
    check([((2, 4, 5), elem)], build)


@pytest.mark.parametrize("index_kind", [I32, I64])
@pytest.mark.parametrize("axis", [0, 1])
def test_gather(index_kind, axis):
    indices = np.array([[0, -1], [2, 1]], dtype=index_kind.dtype)
    check([((3, 4), F32), ((2, 2), index_kind)], lambda fn, v: [fn.add(tensor.Gather, v[0], v[1], axis=axis)],
          feeds={"x0": np.arange(12, dtype=np.float32).reshape(3, 4), "x1": indices})


def test_gather_index_out_of_range_is_an_error():
    fn = make([((3, 4), F32), ((2,), I64)], lambda fn, v: [fn.add(tensor.Gather, v[0], v[1], axis=0)])
    compiled = compile_function(fn, get_backend("cpu"))
    with pytest.raises(GlowError, match="Gather index"):
        compiled.execute({"x0": np.zeros((3, 4), np.float32), "x1": np.array([0, 3])})


def test_splat():
    check([((2, 3), F32)], lambda fn, v: [fn.add(ew.Add, v[0], fn.add(core.Splat, shape=[2, 3], value=1.5,
                                                                        elem=F32))])


def test_erf_polynomial_bound():
    """The erf polynomial (kernels/mathfn.py) stays within 1.2e-7 of math.erf plus float32 rounding."""
    x = np.linspace(-6, 6, 4001, dtype=np.float32)
    compiled = check([(x.shape, F32)], lambda fn, v: [fn.add(ew.Erf, v[0])], feeds={"x0": x})
    got = compiled.execute({"x0": x})["y0"].astype(np.float64)
    exact = np.array([math.erf(float(v)) for v in x])
    assert np.abs(got - exact).max() <= 1.2e-7 + np.spacing(np.float32(1.0)) / 2
