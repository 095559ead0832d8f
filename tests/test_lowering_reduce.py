"""Lowering of the reduction node kinds (ReduceMean, L1, L2, LogSum, LogSumExp, SumSquare)
and CumSum onto primitives.

Seeded random inputs over axes, keepdims and every element kind a kind accepts: only
primitives remain and the results match the unlowered reference, exactly for the
reductions (one model per element kind holds every reduction, so the file stays fast),
within the stated rounding bound for float CumSum. Empty reductions give the reference's
identity elements. Then the ONNX node conformance cases of these ops, through lowering.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from lowering_util import check_lowering
from onnx import helper, numpy_helper

from glowsdk.backends import get_backend
from glowsdk.compiler.pipeline import compile_function
from glowsdk.conformance.node_tests import run_node_tests
from glowsdk.frontend.onnx.importer import import_model

FLOATS = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64]
INTEGERS = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]
EXACT = {"rtol": 0.0, "atol": 0.0}
REDUCTIONS = ["ReduceMean", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]
FLOAT_ONLY = {"ReduceLogSum", "ReduceLogSumExp"}
AXES = [((1,), 1), ((0, 2), 0), ((0, 1, 2), 1), ((), 0)]
"""(axes, keepdims) pairs; () reduces over no axis (keeping only the per-element map)."""


def name(dtype) -> str:
    return np.dtype(dtype).name


def sample(dtype, shape=(3, 4, 5), seed=0) -> np.ndarray:
    """Floats: normal samples (positive for ReduceLogSum's sake); integers: the whole range."""
    rng = np.random.default_rng(seed)
    if dtype in INTEGERS:
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    return (rng.standard_normal(shape) * 3).astype(dtype)


def reductions_model(x: np.ndarray, ops: list[str], axes_list=AXES) -> onnx.ModelProto:
    """Every op in `ops` over every (axes, keepdims) pair, one output each (opset 18: axes
    are an input)."""
    nodes, inits, outputs = [], [], []
    for i, (axes, keepdims) in enumerate(axes_list):
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), f"axes{i}"))
        for op in ops:
            out = f"{op}_{i}"
            source = "x_abs" if op == "ReduceLogSum" else "x"
            nodes.append(helper.make_node(op, [source, f"axes{i}"], [out], keepdims=keepdims,
                                          noop_with_empty_axes=1))
            outputs.append(helper.make_tensor_value_info(out, onnx.TensorProto.UNDEFINED, None))
    if "ReduceLogSum" in ops:
        nodes.insert(0, helper.make_node("Abs", ["x"], ["x_abs"]))
    graph = helper.make_graph(
        nodes, "reductions",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def cumsum_model(x: np.ndarray, axis: int) -> onnx.ModelProto:
    """CumSum along `axis` in all four exclusive/reverse combinations, one output each."""
    nodes = [helper.make_node("CumSum", ["x", "axis"], [f"y{e}{r}"], exclusive=e, reverse=r)
             for e in (0, 1) for r in (0, 1)]
    graph = helper.make_graph(
        nodes, "cumsum",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)],
        [helper.make_tensor_value_info(n.output[0], onnx.TensorProto.UNDEFINED, None) for n in nodes],
        [numpy_helper.from_array(np.array(axis, np.int64), "axis")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


# -- reductions -----------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")
@pytest.mark.parametrize("dtype", FLOATS + INTEGERS, ids=name)
def test_reductions(dtype):
    """Exact: the same accumulation (float32 for half kinds, wrapping integers), the same
    roundings; integer means truncate, integer L2 takes a float64 root of a 64-bit sum (which
    full-range int32/int64 squares overflow, to a NaN root: converted as the reference does)."""
    ops = REDUCTIONS if dtype in FLOATS else [op for op in REDUCTIONS if op not in FLOAT_ONLY]
    x = sample(dtype)
    counts = check_lowering(reductions_model(x, ops), {"x": x}, **EXACT)
    assert not any(kind in counts for kind in REDUCTIONS)


def test_log_sum_exp_infinities_and_nan():
    """Infinities and NaN are left out of the shift; rows of only -inf give -inf."""
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32) * 50
    x[0] = -np.inf
    x[1, 0], x[2, 1], x[3, 2] = np.inf, np.nan, -np.inf
    x[4] = [np.inf, -np.inf, 1.0, 2.0]
    check_lowering(reductions_model(x, ["ReduceLogSumExp"], [((1,), 0), ((0,), 1)]), {"x": x}, **EXACT)


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.int32, np.int64, np.uint8],
                         ids=name)
def test_empty_reductions_give_the_identity(dtype):
    """0 for sums, -inf for the logs, NaN for a float mean; an integer mean of nothing converts
    NaN to the integer kind, as the reference does."""
    ops = REDUCTIONS if dtype in FLOATS else [op for op in REDUCTIONS if op not in FLOAT_ONLY]
    x = np.zeros((3, 0, 2), dtype)
    check_lowering(reductions_model(x, ops, [((1,), 0), ((0, 1), 1)]), {"x": x}, **EXACT)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int64, np.uint64], ids=name)
def test_integer_means_divide_like_the_reference(dtype):
    """A count of 300 does not fit int8/uint8, and 64-bit sums round to float64 in the
    reference: both divide in float64 (two Casts); int16 divides in its own kind."""
    x = sample(dtype, (300, 3))
    x[:, 1] = np.iinfo(dtype).min
    x[:, 2] = np.iinfo(dtype).max
    counts = check_lowering(reductions_model(x, ["ReduceMean"], [((0,), 1)]), {"x": x}, **EXACT)
    assert counts.get("Cast", 0) == (0 if dtype == np.int16 else 2)


# -- CumSum ---------------------------------------------------------------------------------------
CUMSUM_SHAPES = [((3, 7, 2), 1), ((9,), 0), ((2, 1), 1), ((4, 16), 1), ((0, 3), 1)]


@pytest.mark.parametrize("dtype", INTEGERS, ids=name)
def test_cumsum_integers_exact(dtype):
    """Wrapping sums do not depend on the order: exact over the whole range."""
    for shape, axis in CUMSUM_SHAPES:
        x = sample(dtype, shape)
        check_lowering(cumsum_model(x, axis), {"x": x})


@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_cumsum_floats(dtype):
    """Tree-order sums: within 2 * ceil(log2 n) * u * sum |x| of the reference (u of float32 for
    the half kinds, which then round once more: one unit in their last place)."""
    half = dtype in (np.float16, ml_dtypes.bfloat16)
    u = np.finfo(np.float32 if half else dtype).eps / 2
    for shape, axis in CUMSUM_SHAPES:
        x = sample(dtype, shape)
        n = max(shape[axis], 2)
        largest_row = np.abs(x.astype(np.float64)).sum(axis=axis).max(initial=0)
        bound = 2 * np.ceil(np.log2(n)) * u * float(largest_row)
        rtol = float(ml_dtypes.finfo(dtype).eps) if half else 0.0
        counts = check_lowering(cumsum_model(x, axis), {"x": x}, rtol=rtol, atol=bound)
        assert "CumSum" not in counts and "MatMul" not in counts


def test_cumsum_structure_and_non_finite_values():
    """ceil(log2 16) = 4 doubling steps per direction; infinities and NaN reach exactly the
    elements they reach in a left-to-right sum."""
    x = np.random.default_rng(2).standard_normal((3, 16)).astype(np.float32)
    x[0, 5], x[1, 3], x[1, 9], x[2, 7] = np.inf, np.inf, -np.inf, np.nan
    function = import_model(cumsum_model(x, 1), input_shapes={"x": x.shape}).functions["main"]
    counts = {}
    compiled = compile_function(function, get_backend("interpreter"), verify_each=True,
                                on_stage=lambda stage, fn: counts.update({stage: fn.count_kinds()}))
    assert counts["lowered"]["Add"] == 8  # 4 steps, forward and reverse, shared by exclusive
    got = compiled.execute({"x": x})
    with np.errstate(invalid="ignore"):
        want = np.cumsum(x, axis=1)
    np.testing.assert_array_equal(np.isnan(got["y00"]), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got["y00"]), np.isinf(want))


# -- conformance ----------------------------------------------------------------------------------
def test_onnx_node_conformance_through_lowering():
    results = run_node_tests(get_backend("interpreter"), REDUCTIONS + ["CumSum"])
    assert len(results) > 100
    failing = [f"{r.name}: {r.status} {r.detail[:200]}" for r in results if r.status != "pass"]
    assert not failing, "\n".join(failing)
