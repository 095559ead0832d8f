"""Operator stacking: a chain of element-wise instructions becomes one loop, with the same numbers."""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from cpu_util import check, make, run_both, run_on_avx2
from glowsdk.graph import ElemKind
from glowsdk.graph.nodes import elementwise as ew, linalg

F32 = ElemKind.FLOAT32
CHAIN = [ew.Add, ew.Mul, ew.Max, ew.Tanh, ew.Sub, ew.Exp, ew.Min, ew.Div]


def chain(kinds):
    """x0 through `kinds` in order, binary ones taking x1 (broadcast over rows) as the other side."""
    def build(fn, v):
        value = v[0]
        for kind in kinds:
            binary = len(kind.spec.operands) == 2
            value = fn.add(kind, value, v[1]) if binary else fn.add(kind, value)
        return [value]
    return build


def kernel_bodies(llvm_ir: str) -> dict[str, str]:
    """The text of each kernel function of a module, by name."""
    return {m.group(1): m.group(2) for m in re.finditer(r'define internal i32 @"?([^"(]+)"?\(.*?\n\{\n(.*?)\n\}',
                                                      llvm_ir, re.S) if not re.search(r"\.call(\.\d+)?$", m.group(1))}


def loop_count(body: str) -> int:
    return len(re.findall(r"^\"?[\w.]+\.head\"?:", body, re.M))


@pytest.mark.parametrize("order", [CHAIN, CHAIN[::-1], [ew.Exp, ew.Tanh, ew.Add, ew.Add, ew.Mul]])
def test_chain_is_one_loop_with_the_same_numbers(order):
    compiled = check([((16, 33), F32), ((33,), F32)], chain(order))
    stacks = [s for s in compiled.steps if len(s.instrs) > 1]
    assert len(stacks) == 1 and [i.kind for i in stacks[0].instrs] == [k.spec.name for k in order]
    bodies = kernel_bodies(compiled.llvm_ir)
    assert len(bodies) == 1
    body = next(iter(bodies.values()))
    # one loop nest, rows x columns (x1 broadcasts over rows, so the dims cannot merge)
    assert loop_count(body) == 2 and body.count("d0.head:") == 1
    # the intermediates stay in registers: one store, of the chain's final result
    assert body.count("store float") == 1


@pytest.mark.parametrize("pair", list(itertools.permutations([ew.Add, ew.Mul, ew.Tanh, ew.Sqrt], 2)))
def test_every_pair_stacks_generically(pair):
    feeds = {"x0": np.abs(np.random.default_rng(3).standard_normal((5, 7))).astype(np.float32) + 0.5,
             "x1": np.full((7,), 0.75, np.float32)}
    compiled = check([((5, 7), F32), ((7,), F32)], chain(pair), feeds=feeds)
    assert [len(s.instrs) for s in compiled.steps] == [2]


def test_same_shape_chain_is_one_flat_loop():
    compiled = check([((16, 33), F32), ((16, 33), F32)], chain(CHAIN))
    assert loop_count(next(iter(kernel_bodies(compiled.llvm_ir).values()))) == 1


def test_stacking_off_gives_one_kernel_per_instruction():
    compiled = check([((16, 33), F32), ((33,), F32)], chain(CHAIN), stacking=False)
    assert len(kernel_bodies(compiled.llvm_ir)) == len(CHAIN)


def test_a_matmul_breaks_the_stack_and_results_stay_stored():
    def build(fn, v):
        a = fn.add(ew.Tanh, v[0])
        b = fn.add(ew.Exp, a)
        m = fn.add(linalg.MatMul, b, v[1])
        return [a, fn.add(ew.Add, m, m)]
    compiled = check([((4, 6), F32), ((6, 4), F32)], build, accumulates=True)
    assert [len(s.instrs) for s in compiled.steps] == [2, 1, 1]
    assert not compiled.steps[0].unstored  # tanh writes an output, exp feeds the matmul


def test_different_shapes_do_not_stack():
    def build(fn, v):
        return [fn.add(ew.Add, fn.add(ew.Exp, v[0]), v[1])]
    compiled = check([((1, 5), F32), ((4, 5), F32)], build)
    assert all(len(s.instrs) == 1 for s in compiled.steps)


def test_stacked_results_match_unstacked_on_a_model_fragment():
    fn = make([((8, 40), F32), ((40,), F32)], chain(CHAIN))
    feeds = {"x0": np.random.default_rng(5).standard_normal((8, 40)).astype(np.float32),
             "x1": np.random.default_rng(6).standard_normal(40).astype(np.float32)}
    stacked, _, _ = run_both(fn, feeds)
    separate, _, _ = run_both(fn, feeds, stacking=False)
    np.testing.assert_array_equal(stacked["y0"], separate["y0"])


def _onnx_convs(nodes, outputs, channels=8, size=12, seed=0):
    """A model over x (1, channels, size, size) with a 1x1 and a 3x3 Conv's weights w1, b1, w3, b3;
    `nodes` and `outputs` (names, all of x's shape) describe the rest. Seeded weights and input."""
    import onnx
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(seed)
    shape = [1, channels, size, size]
    weights = [numpy_helper.from_array(rng.standard_normal((channels, channels, k, k)).astype(np.float32) / 4, f"w{k}")
               for k in (1, 3)]
    weights += [numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), f"b{k}") for k in (1, 3)]
    weights.append(numpy_helper.from_array(np.array(6.0, np.float32), "six"))
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, shape) for o in outputs],
                              weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    return model, {"x": (3 * rng.standard_normal(shape)).astype(np.float32)}


def _against_onnxruntime(model, feeds):
    """Every output on cpu against onnxruntime's; the cpu steps as (kind, epilogue kinds)."""
    import onnxruntime as ort

    import glowsdk

    compiled = glowsdk.compile(glowsdk.load(model), "cpu", cache=False)
    got = compiled.run(feeds)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for output, want in zip(session.get_outputs(), session.run(None, feeds)):
        np.testing.assert_allclose(got[output.name], want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))
    return [("+".join(i.kind for i in step.instrs), [i.kind for i in step.epilogue or ()])
            for step in compiled.compiled.steps]


def test_hardswish_runs_in_the_conv_store_its_second_tensor_in_vectors_only():
    """Conv -> HardSwish twice: x / 6 + 0.5 clamped lands in a tensor the next kernel reuses, so
    the convolutions apply the whole HardSwish as they store (no element-wise step left)."""
    from onnx import helper

    nodes = [helper.make_node("Conv", ["x", "w3", "b3"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("HardSwish", ["c1"], ["h1"]),
             helper.make_node("Conv", ["h1", "w1", "b1"], ["c2"], kernel_shape=[1, 1]),
             helper.make_node("HardSwish", ["c2"], ["h2"]),
             helper.make_node("Conv", ["h2", "w1", "b1"], ["y"], kernel_shape=[1, 1])]
    steps = _against_onnxruntime(*_onnx_convs(nodes, ["y"]))
    assert [kinds for kinds, _ in steps] == ["Conv"] * 3
    assert [epilogue for _, epilogue in steps][:2] == [["Div", "Add", "Max", "Min", "Mul"]] * 2


def test_a_second_tensor_read_in_place_next_is_stored():
    """Conv -> SiLU: the sigmoid's -x lands in a tensor the Exp after it reads and overwrites in
    place; the Exp cannot run in the Conv's store, so -x must be stored (an instruction that reads
    a tensor before writing it keeps it alive)."""
    from onnx import helper

    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], kernel_shape=[1, 1]),
             helper.make_node("Sigmoid", ["c"], ["s"]), helper.make_node("Mul", ["c", "s"], ["y"])]
    _against_onnxruntime(*_onnx_convs(nodes, ["y"]))


def test_a_second_tensor_read_later_keeps_its_own_step():
    """Conv, then t = conv / 6 and y = conv * t with t an output too: t must be stored, so the
    Conv applies neither (only in-place runs and unread tensors go into its store)."""
    from onnx import helper

    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], kernel_shape=[1, 1]),
             helper.make_node("Div", ["c", "six"], ["t"]), helper.make_node("Mul", ["c", "t"], ["y"])]
    steps = _against_onnxruntime(*_onnx_convs(nodes, ["y", "t"]))
    assert ("Conv", []) in steps and not any("Div" in epilogue for _, epilogue in steps)


def _matmul_gelu(seed: int = 0, bias: bool = False):
    """x (1 x 6 x 6 x 24, channels last, as ConvNeXt's blocks run) @ w (+ a bias of 40, as ViT's Linear
    layers), then GELU as PyTorch exports it below opset 20 (Div by sqrt 2, Erf, Add 1, Mul by x, Mul
    by 0.5), then @ w2."""
    import onnx
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(seed)
    weights = [numpy_helper.from_array(rng.standard_normal((24, 40)).astype(np.float32) / 4, "w"),
               numpy_helper.from_array(rng.standard_normal((40, 24)).astype(np.float32) / 4, "w2"),
               numpy_helper.from_array(rng.standard_normal(40).astype(np.float32), "b")]
    weights += [numpy_helper.from_array(np.array(v, np.float32), name)
                for name, v in (("root2", np.sqrt(2)), ("one", 1.0), ("half", 0.5))]
    linear = [helper.make_node("MatMul", ["x", "w"], ["p"]), helper.make_node("Add", ["p", "b"], ["m"])] if bias \
        else [helper.make_node("MatMul", ["x", "w"], ["m"])]
    nodes = [*linear, helper.make_node("Div", ["m", "root2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]), helper.make_node("Add", ["e", "one"], ["a"]),
             helper.make_node("Mul", ["m", "a"], ["g"]), helper.make_node("Mul", ["g", "half"], ["h"]),
             helper.make_node("MatMul", ["h", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 6, 6, 24])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 6, 6, 24])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return model, {"x": (2 * rng.standard_normal((1, 6, 6, 24))).astype(np.float32)}


def test_gelu_runs_in_the_matmul_store():
    """The GELU's erf(x / sqrt 2) + 1 lands in a tensor nothing reads afterwards and the product in
    the MatMul's result, seen through a reshaping view (rows x columns as 1 x H x W x C): the MatMul
    applies the whole GELU as it stores, its Erf on vectors (vmath.py)."""
    steps = _against_onnxruntime(*_matmul_gelu())
    assert steps[0] == ("MatMul", ["Mul", "Erf", "Mul", "Add", "Mul"]), steps
    assert [kinds for kinds, _ in steps] == ["MatMul", "MatMul"]


def test_bias_and_gelu_run_in_the_matmul_store():
    """A bias of one value per column (40 columns: two AVX-512 vectors and a masked one per row) is
    read at each vector's column, so a Linear layer's bias Add and its GELU both run in the store."""
    steps = _against_onnxruntime(*_matmul_gelu(bias=True))
    assert steps[0] == ("MatMul", ["Add", "Mul", "Erf", "Mul", "Add", "Mul"]), steps
    assert [kinds for kinds, _ in steps] == ["MatMul", "MatMul"]


def test_a_per_column_source_stays_out_of_a_conv_store():
    """A Conv's store vectors run along positions across the rows of its last dim: an Add of one value
    per column of W after it is a step of its own."""
    from onnx import helper, numpy_helper

    model, feeds = _onnx_convs([helper.make_node("Conv", ["x", "w1", "b1"], ["c"], kernel_shape=[1, 1]),
                                helper.make_node("Add", ["c", "row"], ["y"])], ["y"])
    row = np.arange(12, dtype=np.float32)
    model.graph.initializer.append(numpy_helper.from_array(row, "row"))
    steps = _against_onnxruntime(model, feeds)
    assert ("Conv", []) in steps and ("Add", []) in steps, steps


def test_gelu_in_the_matmul_store_on_avx2():
    """The same on code compiled without AVX-512 (8 lanes), in a child process."""
    run_on_avx2(__file__, "t.test_gelu_runs_in_the_matmul_store()\n"
                "t.test_bias_and_gelu_run_in_the_matmul_store()\n")


def test_silu_and_tanh_run_in_the_conv_store_row_by_row():
    """Conv -> SiLU (x * Sigmoid x, its exp a vmath polynomial) and Conv -> Tanh: a costly epilogue
    runs once per vector column of each tile, in a loop over the tile's rows after their plain store
    (gemm.Epilogue.stored), on 13 channels (an edge tile of rows) and 11 x 11 pixels (a masked tail)."""
    from onnx import helper

    nodes = [helper.make_node("Conv", ["x", "w3", "b3"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c1"], ["s"]), helper.make_node("Mul", ["c1", "s"], ["h"]),
             helper.make_node("Conv", ["h", "w1", "b1"], ["c2"], kernel_shape=[1, 1]),
             helper.make_node("Tanh", ["c2"], ["t"]), helper.make_node("Conv", ["t", "w1", "b1"], ["y"])]
    steps = _against_onnxruntime(*_onnx_convs(nodes, ["y"], channels=13, size=11))
    assert [kinds for kinds, _ in steps] == ["Conv", "Conv", "Conv"], steps
    assert "Exp" in steps[0][1] and steps[1][1] == ["Tanh"], steps


def test_silu_and_tanh_in_the_conv_store_on_avx2():
    """The same on code compiled without AVX-512 (8 lanes), in a child process."""
    run_on_avx2(__file__, "t.test_silu_and_tanh_run_in_the_conv_store_row_by_row()\n")
