"""Element-wise ops against onnx.reference on seeded random inputs."""
import numpy as np
import pytest

from glowsdk.errors import GraphError

from oracle import glow_run, reference_run, single_op_model

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4, 5)).astype(np.float32)
Y = RNG.standard_normal((4, 1)).astype(np.float32)

UNARY = ["Neg", "Abs", "Sign", "Exp", "Floor", "Ceil", "Round", "Sin", "Cos", "Erf", "Tanh", "Sigmoid",
         "Relu", "HardSwish", "Softplus", "Softsign", "Mish", "Gelu", "IsNaN", "IsInf"]
UNARY_ATTRS = [("LeakyRelu", {"alpha": 0.2}), ("Elu", {"alpha": 0.7}), ("Selu", {"alpha": 1.5, "gamma": 2.0}),
               ("Celu", {"alpha": 0.5}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
               ("ThresholdedRelu", {"alpha": 0.3}), ("Gelu", {"approximate": "tanh"})]
BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min", "Equal", "Less", "LessOrEqual", "Greater",
          "GreaterOrEqual", "PRelu"]


def check(model, feeds, constants=(), rtol=1e-5, atol=1e-6):
    want = reference_run(model, feeds)
    got = glow_run(model, feeds, constants=constants)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)


@pytest.mark.parametrize("op", UNARY)
def test_unary(op):
    check(single_op_model(op, {"x": X}), {"x": X})


@pytest.mark.parametrize("op,attrs", UNARY_ATTRS)
def test_unary_with_attributes(op, attrs):
    check(single_op_model(op, {"x": X}, **attrs), {"x": X})


@pytest.mark.parametrize("op", ["Sqrt", "Log", "Reciprocal"])
def test_unary_positive_domain(op):
    x = np.abs(X) + 0.1
    check(single_op_model(op, {"x": x}), {"x": x})


@pytest.mark.parametrize("op", BINARY)
def test_binary_broadcasts(op):
    check(single_op_model(op, {"a": X, "b": Y}), {"a": X, "b": Y})


@pytest.mark.parametrize("fmod", [0, 1])
def test_integer_mod_and_div(fmod):
    a = RNG.integers(-50, 50, (6, 7)).astype(np.int32)
    b = RNG.integers(1, 9, (7,)).astype(np.int32) * np.where(RNG.random(7) < 0.5, -1, 1).astype(np.int32)
    check(single_op_model("Mod", {"a": a, "b": b}, fmod=fmod), {"a": a, "b": b})
    check(single_op_model("Div", {"a": a, "b": b}), {"a": a, "b": b})


def test_variadic_sum_mean_max():
    feeds = {"a": X, "b": Y, "c": X[0]}
    for op in ["Sum", "Mean", "Max", "Min"]:
        check(single_op_model(op, feeds), feeds)


def test_clip_with_constant_bounds():
    feeds = {"x": X, "lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}
    check(single_op_model("Clip", feeds), feeds, constants=["lo", "hi"])


def test_where_and_logic():
    c = RNG.random((3, 4, 5)) < 0.5
    d = RNG.random((4, 5)) < 0.5
    check(single_op_model("Where", {"c": c, "a": X, "b": Y[:, :1].T[:, :1]}), {"c": c, "a": X, "b": Y[:, :1].T[:, :1]})
    for op in ["And", "Or", "Xor"]:
        check(single_op_model(op, {"c": c, "d": d}), {"c": c, "d": d})


@pytest.mark.parametrize("to", [1, 6, 7, 9, 10])
def test_cast(to):
    x = (X * 10).astype(np.float32)
    check(single_op_model("Cast", {"x": x}, to=to), {"x": x})


def test_pow_mixed_types():
    base = np.abs(X) + 0.5
    exponent = np.array([2, 3, 1, 0, 2], dtype=np.int64)
    check(single_op_model("Pow", {"b": base, "e": exponent}), {"b": base, "e": exponent}, rtol=1e-5)


def test_ill_typed_binary_names_node():
    model = single_op_model("Add", {"a": X, "b": np.ones((4, 5), np.int64)})
    with pytest.raises(GraphError, match="node 'y'.*Add.*share one element kind"):
        glow_run(model, {"a": X, "b": np.ones((4, 5), np.int64)})
