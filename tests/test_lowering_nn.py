"""Lowering of the nn and linalg node kinds onto primitives: structure and numbers.

Each case imports a one-node ONNX model, lowers it for the interpreter (which runs only
primitives) and compares with the unlowered reference kernels on seeded random inputs.
"""
import ml_dtypes
import numpy as np
import pytest

from lowering_util import check_lowering
from oracle import single_op_model

RNG = np.random.default_rng(23)
BF16 = ml_dtypes.bfloat16


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def tolerance(dtype) -> dict:
    """One unit in the last place of the result kind: the lowerings round where the kernels do."""
    ulp = {np.dtype(np.float16): 1e-3, np.dtype(BF16): 8e-3}.get(np.dtype(dtype), 1e-5)
    return {"rtol": ulp, "atol": ulp}


# -- ConvTranspose ------------------------------------------------------------------------------
CONV_TRANSPOSE = [
    ((1, 2, 5), (2, 3, 3), dict()),
    ((2, 4, 5, 4), (4, 2, 3, 2), dict(strides=[2, 3], pads=[1, 0, 2, 1], group=2)),
    ((1, 3, 4, 4), (3, 2, 2, 3), dict(strides=[2, 2], dilations=[2, 1], output_padding=[1, 0])),
    ((1, 2, 3, 3), (2, 1, 3, 3), dict(strides=[3, 2], output_shape=[12, 9])),  # negative pads
    ((1, 2, 4, 3), (2, 2, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 2, 3, 2, 3), (2, 2, 2, 2, 2), dict(strides=[2, 1, 2], pads=[0, 1, 0, 1, 0, 1])),
    ((1, 2, 3), (2, 2, 2), dict(pads=[5, -7])),  # the output lies beyond the input: bias only
]


@pytest.mark.parametrize("x_shape, w_shape, attrs", CONV_TRANSPOSE)
@pytest.mark.parametrize("constant_filter", [True, False])
def test_conv_transpose(x_shape, w_shape, attrs, constant_filter):
    group = attrs.get("group", 1)
    feeds = {"x": rand(*x_shape), "w": rand(*w_shape), "b": rand(w_shape[1] * group)}
    model = single_op_model("ConvTranspose", feeds, **attrs)
    counts = check_lowering(model, feeds, constants=("w",) if constant_filter else (),
                            rtol=1e-4, atol=1e-5, expect_lowered="ConvTranspose")
    if "Conv" in counts:  # a constant filter is flipped and transposed at compile time
        assert ("Transpose" in counts) != constant_filter


def test_conv_transpose_float16():
    feeds = {"x": rand(1, 2, 4, 4, dtype=np.float16), "w": rand(2, 3, 3, 3, dtype=np.float16)}
    model = single_op_model("ConvTranspose", feeds, strides=[2, 2], pads=[1, 1, 0, 0])
    check_lowering(model, feeds, constants=("w",), expect_lowered="ConvTranspose",
                   **tolerance(np.float16))


# -- BatchNorm, InstanceNorm, GroupNorm ---------------------------------------------------------
def _channel_params(c: int, dtype=np.float32) -> dict:
    return {"scale": rand(c, dtype=dtype), "bias": rand(c, dtype=dtype), "mean": rand(c, dtype=dtype),
            "var": np.abs(rand(c, dtype=dtype)) + dtype(0.1)}


@pytest.mark.parametrize("x_dtype, p_dtype", [(np.float32, np.float32), (np.float16, np.float32),
                                              (np.float64, np.float64), (BF16, BF16)])
@pytest.mark.parametrize("folded", [True, False])
def test_batch_norm(x_dtype, p_dtype, folded):
    feeds = {"x": rand(2, 3, 4, 5, dtype=x_dtype), **_channel_params(3, p_dtype)}
    model = single_op_model("BatchNormalization", feeds, epsilon=1e-3)
    params = ("scale", "bias", "mean", "var")
    counts = check_lowering(model, feeds, constants=params if folded else (),
                            expect_lowered="BatchNorm", **tolerance(x_dtype))
    if folded:  # the multiplier and offset are compile-time constants: one Mul and one Add
        assert counts["Mul"] == 1 and counts["Add"] == 1 and "Sqrt" not in counts


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 4, 3, 3), (2, 2, 2, 3, 2)])
def test_instance_norm(dtype, shape):
    feeds = {"x": rand(*shape, dtype=dtype) * dtype(3) + dtype(1), "scale": rand(shape[1], dtype=dtype),
             "bias": rand(shape[1], dtype=dtype)}
    model = single_op_model("InstanceNormalization", feeds, epsilon=1e-4)
    check_lowering(model, feeds, expect_lowered="InstanceNorm", **tolerance(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("groups", [1, 2, 6])
def test_group_norm(dtype, groups):
    feeds = {"x": rand(2, 6, 3, 4, dtype=dtype), "scale": rand(6, dtype=dtype), "bias": rand(6, dtype=dtype)}
    model = single_op_model("GroupNormalization", feeds, num_groups=groups, epsilon=1e-3)
    check_lowering(model, feeds, expect_lowered="GroupNorm", **tolerance(dtype))


# -- LayerNorm, RMSNorm -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.float64])
@pytest.mark.parametrize("axis, with_bias, stash",
                         [(-1, True, 1), (1, False, 1), (0, True, 1), (2, True, 10)])
def test_layer_norm(dtype, axis, with_bias, stash):
    shape = (2, 3, 4)
    inner = shape[axis:]
    feeds = {"x": rand(*shape, dtype=dtype), "scale": rand(*inner, dtype=dtype)}
    if with_bias:  # a bias of fewer dims than the normalised ones broadcasts onto them
        feeds["bias"] = rand(*inner[-1:], dtype=dtype)
    model = single_op_model("LayerNormalization", feeds, outputs=("y", "mean", "inv_std"), axis=axis,
                            stash_type=stash, epsilon=1e-3)
    check_lowering(model, feeds, expect_lowered="LayerNorm", **tolerance(dtype))


@pytest.mark.parametrize("x_dtype, s_dtype", [(np.float32, np.float32), (np.float16, np.float16),
                                              (np.float16, np.float32), (np.float64, np.float64)])
@pytest.mark.parametrize("axis", [-1, 1])
def test_rms_norm(x_dtype, s_dtype, axis):
    feeds = {"x": rand(2, 3, 5, dtype=x_dtype), "scale": rand(*(2, 3, 5)[axis:][1:], dtype=s_dtype)}
    model = single_op_model("RMSNormalization", feeds, opset=23, axis=axis, epsilon=1e-4)
    check_lowering(model, feeds, expect_lowered="RMSNorm", **tolerance(x_dtype))


# -- LRN, global pooling ------------------------------------------------------------------------
@pytest.mark.parametrize("size", [1, 2, 3, 5, 9])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_lrn(size, dtype):
    feeds = {"x": rand(2, 6, 3, 3, dtype=dtype)}
    model = single_op_model("LRN", feeds, size=size, alpha=0.02, beta=0.6, bias=1.5)
    counts = check_lowering(model, feeds, expect_lowered="LRN", **tolerance(dtype))
    # one channel-window AveragePool; no padded copy of the squares, no shifted slices
    assert counts["AveragePool"] == 1 and "Slice" not in counts and "Concat" not in counts


@pytest.mark.parametrize("op, kind", [("GlobalAveragePool", "GlobalAveragePool"),
                                      ("GlobalMaxPool", "GlobalMaxPool")])
@pytest.mark.parametrize("shape", [(2, 3, 7), (1, 4, 5, 6), (2, 2, 3, 2, 4)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_global_pool(op, kind, shape, dtype):
    feeds = {"x": rand(*shape, dtype=dtype)}
    check_lowering(single_op_model(op, feeds), feeds, expect_lowered=kind, **tolerance(dtype))


# -- Softmax, LogSoftmax ------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.float64])
@pytest.mark.parametrize("axis, opset", [(-1, 13), (0, 13), (1, 11)])
def test_softmax(op, dtype, axis, opset):
    x = rand(3, 4, 5) * 30
    x[0, 0, :] = 1e4  # large equal values: the max shift keeps exp finite
    x[1, 1, 1] = -np.inf
    feeds = {"x": x.astype(dtype)}
    model = single_op_model(op, feeds, opset=opset, axis=axis)
    counts = check_lowering(model, feeds, expect_lowered=op, **tolerance(dtype))
    assert counts["ReduceMax"] == 1 and counts["Exp"] == 1


# -- Gemm ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int32])
@pytest.mark.parametrize("attrs, c_shape", [
    (dict(), None),
    (dict(transA=1), (5,)),
    (dict(transB=1, alpha=0.5, beta=2.0), (3, 5)),
    (dict(transA=1, transB=1, beta=-1.0), (3, 1)),
    (dict(alpha=3.0, beta=0.0), ()),
])
def test_gemm(dtype, attrs, c_shape):
    def operand(*shape):
        if np.dtype(dtype).kind == "i":
            return RNG.integers(-9, 9, shape).astype(dtype)
        return rand(*shape, dtype=dtype)

    a = operand(4, 3) if attrs.get("transA") else operand(3, 4)
    w = operand(5, 4) if attrs.get("transB") else operand(4, 5)
    feeds = {"a": a, "w": w}
    if c_shape is not None:
        feeds["c"] = operand(*c_shape)
    model = single_op_model("Gemm", feeds, **attrs)
    check_lowering(model, feeds, constants=("w",), expect_lowered="Gemm", **tolerance(dtype))


# -- MatMul -------------------------------------------------------------------------------------
MATMUL_SHAPES = [((4,), (4,)), ((4,), (4, 3)), ((2, 4), (4,)), ((3,), (2, 3, 5)), ((2, 3, 4), (4,)),
                 ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
                 ((1, 3, 4), (1, 4, 2))]


@pytest.mark.parametrize("lhs, rhs", MATMUL_SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64])
def test_matmul(lhs, rhs, dtype):
    if np.dtype(dtype).kind == "i":
        feeds = {"a": RNG.integers(-50, 50, lhs).astype(dtype), "b": RNG.integers(-50, 50, rhs).astype(dtype)}
    else:
        feeds = {"a": rand(*lhs, dtype=dtype), "b": rand(*rhs, dtype=dtype)}
    counts = check_lowering(single_op_model("MatMul", feeds), feeds, **tolerance(dtype))
    assert counts["MatMul"] == 1
    if len(rhs) == 2 or len(rhs) == 1:  # the lhs batch folds into rows: no copies
        assert "Expand" not in counts


def test_canonical_matmul_stays():
    feeds = {"a": rand(2, 3, 4), "b": rand(2, 4, 5)}
    counts = check_lowering(single_op_model("MatMul", feeds), feeds)
    assert counts == {"MatMul": 1, "Save": 1}


# -- Einsum -------------------------------------------------------------------------------------
EINSUM = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("i,i->", [(6,), (6,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("...ii->...i", [(2, 3, 4, 4)]),
    ("iij->j", [(3, 3, 2)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("ij,jk->ik", [(3, 1), (4, 5)]),
    ("abc,cd->dba", [(2, 3, 4), (4, 2)]),
    ("i,->i", [(3,), ()]),
]


@pytest.mark.parametrize("equation, shapes", EINSUM)
@pytest.mark.parametrize("dtype", [np.float32, BF16, np.int32])
def test_einsum(equation, shapes, dtype):
    if np.dtype(dtype).kind == "i":
        arrays = [RNG.integers(-9, 9, s).astype(dtype) for s in shapes]
    else:
        arrays = [rand(*s, dtype=dtype) for s in shapes]
    feeds = {f"x{i}": a for i, a in enumerate(arrays)}
    model = single_op_model("Einsum", feeds, equation=equation)
    check_lowering(model, feeds, expect_lowered="Einsum", **tolerance(dtype))
