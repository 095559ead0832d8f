"""Graph optimizer passes: each changes the graph as intended, keeps the numbers, and leaves
alone what it must not touch (STYLE 12: structure and numbers)."""
import math

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from glowsdk.compiler.passes import GRAPH_OPTIMIZATION, PASSES, PIPELINES, PassManager, run_passes
from glowsdk.frontend.onnx.importer import import_model
from glowsdk.graph import ElemKind, Module, Type, nodes
from glowsdk.reference.evaluator import evaluate

F32 = ElemKind.FLOAT32
RNG = np.random.default_rng(0)


def new_graph(**shapes):
    """A module, its function `main`, and one float32 placeholder per keyword (name=shape)."""
    module = Module()
    fn = module.create_function("main")
    values = [module.create_placeholder(n, Type(F32, s)).result() for n, s in shapes.items()]
    return module, fn, values


def const(module, array, name="c"):
    return module.create_constant(name, np.asarray(array, np.float32)).result()


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def optimise(module, fn, passes, rtol=1e-6, atol=1e-6):
    """Run `passes` on a copy, check the outputs on random inputs agree; return (copy, changed)."""
    feeds = {ph.name: rand(*ph.type.shape) for ph in fn.input_placeholders()}
    copy = module.clone().functions[fn.name]
    changed = run_passes(copy, passes)
    before, after = evaluate(fn, feeds), evaluate(copy, feeds)
    assert before.keys() == after.keys()
    for name in before:
        np.testing.assert_allclose(after[name], before[name], rtol=rtol, atol=atol, err_msg=name)
    return copy, changed


def unchanged(module, fn, passes):
    kinds = fn.count_kinds()
    copy, changed = optimise(module, fn, passes)
    assert not changed and copy.count_kinds() == kinds


# -- cse -----------------------------------------------------------------------------------
def test_cse_merges_identical_nodes_but_not_saves():
    module, fn, (x,) = new_graph(x=(2, 3))
    c = const(module, rand(3))
    sums = [fn.add(nodes.Add, fn.add(nodes.Relu, x), c) for _ in range(2)]
    fn.save(sums[0], "a")
    fn.save(sums[1], "b")
    fn.save(sums[1], "c")
    copy, changed = optimise(module, fn, ["cse"])
    assert changed and copy.count_kinds() == {"Add": 1, "Relu": 1, "Save": 3}


def test_cse_keeps_nodes_that_differ():
    module, fn, (x, y) = new_graph(x=(2, 3), y=(2, 3))
    fn.save(fn.add(nodes.Relu, x), "a")
    fn.save(fn.add(nodes.Relu, y), "b")
    fn.save(fn.add(nodes.LeakyRelu, x, alpha=0.1), "c")
    fn.save(fn.add(nodes.LeakyRelu, x, alpha=0.2), "d")
    unchanged(module, fn, ["cse"])


# -- fold-constants ------------------------------------------------------------------------
def test_fold_constants_turns_constant_chains_into_constants():
    module, fn, (x,) = new_graph(x=(1, 8, 6, 6))
    flat = fn.add(nodes.Splat, shape=(64 * 8 * 7 * 7,), value=0.02, elem=F32)  # 100 KB, but a weight
    filt = fn.add(nodes.Reshape, flat, shape=(64, 8, 7, 7))
    conv = fn.add(nodes.Conv, x, filt, None, kernel=(7, 7), strides=(1, 1), pads=(3, 3, 3, 3), dilations=(1, 1))
    scale = fn.add(nodes.Reshape, fn.add(nodes.Splat, shape=(64,), value=0.5, elem=F32), shape=(64, 1, 1))
    shift = fn.add(nodes.Add, const(module, rand(64, 1, 1)), const(module, rand(1, 1, 1)))
    fn.save(fn.add(nodes.Add, fn.add(nodes.Mul, conv, scale), shift), "y")
    parts = fn.create(nodes.Split, [const(module, rand(4, 2))], axis=0, sizes=(1, 3))
    fn.save(fn.add(nodes.Relu, parts.result(1)), "z")
    copy, changed = optimise(module, fn, ["fold-constants", "dce"])
    assert changed and copy.count_kinds() == {"Add": 1, "Conv": 1, "Mul": 1, "Save": 2}
    assert all(v.node.kind == "Constant" for n in copy.nodes if n.kind != "Save" for v in n.inputs[1:] if v)


def test_fold_constants_keeps_large_recipes_and_failing_kernels():
    module, fn, (x,) = new_graph(x=(1, 64, 32, 32))
    big = fn.add(nodes.Splat, shape=(64 * 32 * 32,), value=1.5, elem=F32)  # 256 KB feeding an Add
    big = fn.add(nodes.Reshape, big, shape=(1, 64, 32, 32))
    fn.save(fn.add(nodes.Add, x, big), "y")
    index = module.create_constant("i", np.array([7], np.int64)).result()
    fn.save(fn.add(nodes.Gather, const(module, rand(3)), index), "z")  # out of range: a run-time error
    kinds = fn.count_kinds()
    copy = module.clone().functions["main"]
    assert not run_passes(copy, ["fold-constants"]) and copy.count_kinds() == kinds


# -- fold-batchnorm ------------------------------------------------------------------------
def batchnorm(fn, module, value, channels, stats=None):
    stats = stats or [const(module, RNG.uniform(0.5, 2, channels)), const(module, rand(channels)),
                      const(module, rand(channels)), const(module, RNG.uniform(0.5, 2, channels))]
    return fn.add(nodes.BatchNorm, value, *stats, epsilon=1e-3)


def conv(fn, module, x, cin, cout, bias=True):
    b = const(module, rand(cout)) if bias else None
    return fn.add(nodes.Conv, x, const(module, rand(cout, cin, 3, 3)), b, kernel=(3, 3), strides=(1, 1),
                  pads=(1, 1, 1, 1), dilations=(1, 1))


@pytest.mark.parametrize("bias", [True, False])
def test_fold_batchnorm_into_conv_with_its_mul_add_chain(bias):
    module, fn, (x,) = new_graph(x=(2, 3, 5, 5))
    y = batchnorm(fn, module, conv(fn, module, x, 3, 4, bias), 4)
    y = fn.add(nodes.Mul, y, const(module, rand(4, 1, 1)))
    y = fn.add(nodes.Add, const(module, rand(1, 4, 1, 1)), y)
    fn.save(fn.add(nodes.Relu, y), "y")
    copy, changed = optimise(module, fn, ["fold-batchnorm"], rtol=1e-5, atol=1e-5)
    assert changed and copy.count_kinds() == {"Conv": 1, "Relu": 1, "Save": 1}
    assert copy.nodes[0].bias is not None


def test_fold_batchnorm_rounds_once_to_a_narrower_conv_kind():
    module = Module()
    fn = module.create_function("main")
    f16 = ElemKind.FLOAT16
    x = module.create_placeholder("x", Type(f16, (1, 3, 5, 5))).result()
    w = module.create_constant("w", rand(4, 3, 3, 3).astype(np.float16)).result()
    c = fn.add(nodes.Conv, x, w, None, kernel=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1))
    fn.save(batchnorm(fn, module, c, 4), "y")  # float32 statistics on a float16 Conv
    copy, changed = optimise(module, fn, ["fold-batchnorm"], rtol=1e-2, atol=1e-2)
    assert changed and copy.count_kinds() == {"Conv": 1, "Save": 1}
    assert copy.nodes[0].filter.type.elem is f16


@pytest.mark.parametrize("trans_b", [False, True])
def test_fold_batchnorm_into_gemm(trans_b):
    module, fn, (x,) = new_graph(x=(3, 5))
    w = const(module, rand(6, 5) if trans_b else rand(5, 6))
    gemm = fn.add(nodes.Gemm, x, w, const(module, rand(1, 6)), alpha=0.5, beta=2.0, trans_b=trans_b)
    fn.save(batchnorm(fn, module, gemm, 6), "y")
    copy, changed = optimise(module, fn, ["fold-batchnorm"], rtol=1e-5, atol=1e-5)
    assert changed and copy.count_kinds() == {"Gemm": 1, "Save": 1}


@pytest.mark.parametrize("with_add", [False, True])
def test_fold_batchnorm_into_matmul(with_add):
    module, fn, (x,) = new_graph(x=(3, 5))
    y = fn.add(nodes.MatMul, x, const(module, rand(5, 6)))
    if with_add:
        y = fn.add(nodes.Add, const(module, rand(6)), y)
    fn.save(batchnorm(fn, module, y, 6), "y")
    copy, changed = optimise(module, fn, ["fold-batchnorm"], rtol=1e-5, atol=1e-5)
    assert changed and copy.count_kinds() == {"Add": 1, "MatMul": 1, "Save": 1}


def test_fold_batchnorm_leaves_shared_producers_and_run_time_statistics():
    module, fn, (x, mean) = new_graph(x=(2, 3, 5, 5), mean=(4,))
    c = conv(fn, module, x, 3, 4)
    fn.save(batchnorm(fn, module, c, 4), "shared")
    fn.save(c, "raw")
    stats = [const(module, np.ones(4)), const(module, np.zeros(4)), mean, const(module, np.ones(4))]
    d = batchnorm(fn, module, conv(fn, module, x, 3, 4), 4, stats)
    fn.save(fn.add(nodes.Mul, d, const(module, rand(1, 1, 5, 5))), "not_per_channel")
    unchanged(module, fn, ["fold-batchnorm"])


# -- fold-pad ------------------------------------------------------------------------------
def pad(fn, x, spatial, value=0.0, mode="constant"):
    rank = len(x.type.shape)
    begins, ends = (0, 0) + spatial[:rank - 2], (0, 0) + spatial[rank - 2:]
    return fn.add(nodes.Pad, x, pads=begins + ends, value=value, mode=mode)


WINDOW = {"kernel": (3, 3), "strides": (2, 1), "pads": (1, 0, 0, 1), "dilations": (1, 1)}


def test_fold_pad_into_conv_and_pools():
    module, fn, (x,) = new_graph(x=(1, 3, 7, 6))
    c = fn.add(nodes.Conv, pad(fn, x, (1, 2, 0, 1)), const(module, rand(2, 3, 3, 3)), None, **WINDOW)
    a = fn.add(nodes.AveragePool, pad(fn, x, (2, 0, 1, 1)), count_include_pad=True, **WINDOW)
    m = fn.add(nodes.MaxPool, pad(fn, x, (0, 1, 1, 0), -math.inf), **WINDOW)
    for name, value in (("c", c), ("a", a), ("m", m)):
        fn.save(value, name)
    copy, changed = optimise(module, fn, ["fold-pad"])
    assert changed and copy.count_kinds() == {"AveragePool": 1, "Conv": 1, "MaxPool": 1, "Save": 3}
    assert [n.pads for n in copy.nodes[:3]] == [(2, 2, 0, 2), (3, 0, 1, 2), (1, 1, 1, 1)]


def test_fold_pad_leaves_other_fills_and_dims():
    module, fn, (x,) = new_graph(x=(1, 3, 7, 6))
    channel_pad = fn.add(nodes.Pad, x, pads=(0, 1, 0, 0, 0, 0, 0, 0))
    fn.save(fn.add(nodes.Conv, channel_pad, const(module, rand(2, 4, 3, 3)), None, **WINDOW), "channels")
    fn.save(fn.add(nodes.AveragePool, pad(fn, x, (1, 1, 1, 1)), **WINDOW), "excluded_pads")
    fn.save(fn.add(nodes.Conv, pad(fn, x, (1, 1, 1, 1), 1.0), const(module, rand(2, 3, 3, 3)), None,
                   **WINDOW), "ones")
    fn.save(fn.add(nodes.Conv, pad(fn, x, (1, 1, 1, 1), mode="edge"), const(module, rand(2, 3, 3, 3)), None,
                   **WINDOW), "edge")
    fn.save(fn.add(nodes.MaxPool, pad(fn, x, (1, 1, 1, 1), 0.0), **WINDOW), "zero_fill")
    indexed = fn.create(nodes.MaxPoolWithIndices, [pad(fn, x, (1, 1, 1, 1), -math.inf)], **WINDOW)
    fn.save(indexed.result(1), "indices")
    unchanged(module, fn, ["fold-pad"])


# -- sink-transpose ------------------------------------------------------------------------
def test_sink_transpose_cancels_pairs_through_elementwise_ops():
    module, fn, (x, z) = new_graph(x=(2, 3, 4), z=(2, 3, 4))
    p, inverse = (2, 0, 1), (1, 2, 0)
    left = fn.add(nodes.Relu, fn.add(nodes.Transpose, x, perm=p))
    both = fn.add(nodes.Add, left, fn.add(nodes.Transpose, z, perm=p))
    fn.save(fn.add(nodes.Transpose, fn.add(nodes.Neg, both), perm=inverse), "y")
    twice = fn.add(nodes.Transpose, fn.add(nodes.Transpose, x, perm=(1, 0, 2)), perm=(0, 2, 1))
    fn.save(fn.add(nodes.Transpose, twice, perm=(0, 1, 2)), "merged")
    copy, changed = optimise(module, fn, ["sink-transpose"])
    assert changed and copy.count_kinds() == {"Add": 1, "Neg": 1, "Relu": 1, "Save": 2, "Transpose": 1}
    assert next(n for n in copy.nodes if n.kind == "Transpose").perm == (1, 2, 0)


def test_sink_transpose_leaves_mixed_perms_and_shared_transposes():
    module, fn, (x, z) = new_graph(x=(2, 3, 4), z=(2, 3, 4))
    a, b = fn.add(nodes.Transpose, x, perm=(2, 0, 1)), fn.add(nodes.Transpose, z, perm=(2, 1, 0))
    fn.save(fn.add(nodes.Mul, a, fn.add(nodes.Reshape, b, shape=(4, 2, 3))), "mixed")
    fn.save(fn.add(nodes.Relu, a), "shared")
    unchanged(module, fn, ["sink-transpose"])


# -- merge-reshape -------------------------------------------------------------------------
def test_merge_reshape_collapses_chains():
    module, fn, (x,) = new_graph(x=(2, 3, 4))
    r = fn.add(nodes.Reshape, fn.add(nodes.Reshape, x, shape=(6, 4)), shape=(24,))
    fn.save(fn.add(nodes.Reshape, r, shape=(4, 6)), "y")
    back = fn.add(nodes.Reshape, fn.add(nodes.Reshape, x, shape=(3, 8)), shape=(2, 3, 4))
    fn.save(fn.add(nodes.Relu, fn.add(nodes.Reshape, back, shape=(2, 3, 4))), "z")
    copy, changed = optimise(module, fn, ["merge-reshape"])
    assert changed and copy.count_kinds() == {"Relu": 1, "Reshape": 1, "Save": 2}


def test_merge_reshape_keeps_a_single_reshape():
    module, fn, (x,) = new_graph(x=(2, 3, 4))
    fn.save(fn.add(nodes.Relu, fn.add(nodes.Reshape, x, shape=(6, 4))), "y")
    unchanged(module, fn, ["merge-reshape"])


# -- simplify-arithmetic -------------------------------------------------------------------
def test_simplify_arithmetic_removes_neutral_operations():
    module, fn, (x,) = new_graph(x=(2, 3))
    one = fn.add(nodes.Splat, shape=(2, 3), value=1.0, elem=F32)
    y = fn.add(nodes.Mul, one, x)
    y = fn.add(nodes.Add, y, const(module, np.zeros((1, 3)), "zero"))
    y = fn.add(nodes.Sub, y, const(module, -0.0, "minus_zero"))
    y = fn.add(nodes.Div, y, const(module, np.ones(3), "one"))
    y = fn.add(nodes.Neg, fn.add(nodes.Neg, y))
    fn.save(fn.add(nodes.Relu, fn.add(nodes.Cast, y, to=F32)), "y")
    copy, changed = optimise(module, fn, ["simplify-arithmetic", "dce"])
    assert changed and copy.count_kinds() == {"Relu": 1, "Save": 1}


def test_simplify_arithmetic_keeps_broadcasts_and_other_constants():
    module, fn, (x,) = new_graph(x=(3,))
    fn.save(fn.add(nodes.Add, x, const(module, np.zeros((2, 3)))), "broadcast")
    fn.save(fn.add(nodes.Mul, x, const(module, [1.0, 2.0, 1.0])), "not_uniform")
    fn.save(fn.add(nodes.Mul, x, fn.add(nodes.Splat, shape=(3,), value=2.0, elem=F32)), "two")
    fn.save(fn.add(nodes.Cast, x, to=ElemKind.FLOAT16), "narrowing")
    fn.save(fn.add(nodes.Neg, x), "negated")
    unchanged(module, fn, ["simplify-arithmetic"])


# -- canonicalize --------------------------------------------------------------------------
def test_canonicalize_flattens_concats():
    module, fn, (a, b, c) = new_graph(a=(2, 3), b=(2, 1), c=(2, 2))
    inner = fn.add(nodes.Concat, a, fn.add(nodes.Concat, b, axis=1), axis=1)
    fn.save(fn.add(nodes.Concat, c, inner, c, axis=1), "y")
    copy, changed = optimise(module, fn, ["canonicalize"])
    assert changed and copy.count_kinds() == {"Concat": 1, "Save": 1}
    assert len(copy.nodes[0].inputs) == 4


def test_canonicalize_keeps_other_axes_and_shared_concats():
    module, fn, (a, b) = new_graph(a=(2, 3), b=(2, 3))
    rows = fn.add(nodes.Concat, a, b, axis=0)
    fn.save(fn.add(nodes.Concat, rows, rows, axis=1), "other_axis")
    shared = fn.add(nodes.Concat, a, b, axis=1)
    fn.save(fn.add(nodes.Concat, shared, a, axis=1), "flat")
    fn.save(shared, "shared")
    unchanged(module, fn, ["canonicalize"])


# -- pipelines -----------------------------------------------------------------------------
def test_pipelines_name_registered_passes_with_reasons():
    for pipeline in PIPELINES.values():
        for entry in pipeline.entries:
            assert entry.pass_name in PASSES and entry.why


def light_model() -> onnx.ModelProto:
    """A light-zoo block: ConstantOfShape weights, a Reshape'd scale, Conv + BatchNorm + Mul + Relu."""
    def fill(name):
        return helper.make_node("ConstantOfShape", [f"{name}_shape"], [name],
                                value=numpy_helper.from_array(np.array([0.02], np.float32)))
    shapes = {"w_shape": [4, 3, 3, 3], "s_shape": [4], "b_shape": [4], "m_shape": [4], "v_shape": [4],
              "k_shape": [4], "r": [4, 1, 1]}
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in shapes.items()]
    graph = helper.make_graph(
        [fill(n) for n in "wsbmvk"] + [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
            helper.make_node("Reshape", ["k", "r"], ["kr"]),
            helper.make_node("Mul", ["n", "kr"], ["scaled"]),
            helper.make_node("Dropout", ["scaled"], ["d"]),
            helper.make_node("Relu", ["d"], ["y"])],
        "light", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_graph_optimization_leaves_conv_relu_of_a_light_model():
    module = import_model(light_model())
    fn = module.functions["main"]
    assert fn.count_kinds()["Splat"] == 6
    copy = module.clone().functions["main"]
    PassManager().run(GRAPH_OPTIMIZATION, copy)
    assert copy.count_kinds() == {"Conv": 1, "Relu": 1, "Save": 1}
    feeds = {"x": rand(1, 3, 6, 6)}
    np.testing.assert_allclose(evaluate(copy, feeds)["y"], evaluate(fn, feeds)["y"], rtol=1e-5, atol=1e-6)
