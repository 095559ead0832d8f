"""Lowering of the tensor node kinds (Split, Pad, GatherElements, Tile, DepthToSpace,
SpaceToDepth, Trilu) onto the data-movement primitives: numbers and structure."""
import ml_dtypes
import numpy as np
import pytest

from glowsdk.backends import get_backend
from glowsdk.compiler.lowering.driver import lower_function
from glowsdk.compiler.lowering.primitives import is_primitive
from glowsdk.compiler.pipeline import compile_function
from glowsdk.errors import InputError
from glowsdk.frontend.onnx.importer import import_model
from glowsdk.graph import ElemKind, Module, Type, nodes
from glowsdk.graph.node import Storage
from glowsdk.reference.evaluator import evaluate
from lowering_util import check_lowering
from oracle import single_op_model

RNG = np.random.default_rng(7)
KINDS = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64, np.int8, np.uint16, np.int64, np.bool_,
         ml_dtypes.float8_e4m3fn, ml_dtypes.int4]


def data(shape, dtype=np.float32):
    if np.dtype(dtype) == np.bool_:
        return RNG.random(shape) < 0.5
    if dtype == ml_dtypes.int4:
        return RNG.integers(-8, 8, shape).astype(dtype)
    return (RNG.standard_normal(shape) * 20).astype(dtype)


def check(model, feeds, constants=(), expect_lowered=None):
    """Check the numbers through the whole pipeline; return the node counts right after
    lowering (before the post-lowering passes rewrite them)."""
    check_lowering(model, feeds, constants, expect_lowered=expect_lowered)
    bound = {n: feeds[n] for n in constants}
    shapes = {n: a.shape for n, a in feeds.items() if n not in bound}
    function = import_model(model, input_shapes=shapes, constants=bound).functions["main"]
    lower_function(function, get_backend("interpreter"))
    return function.count_kinds()


def lowered_graph(fn, feeds):
    """Lower a hand-built function for the interpreter; check only primitives remain and the
    numbers match the unlowered reference. Returns the compiled function and the node counts
    right after lowering."""
    want = evaluate(fn, feeds)
    seen = {}

    def grab(stage, lowered):
        if stage == "lowered":
            seen["bad"] = [n.kind for n in lowered.nodes
                           if not isinstance(n, Storage) and n.kind != "Save" and not is_primitive(n)]

    compiled = compile_function(fn, get_backend("interpreter"), on_stage=grab, verify_each=True)
    assert not seen["bad"], seen["bad"]
    got = compiled.execute(feeds)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)
    copy = fn.module.clone().functions[fn.name]
    lower_function(copy, get_backend("interpreter"))
    return compiled, copy.count_kinds()


def one_node(kind, input_type, **attrs):
    module = Module()
    fn = module.create_function("main")
    x = module.create_placeholder("x", input_type).result()
    fn.save(fn.add(kind, x, name="op", **attrs), "y")
    return fn


@pytest.mark.parametrize("dtype", KINDS)
@pytest.mark.parametrize("axis,split", [(0, [1, 3]), (1, [2, 2, 1]), (2, [3]), (-1, [0, 1, 2])])
def test_split(dtype, axis, split):
    x = data((4, 5, 3), dtype)
    outputs = [f"y{i}" for i in range(len(split))]
    model = single_op_model("Split", {"x": x, "split": np.array(split, np.int64)}, outputs=outputs, axis=axis)
    counts = check(model, {"x": x, "split": np.array(split, np.int64)}, constants=("split",),
                            expect_lowered="Split")
    assert counts["Slice"] == len(split)


PADS = [[1, 0, 2, 3], [0, 0, 0, 0], [-1, 2, 1, -2], [3, 4, 2, 5], [0, -2, 0, 1]]


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", PADS)
def test_pad_modes(mode, pads):
    x = data((4, 5))
    feeds = {"x": x, "pads": np.array(pads, np.int64), "value": np.array(1.5, np.float32)}
    model = single_op_model("Pad", feeds, mode=mode)
    counts = check(model, feeds, constants=("pads", "value"))
    grown = sum(max(a, 0) + max(b, 0) > 0 for a, b in zip(pads[:2], pads[2:]))
    assert counts.get("Gather" if mode != "constant" else "Concat", 0) == grown
    assert counts.get("Slice", 0) == (1 if min(pads) < 0 else 0)


@pytest.mark.parametrize("dtype", KINDS)
@pytest.mark.parametrize("mode", ["constant", "reflect"])
def test_pad_element_kinds(dtype, mode):
    x = data((2, 3, 4), dtype)
    pads = np.array([0, 1, 2, 1, 0, 3], np.int64)
    feeds = {"x": x, "pads": pads, "value": np.array(1, dtype)}
    check_lowering(single_op_model("Pad", feeds, mode=mode), feeds, constants=("pads", "value"),
                   expect_lowered="Pad")


@pytest.mark.parametrize("mode", ["constant", "edge"])
def test_quantized_pad_writes_the_code_of_the_value(mode):
    qtype = Type(ElemKind.QINT8, (3, 4), 0.25, -3)
    fn = one_node(nodes.Pad, qtype, mode=mode, pads=(1, 2, 0, 1), value=2.0)
    x = RNG.integers(-128, 128, (3, 4)).astype(np.int8)
    compiled, counts = lowered_graph(fn, {"x": x})
    y = compiled.execute({"x": x})["y"]
    if mode == "constant":
        assert counts["Reinterpret"] == 3  # one fill block per grown side
        assert y[0, 0] == 2.0 / 0.25 - 3


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("index_kind", [np.int64, np.int32])
@pytest.mark.parametrize("constant", [False, True])
def test_gather_elements(axis, index_kind, constant):
    x = data((3, 4, 5))
    shape = [2, 3, 4]
    shape[axis] = 6
    dim = x.shape[axis]
    indices = RNG.integers(-dim, dim, shape).astype(index_kind)
    feeds = {"x": x, "i": indices}
    counts = check(single_op_model("GatherElements", feeds, axis=axis), feeds,
                            constants=("i",) if constant else (), expect_lowered="GatherElements")
    assert counts["Gather"] == (1 if constant else 2)


def test_gather_elements_rank1_and_kinds():
    for dtype in KINDS:
        x = data((7,), dtype)
        feeds = {"x": x, "i": np.array([0, -1, 6, 3, -7], np.int64)}
        counts = check(single_op_model("GatherElements", feeds), feeds)
        assert "Add" not in counts


@pytest.mark.parametrize("constant", [False, True])
def test_gather_elements_out_of_range_raises_at_run_time(constant):
    x = data((3, 4))
    bad = np.array([[0, 1, 2, 3], [3, 0, 0, 0]], np.int64)
    feeds = {"x": x, "i": bad}
    bound = {"i": bad} if constant else {}
    module = import_model(single_op_model("GatherElements", feeds, axis=0),
                          input_shapes={n: a.shape for n, a in feeds.items() if n not in bound},
                          constants=bound)
    compiled = compile_function(module.functions["main"], get_backend("interpreter"))
    with pytest.raises(InputError, match="index 3 is out of range for axis 0 of size 3"):
        compiled.execute({n: a for n, a in feeds.items() if n not in bound})


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.bool_, ml_dtypes.bfloat16])
@pytest.mark.parametrize("repeats", [[1, 1, 1], [2, 1, 3], [1, 4, 1], [3, 2, 2], [0, 2, 1]])
def test_tile(dtype, repeats):
    x = data((2, 3, 4), dtype)
    feeds = {"x": x, "r": np.array(repeats, np.int64)}
    counts = check(single_op_model("Tile", feeds), feeds, constants=("r",))
    if repeats != [1, 1, 1]:
        assert counts == {"Reshape": 2, "Expand": 1, "Save": 1}


@pytest.mark.parametrize("op", ["DepthToSpace", "SpaceToDepth"])
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.float16])
@pytest.mark.parametrize("blocksize", [1, 2, 3])
def test_depth_and_space(op, mode, dtype, blocksize):
    b = blocksize
    shape = (2, 2 * b * b, 3, 2) if op == "DepthToSpace" else (2, 3, 2 * b, 3 * b)
    feeds = {"x": data(shape, dtype)}
    attrs = {"mode": mode} if op == "DepthToSpace" else {}
    counts = check(single_op_model(op, feeds, blocksize=blocksize, **attrs), feeds, expect_lowered=op)
    assert counts == {"Reshape": 2, "Transpose": 1, "Save": 1}


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_, np.float64])
@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [-7, -1, 0, 2, 9])
def test_trilu(dtype, upper, k):
    feeds = {"x": data((2, 4, 5), dtype), "k": np.array(k, np.int64)}
    counts = check(single_op_model("Trilu", feeds, upper=upper), feeds, constants=("k",))
    assert counts.get("Where", 0) == (0 if (upper and k <= -3) or (not upper and k >= 4) else 1)


def test_quantized_trilu_zeroes_with_the_offset():
    fn = one_node(nodes.Trilu, Type(ElemKind.QUINT8, (3, 3), 0.5, 7), upper=False, k=0)
    x = RNG.integers(0, 256, (3, 3)).astype(np.uint8)
    compiled, _ = lowered_graph(fn, {"x": x})
    assert compiled.execute({"x": x})["y"][0, 2] == 7
