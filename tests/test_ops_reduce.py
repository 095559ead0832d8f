"""Reductions, ArgMax/ArgMin, TopK and CumSum against onnx.reference on seeded random inputs.

Every ONNX form is covered: axes as an attribute (before opset 13 / 18) or an
input, noop_with_empty_axes, keepdims, empty-set reductions, integer and bool
kinds, TopK's k as attribute (opset 9) or input, select_last_index, ties.
"""
import numpy as np
import pytest

from glowsdk.errors import GlowError, GraphError, UnsupportedError
from glowsdk.graph.function import Module
from glowsdk.graph.nodes import reduce as rd
from glowsdk.graph.types import ElemKind, Type

from oracle import glow_run, reference_run, single_op_model

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4, 5)).astype(np.float32)

REDUCTIONS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]
AXES_INPUT_SINCE = {op: 13 if op == "ReduceSum" else 18 for op in REDUCTIONS}
AXES_FORMS = [None, [1], [0, -1], [2, 0]]


def check(model, feeds, rtol=1e-5, atol=1e-6):
    want = reference_run(model, feeds)
    got = glow_run(model, feeds)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)


def reduce_model(op, x, opset, axes, keepdims=1, noop=None):
    """A reduction in the opset's own form: axes as an attribute or as a constant input."""
    attrs, inits = {"keepdims": keepdims}, {}
    if opset >= AXES_INPUT_SINCE[op]:
        if axes is not None:
            inits["axes"] = np.array(axes, np.int64)
        if noop is not None:
            attrs["noop_with_empty_axes"] = noop
    elif axes is not None:
        attrs["axes"] = axes
    return single_op_model(op, {"x": x}, opset=opset, initializers=inits, **attrs)


def sample(op, shape=(3, 4, 5), dtype=np.float32):
    x = RNG.standard_normal(shape)
    if op == "ReduceLogSum":
        x = np.abs(x) + 0.1
    if op == "ReduceProd":
        x = x / 2 + np.sign(x)
    return x.astype(dtype)


@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize("opset", [11, 13, 18])
def test_reductions_every_axes_form(op, opset):
    x = sample(op)
    for axes in AXES_FORMS:
        for keepdims in (0, 1):
            check(reduce_model(op, x, opset, axes, keepdims), {"x": x})


@pytest.mark.parametrize("op", REDUCTIONS)
def test_empty_axes_noop_or_all(op):
    x = sample(op)
    for noop in (0, 1):
        check(reduce_model(op, x, 18, [], 1, noop), {"x": x})
        check(reduce_model(op, x, 18, None, 0, noop), {"x": x})


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the oracle's mean of an empty slice
@pytest.mark.parametrize("op", REDUCTIONS)
def test_empty_set_gives_identity(op):
    x = np.zeros((2, 0, 3), np.float32)
    check(reduce_model(op, x, 18, [1], 1), {"x": x})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                                "ReduceL2"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
def test_integer_reductions_keep_the_kind(op, dtype):
    x = RNG.integers(0 if dtype == np.uint8 else -9, 10, (3, 4, 5)).astype(dtype)
    for axes in ([1], None):
        check(reduce_model(op, x, 18, axes, 0), {"x": x})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceLogSumExp", "ReduceL2"])
def test_half_precision_reductions(op):
    x = sample(op, dtype=np.float16)
    check(reduce_model(op, x, 18, [2], 1), {"x": x}, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_bool_max_min(op):
    x = RNG.random((3, 4)) < 0.3
    check(reduce_model(op, x, 20, [1], 0), {"x": x})
    empty = np.zeros((2, 0), bool)
    check(reduce_model(op, empty, 20, [1], 1), {"x": empty})


def test_log_sum_exp_is_stable_for_large_values():
    x = (RNG.standard_normal((4, 6)) * 100).astype(np.float32)
    x[0, 0] = np.inf
    check(reduce_model("ReduceLogSumExp", x, 18, [1], 0), {"x": x})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("opset", [11, 13])
def test_arg_reductions_with_ties(op, opset):
    x = RNG.integers(0, 3, (3, 4, 5)).astype(np.float32)  # many ties
    lasts = (0, 1) if opset >= 12 else (None,)
    for axis in (0, 2, -1):
        for keepdims in (0, 1):
            for last in lasts:
                attrs = {"axis": axis, "keepdims": keepdims}
                if last is not None:
                    attrs["select_last_index"] = last
                check(single_op_model(op, {"x": x}, opset=opset, **attrs), {"x": x})


def test_arg_reduction_default_axis_int_input():
    x = RNG.integers(-5, 5, (4, 3)).astype(np.int32)
    check(single_op_model("ArgMax", {"x": x}, opset=13), {"x": x})


def topk_model(x, k, opset, **attrs):
    outputs = ("values", "indices")
    if opset < 10:
        return single_op_model("TopK", {"x": x}, outputs, opset=opset, k=k, **attrs)
    return single_op_model("TopK", {"x": x}, outputs, opset=opset,
                           initializers={"k": np.array([k], np.int64)}, **attrs)


@pytest.mark.parametrize("opset", [9, 10])
def test_topk_early_forms(opset):
    x = RNG.standard_normal((3, 6)).astype(np.float32)
    check(topk_model(x, 2, opset), {"x": x})
    check(topk_model(x, 3, opset, axis=0), {"x": x})


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
def test_topk_ties_keep_lower_index_first(largest, dtype):
    x = RNG.integers(0, 4, (3, 5, 6)).astype(dtype)
    for axis, k in ((-1, 4), (1, 5), (0, 1)):
        check(topk_model(x, k, 11, axis=axis, largest=largest, sorted=1), {"x": x})


def test_topk_k_zero_and_full():
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    check(topk_model(x, 5, 11, largest=0), {"x": x})
    check(topk_model(x, 0, 11), {"x": x})


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_cumsum_every_flag(dtype):
    x = (RNG.standard_normal((3, 4, 5)) * 10).astype(dtype)
    for axis in (0, 1, -1):
        for exclusive in (0, 1):
            for reverse in (0, 1):
                model = single_op_model("CumSum", {"x": x}, opset=14,
                                        initializers={"axis": np.array(axis, np.int32)},
                                        exclusive=exclusive, reverse=reverse)
                check(model, {"x": x})


# -- errors --------------------------------------------------------------------------------

def test_log_sum_of_integers_is_unsupported():
    x = RNG.integers(1, 5, (3, 4)).astype(np.int32)
    with pytest.raises(UnsupportedError, match="node 'y' \\(ReduceLogSum\\).*int32"):
        glow_run(reduce_model("ReduceLogSum", x, 18, [1]), {"x": x})


def test_axis_out_of_range_names_the_node():
    with pytest.raises(GlowError, match="node 'y' \\(ReduceSum\\): axis 3 is out of range for rank 3"):
        glow_run(reduce_model("ReduceSum", X, 13, [3]), {"x": X})
    with pytest.raises(GlowError, match="node 'y' \\(ReduceMean\\).*repeat"):
        glow_run(reduce_model("ReduceMean", X, 18, [1, -2]), {"x": X})


def test_topk_k_larger_than_axis():
    with pytest.raises(GraphError, match="node 'values' \\(TopK\\): k = 9"):
        glow_run(topk_model(X, 9, 11), {"x": X})


def _placeholder(elem, shape):
    module = Module()
    function = module.create_function("main")
    return function, module.create_placeholder("x", Type(elem, shape)).result()


def test_ill_typed_reductions_are_rejected():
    function, x = _placeholder(ElemKind.BOOL, (2, 3))
    with pytest.raises(GraphError, match="node 'r' \\(ReduceSum\\): input must be"):
        function.create(rd.ReduceSum, [x], "r", axes=(1,))
    function, x = _placeholder(ElemKind.FLOAT32, (2, 3))
    with pytest.raises(GraphError, match="node 'r' \\(ReduceMax\\): axes \\[1, 0\\] must be sorted"):
        function.create(rd.ReduceMax, [x], "r", axes=(1, 0))
    with pytest.raises(GraphError, match="node 'a' \\(ArgMax\\): axis -1 must be normalised"):
        function.create(rd.ArgMax, [x], "a", axis=-1)
    function, x = _placeholder(ElemKind.INT32, (2, 3))
    with pytest.raises(GraphError, match="node 'l' \\(ReduceLogSumExp\\)"):
        function.create(rd.ReduceLogSumExp, [x], "l", axes=(0,))
