"""Lowering of the element-wise node kinds onto primitives.

Each kind is lowered on seeded random inputs (with zeros of both signs, infinities and
NaN for floats, and the extreme values for integers) over its attributes and the
element kinds it accepts: only primitives remain, and the results match the unlowered
reference exactly where the rule is exact, within the stated bound otherwise. To keep
the file fast, one model holds every op of a test, one output each. Then the ONNX node
conformance cases of these ops, through lowering.
"""
from __future__ import annotations

from collections.abc import Sequence

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
from glowsdk.reference.evaluator import evaluate

FLOATS = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64]
SIGNED = [np.int8, np.int16, np.int32, np.int64]
UNSIGNED = [np.uint8, np.uint16, np.uint32, np.uint64]
EXACT = {"rtol": 0.0, "atol": 0.0}
CLOSE = {np.dtype(np.float32): {"rtol": 1e-5, "atol": 1e-6},
         np.dtype(np.float16): {"rtol": 2e-3, "atol": 5e-7},
         np.dtype(ml_dtypes.bfloat16): {"rtol": 1.6e-2, "atol": 5e-7},
         np.dtype(np.float64): {"rtol": 1e-12, "atol": 1e-15}}
"""About two units in the last place of each kind, and an absolute |x| * 2**-24 (float32 and the
half kinds, which compute in float32) for Gelu, where 1 + erf(x) cancels."""

Op = tuple[str, Sequence[str], dict]
"""One node of a test model: the op, its input names, its attributes."""


def name(dtype) -> str:
    return np.dtype(dtype).name


def floats(dtype, shape=(4, 6), seed=0, scale=4.0) -> np.ndarray:
    """Normal samples with +-0, +-inf and NaN in the first five places."""
    x = np.random.default_rng(seed).standard_normal(shape) * scale
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan][:x.size]
    x.reshape(-1)[:len(specials)] = specials
    return x.astype(dtype)


def integers(dtype, shape=(4, 6), seed=0) -> np.ndarray:
    """Uniform samples over the whole range, with the lowest and highest value and zero."""
    info = np.iinfo(dtype)
    x = np.random.default_rng(seed).integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    x.reshape(-1)[:3] = [info.min, info.max, 0]
    return x


def model(inputs: dict[str, np.ndarray], ops: Sequence[Op],
          initializers: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    """One node per op, reading the named inputs; node i writes output y{i}."""
    nodes = [helper.make_node(op, list(names), [f"y{i}"], **attrs)
             for i, (op, names, attrs) in enumerate(ops)]
    graph = helper.make_graph(
        nodes, "ops",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in inputs.items()],
        [helper.make_tensor_value_info(f"y{i}", onnx.TensorProto.UNDEFINED, None)
         for i in range(len(ops))],
        [numpy_helper.from_array(a, n) for n, a in (initializers or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def unary(*ops: str | tuple[str, dict]) -> list[Op]:
    """Ops applied to x, given by name or as (name, attributes)."""
    return [(op, ["x"], {}) if isinstance(op, str) else (op[0], ["x"], op[1]) for op in ops]


def run_both(onnx_model: onnx.ModelProto, feeds: dict) -> tuple[dict, dict]:
    """The unlowered reference results and the lowered interpreter results."""
    function = import_model(onnx_model, input_shapes={n: a.shape for n, a in feeds.items()}).functions["main"]
    return evaluate(function, feeds), compile_function(function, get_backend("interpreter")).execute(feeds)


# -- exact rules ----------------------------------------------------------------------------------
EXACT_FLOAT_OPS = unary(
    "Neg", "Abs", "Sign", "Reciprocal", "Ceil", "Relu", "Softsign", "HardSwish", "IsNaN", "IsInf",
    ("IsInf", {"detect_positive": 0}), ("IsInf", {"detect_negative": 0}),
    ("IsInf", {"detect_positive": 0, "detect_negative": 0}),
    "LeakyRelu", ("LeakyRelu", {"alpha": 0.3}), "HardSigmoid", ("HardSigmoid", {"alpha": 0.37, "beta": 0.61}),
    "ThresholdedRelu", ("ThresholdedRelu", {"alpha": 1.006}))


@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_exact_float_ops(dtype):
    """bfloat16 computes with float attributes in float32 and rounds once, as the reference."""
    x = floats(dtype, (8, 12))
    check_lowering(model({"x": x}, EXACT_FLOAT_OPS), {"x": x}, **EXACT)


@pytest.mark.parametrize("dtype", SIGNED + UNSIGNED, ids=name)
def test_exact_integer_ops(dtype):
    """Neg and Abs of the lowest value wrap to itself, as numpy's do; unsigned Abs is nothing."""
    ops = unary("Neg", "Abs", "Sign", "Relu") if dtype in SIGNED else unary("Abs", "Sign")
    x = integers(dtype)
    counts = check_lowering(model({"x": x}, ops), {"x": x})
    assert counts["Where"] == (3 if dtype in SIGNED else 1)  # Abs 1, Sign 2 (unsigned: 0 and 1)


def test_signed_zeros():
    x = np.array([0.0, -0.0, -0.5, 0.5, -2.5, -3.0], np.float32)
    want, got = run_both(model({"x": x}, unary("Neg", "Abs", "Sign", "Ceil")), {"x": x})
    for output in want:
        np.testing.assert_array_equal(np.signbit(got[output]), np.signbit(want[output]), output)


@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_prelu(dtype):
    x = floats(dtype)
    slopes = {f"s{i}": floats(dtype, shape, seed=i + 1, scale=0.5)
              for i, shape in enumerate([(6,), (4, 1), (1,)])}
    ops = [("PRelu", ["x", s], {}) for s in slopes]
    check_lowering(model({"x": x, **slopes}, ops), {"x": x, **slopes}, expect_lowered="PRelu", **EXACT)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint8], ids=name)
def test_comparisons(dtype):
    """NaN compares False both ways; ties; broadcasting."""
    make = floats if np.dtype(dtype).kind == "f" else integers
    x, z = make(dtype, (4, 6), seed=2), make(dtype, (4, 1), seed=3)
    x[1, 0] = z[1, 0]
    ops = [(op, ["x", "z"], {}) for op in ("Greater", "GreaterOrEqual", "LessOrEqual")]
    counts = check_lowering(model({"x": x, "z": z}, ops), {"x": x, "z": z})
    assert counts == {"Less": 2, "Equal": 1, "Or": 2, "Save": 3}  # after CSE


def test_xor():
    rng = np.random.default_rng(4)
    x, z = rng.random((3, 5)) < 0.5, rng.random((5,)) < 0.5
    counts = check_lowering(model({"x": x, "z": z}, [("Xor", ["x", "z"], {})]), {"x": x, "z": z},
                            expect_lowered="Xor")
    assert counts == {"Equal": 1, "Not": 1, "Save": 1}


CLIP_BOUNDS = [(-2.0, 3.0), (None, 1.5), (-1.5, None), (5.0, -5.0), (None, None)]


@pytest.mark.parametrize("dtype", FLOATS + SIGNED + UNSIGNED, ids=name)
def test_clip(dtype):
    """Integer bounds convert like the reference (1.5 is 1); a missing bound is no bound."""
    if dtype in FLOATS:
        x = floats(dtype)
    else:
        x = (integers(dtype) % 7).astype(dtype) - (3 if dtype in SIGNED else 0)
    bounds = CLIP_BOUNDS if dtype not in UNSIGNED else [(3.0, 4.0), (None, 1.5), (2.5, None), (5.0, 2.0)]
    ops, inits = [], {}
    for i, pair in enumerate(bounds):
        names = [f"{side}{i}" if v is not None else "" for side, v in zip("lh", pair)]
        inits.update({n: np.array(v, dtype) for n, v in zip(names, pair) if n})
        ops.append(("Clip", ["x", *names], {}))
    counts = check_lowering(model({"x": x}, ops, inits), {"x": x}, expect_lowered="Clip", **EXACT)
    assert counts.get("Max", 0) == sum(lo is not None for lo, _ in bounds)
    assert counts.get("Min", 0) == sum(hi is not None for _, hi in bounds)


# -- rules with a stated error bound --------------------------------------------------------------
TRANSCENDENTAL_OPS = unary(
    "Sigmoid", "Softplus", "Mish", "Elu", ("Elu", {"alpha": 0.4}), "Selu",
    ("Selu", {"alpha": 1.2, "gamma": 0.9}), "Celu", ("Celu", {"alpha": 0.5}), "Gelu",
    ("Gelu", {"approximate": "tanh"}))


@pytest.mark.parametrize("dtype", FLOATS, ids=name)
def test_transcendental(dtype):
    x = floats(dtype, (8, 16), scale=6.0)
    counts = check_lowering(model({"x": x}, TRANSCENDENTAL_OPS), {"x": x}, **CLOSE[np.dtype(dtype)])
    assert "Tanh" in counts  # Mish's; Gelu's tanh form needs none


def test_no_cancellation_near_zero_and_in_tails():
    """Tiny and large inputs, where naive log(1 + e**x) or e**x - 1 lose all their digits."""
    x = np.concatenate([np.geomspace(1e-30, 1.0, 40), -np.geomspace(1e-30, 1.0, 40),
                        np.linspace(-60, 60, 41)]).astype(np.float32)
    want, got = run_both(model({"x": x}, unary("Softplus", "Elu", "Mish", "Celu")), {"x": x})
    for output in want:
        np.testing.assert_allclose(got[output], want[output], rtol=4e-7, atol=0, err_msg=output)


def test_gelu_tanh_does_not_cancel():
    """1 + tanh(z) is computed as 2 / (1 + e**(-2z)): relative accuracy for x << 0 (about |2z|
    units of roundoff, from rounding z), where the reference's own 1 + tanh cancels."""
    x = np.linspace(-9.0, -3.0, 50).astype(np.float32)
    want, got = run_both(model({"x": x}, unary(("Gelu", {"approximate": "tanh"}))), {"x": x})
    x64 = x.astype(np.float64)
    exact = x64 / (1.0 + np.exp(-2.0 * np.sqrt(2.0 / np.pi) * (x64 + 0.044715 * x64 ** 3)))
    np.testing.assert_allclose(got["y0"], exact, rtol=1e-5, atol=0)
    np.testing.assert_allclose(got["y0"], want["y0"], **CLOSE[np.dtype(np.float32)])


def test_half_kinds_compute_in_float32():
    x = floats(np.float16)
    counts = check_lowering(model({"x": x}, unary("Sigmoid")), {"x": x}, **CLOSE[np.dtype(np.float16)])
    assert counts == {"Cast": 2, "Mul": 1, "Exp": 1, "Add": 1, "Div": 1, "Save": 1}


# -- conformance ----------------------------------------------------------------------------------
OPS = ["Neg", "Abs", "Sign", "Reciprocal", "Ceil", "IsNaN", "IsInf", "Greater", "GreaterOrEqual",
       "LessOrEqual", "Xor", "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Sigmoid",
       "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Mish", "Gelu", "ThresholdedRelu", "Clip"]


def test_onnx_node_conformance_through_lowering():
    results = run_node_tests(get_backend("interpreter"), OPS)
    assert len(results) > 150
    failing = [f"{r.name}: {r.status} {r.detail[:200]}" for r in results if r.status != "pass"]
    assert not failing, "\n".join(failing)
