"""The hand-blocked kernels (GEMM micro-kernel, packing, conv strategies, epilogues, threads)
against the interpreter. Tolerance: ACCUMULATE_TOL of cpu_util (FMA and blocking reorder the sums)."""
from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np
import pytest
from cpu_util import check, make, run_both, threaded

from glowsdk.backends import get_backend
from glowsdk.backends.cpu.codegen.target import VectorTarget
from glowsdk.backends.cpu.kernels import gemm as gemm_module
from glowsdk.backends.cpu.kernels.conv import conv_strategy
from glowsdk.backends.cpu.kernels.packing import pack_column_panels, pack_row_panels
from glowsdk.compiler.backend import CompileOptions
from glowsdk.compiler.pipeline import compile_function
from glowsdk.errors import GlowError
from glowsdk.graph import ElemKind
from glowsdk.graph.nodes import elementwise as ew
from glowsdk.graph.nodes import linalg, nn, reduce, tensor

F32 = ElemKind.FLOAT32

CONVS = [  # name, input shape, filter shape, attributes, the strategy the rule picks
    ("pointwise-edges", (1, 7, 5, 9), (13, 7, 1, 1), dict(strides=[1, 1], pads=[0, 0, 0, 0]), "pointwise"),
    ("pointwise-batch", (2, 16, 8, 8), (24, 16, 1, 1), dict(strides=[1, 1], pads=[0, 0, 0, 0]), "pointwise"),
    ("same-3x3", (1, 5, 11, 13), (10, 5, 3, 3), dict(strides=[1, 1], pads=[1, 1, 1, 1]), "im2col"),
    ("valid-3x3", (1, 4, 9, 10), (9, 4, 3, 3), dict(strides=[1, 1], pads=[0, 0, 0, 0]), "im2col"),
    ("stride-2", (2, 3, 15, 14), (8, 3, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), "im2col"),
    ("stem-7x7", (1, 3, 20, 20), (16, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3]), "im2col"),
    ("stem-row-strided", (1, 3, 20, 64), (16, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3]), "im2col"),
    ("row-strided-3x3", (2, 4, 9, 63), (10, 4, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), "im2col"),
    ("pointwise-stride-2", (1, 6, 9, 9), (12, 6, 1, 1), dict(strides=[2, 2], pads=[0, 0, 0, 0]), "im2col"),
    ("asymmetric-dilated", (1, 4, 12, 11), (6, 4, 3, 2), dict(strides=[1, 2], pads=[2, 0, 1, 1],
                                                              dilations=[2, 1]), "im2col"),
    ("grouped", (1, 6, 8, 7), (9, 2, 3, 3), dict(strides=[1, 1], pads=[1, 1, 1, 1], group=3), "im2col"),
    ("depthwise", (1, 8, 9, 9), (8, 1, 3, 3), dict(strides=[1, 1], pads=[1, 1, 1, 1], group=8), "depthwise"),
    ("depthwise-7x7-small-plane", (2, 6, 7, 7), (6, 1, 7, 7), dict(strides=[1, 1], pads=[3, 3, 3, 3], group=6),
     "depthwise"),
    ("depthwise-asymmetric-dilated", (1, 4, 10, 13), (4, 1, 3, 5),
     dict(strides=[1, 1], pads=[2, 0, 1, 3], dilations=[2, 1], group=4), "depthwise"),
    ("depthwise-multiplier", (1, 3, 8, 9), (6, 1, 5, 5), dict(strides=[1, 1], pads=[2, 2, 2, 2], group=3),
     "depthwise"),
    ("depthwise-one-d", (2, 5, 40), (5, 1, 9), dict(strides=[1], pads=[4, 4], group=5), "depthwise"),
    ("depthwise-stride-2", (1, 8, 9, 9), (8, 1, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], group=8), "depthwise"),
    ("depthwise-stride-2-odd-asymmetric", (2, 6, 13, 11), (6, 1, 5, 5),
     dict(strides=[2, 2], pads=[2, 1, 1, 2], group=6), "depthwise"),
    ("depthwise-strides-dilated", (1, 4, 16, 17), (4, 1, 3, 3),
     dict(strides=[2, 3], pads=[1, 0, 0, 2], dilations=[2, 1], group=4), "depthwise"),
    ("depthwise-stride-5", (1, 4, 16, 16), (4, 1, 3, 3), dict(strides=[5, 5], pads=[1, 1, 1, 1], group=4), "direct"),
    ("one-d", (2, 5, 40), (7, 5, 3), dict(strides=[1], pads=[1, 1]), "im2col"),
    ("one-channel-long-kernel", (1, 1, 400), (16, 1, 80), dict(strides=[16], pads=[0, 0]), "im2col"),
    ("one-channel-long-padded", (2, 1, 301), (12, 1, 20), dict(strides=[4], pads=[3, 5]), "im2col"),
    ("one-channel-short-kernel", (1, 1, 9, 9), (8, 1, 3, 3), dict(strides=[1, 1], pads=[1, 1, 1, 1]), "depthwise"),
    ("one-channel-short-strided", (1, 1, 9, 9), (8, 1, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), "depthwise"),
]


def constant_conv(image, weights, attrs, bias=True, seed=0):
    """A function over placeholder x0 convolving with constant (compile-time packed) weights."""
    rng = np.random.default_rng(seed)
    rank = len(weights) - 2
    attrs = {"dilations": [1] * rank, "group": 1, **attrs}

    def build(fn, v):
        module = fn.module
        w = module.create_constant("w", rng.standard_normal(weights).astype(np.float32)).result()
        b = module.create_constant("b", rng.standard_normal(weights[0]).astype(np.float32)).result() \
            if bias else None
        return [fn.add(nn.Conv, v[0], w, b, kernel=list(weights[2:]), **attrs)]
    return build, attrs


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("name, image, weights, attrs, strategy", CONVS, ids=[c[0] for c in CONVS])
def test_conv_strategies(name, image, weights, attrs, strategy, bias):
    build, _ = constant_conv(image, weights, attrs, bias)
    compiled = check([(image, F32)], build, accumulates=True)
    (conv,) = [i for i in compiled.program.ir.instructions if i.kind == "Conv"]
    assert conv_strategy(conv) == strategy
    packed = [w for w in compiled.program.ir.weights.values() if w.name.endswith(".panels")]
    assert len(packed) == (strategy in ("pointwise", "im2col"))  # only GEMMs pack the filter


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_conv_packs_column_tiles_in_blocks_that_row_tiles_sweep(threads):
    """A 3x3 convolution of 32 channels (B panels of 288 x NR floats, a few to a block) over 40 x 41
    outputs: 26 column tiles of 64 (with AVX-512), so several blocks, a partial last block and an
    edge tile; 21 filters: an edge row tile. Against the interpreter, on 1 to 3 threads (which
    share the 2 x 26 (image, column tile) units, 3 threads across the image boundary)."""
    from glowsdk.backends.cpu.kernels.gemm import Gemm, column_block
    gemm = Gemm(21, 40 * 41, 288)
    block = column_block(gemm, 4 * 288 * gemm.tile_columns)
    assert 1 < block < gemm.column_tiles and gemm.edge_columns() < gemm.tile_columns and gemm.rows % gemm.tile_rows
    build, _ = constant_conv((2, 32, 40, 41), (21, 32, 3, 3), dict(strides=[1, 1], pads=[1, 1, 1, 1]))
    check([((2, 32, 40, 41), F32)], build, accumulates=True, threads=threads)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("kernel", [1, 3])
def test_first_row_tile_packs_the_panel_for_any_share_of_row_tiles(threads, kernel):
    """A 7 x 7 output (one column tile) of 13 or 29 filters: threads share the row tiles, and each
    thread's first row tile packs the panel as it computes (gemm.Source): on 2 threads the second
    thread's only row tile is the edge tile, on 3 some thread's share starts with a full tile and
    ends with the edge one. Against the interpreter."""
    for filters in (13, 29):
        build, _ = constant_conv((1, 16, 7, 7), (filters, 16, kernel, kernel),
                                 dict(strides=[1, 1], pads=[kernel // 2] * 4))
        check([((1, 16, 7, 7), F32)], build, accumulates=True, threads=threads)


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("constant", [True, False])
def test_what_comes_from_memory_is_prefetched(tmp_path, constant, stride):
    """A compile-time packed filter is read once per run from memory, so its panel is prefetched
    ahead of the k loop (a filter computed at run time is read in place and is not); a stride-1
    window's input is read by the first pass (gemm.Source), which prefetches it too (a strided
    window's is packed by a pass of its own, which does not)."""
    image, weights = (1, 16, 12, 12), (24, 16, 3, 3)
    attrs = dict(strides=[stride, stride], pads=[1, 1, 1, 1])
    if constant:
        build, _ = constant_conv(image, weights, attrs)
        inputs = [(image, F32)]
    else:
        def build(fn, v):
            return [fn.add(nn.Conv, v[0], v[1], None, kernel=[3, 3], dilations=[1, 1], group=1, **attrs)]
        inputs = [(image, F32), (weights, F32)]
    dump = tmp_path / "conv.ll"
    check(inputs, build, accumulates=True, dump_llvm=str(dump))
    assert ("llvm.prefetch" in dump.read_text()) == (constant or stride == 1)


def _misaligned(array: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of `array` starting 4 bytes past a 16-byte boundary."""
    raw = np.empty(array.nbytes + 32, np.uint8)
    start = (-raw.ctypes.data % 16) + 4
    out = raw[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


@pytest.mark.parametrize("threads", [1, 2])
def test_inputs_are_read_in_place_or_copied_and_outputs_are_new_arrays(threads):
    """Inputs in any layout numpy gives (contiguous, a transposed view, misaligned, a cast float64)
    against the interpreter; the inputs are left as they were, each run returns new arrays that a
    later run does not overwrite, and the same input arrays changed in place are read afresh."""
    def build(fn, v):
        return [fn.add(ew.Add, v[0], v[1]), fn.add(ew.Neg, v[2]), fn.add(ew.Mul, v[0], v[0])]
    inputs = [((301, 1024), F32), ((301, 1024), F32), ((5, 7), F32)]
    fn = make(inputs, build)
    rng = np.random.default_rng(0)
    plain = {f"x{i}": rng.standard_normal(shape).astype(np.float32) for i, (shape, _) in enumerate(inputs)}
    odd = {"x0": _misaligned(plain["x0"]), "x1": np.asfortranarray(plain["x1"]),
           "x2": plain["x2"].astype(np.float64)}
    assert odd["x0"].ctypes.data % 16 and not odd["x1"].flags.c_contiguous
    got, want, compiled = run_both(fn, plain, threads=threads)
    kept = {name: array.copy() for name, array in plain.items()}
    for feeds in (odd, plain):
        again = compiled.execute(feeds)
        for name in want:
            np.testing.assert_array_equal(again[name], want[name])
            assert not np.shares_memory(again[name], got[name])
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])
    for name, array in plain.items():
        np.testing.assert_array_equal(array, kept[name])
    plain["x0"] *= 2  # the same arrays again, changed in place: read afresh
    plain["x2"][0] = 7
    want = compile_function(fn, get_backend("interpreter")).execute(plain)
    again = compiled.execute(plain)
    for name in want:
        np.testing.assert_array_equal(again[name], want[name])
    compiled.close()


@pytest.mark.parametrize("threads", [2, 3])
def test_threads_share_large_copies_and_each_concat_part_once(threads):
    """Transpose, Slice, Expand and a Concat of a large and a small part (the Concat shares both,
    as it decides for all its parts), on 2 and 3 threads, against the interpreter."""
    def build(fn, v):
        x, small = v
        return [fn.add(tensor.Transpose, x, perm=[2, 0, 1]),
                fn.add(tensor.Slice, x, starts=[0, 1, 399], ends=[3, 120, -1], steps=[1, 1, -1]),
                fn.add(tensor.Expand, fn.add(tensor.Slice, x, starts=[0, 0, 0], ends=[3, 1, 400], steps=[1, 1, 1]),
                       shape=[3, 120, 400]),
                fn.add(tensor.Concat, x, small, axis=1)]
    check([((3, 120, 400), F32), ((3, 2, 400), F32)], build, threads=threads)


@pytest.mark.parametrize("threads", [2, 3])
def test_threads_share_a_squeeze_and_excitation_block(threads):
    """A global average pool (ReduceSum over the trailing axes: threads share its 96 channels, a
    float16 one accumulating in float32), the channel scales broadcast over the planes, and a
    hard-swish-like stack over 96 x 7 x 7 = 4704 elements (elementwise.SHARED_ELEMENTS): on 2 and
    3 threads, against the interpreter."""
    def build(fn, v):
        x, half = v
        pooled = fn.add(reduce.ReduceSum, x, axes=[2, 3], keepdims=True)
        scaled = fn.add(ew.Mul, x, fn.add(ew.Sigmoid, pooled))
        gate = fn.add(ew.Clip, fn.add(ew.Add, scaled, fn.add(ew.Mul, scaled, scaled)), min=0.0, max=6.0)
        return [fn.add(ew.Mul, scaled, gate), fn.add(reduce.ReduceSum, half, axes=[1, 2], keepdims=False)]
    check([((1, 96, 7, 7), F32), ((24, 9, 9), ElemKind.FLOAT16)], build, accumulates=True, threads=threads)


def test_conv_add_relu_run_in_the_conv_store():
    image, weights = (1, 8, 10, 10), (16, 8, 3, 3)
    conv, _ = constant_conv(image, weights, dict(strides=[1, 1], pads=[1, 1, 1, 1]))

    def build(fn, v):
        (y,) = conv(fn, v)
        summed = fn.add(ew.Add, y, v[1])
        relu = fn.add(ew.Max, summed, fn.module.create_constant("zero", np.zeros((), np.float32)).result())
        return [fn.add(ew.Tanh, relu)]  # a consumer, so the Add and Max work in place on the Conv's result

    compiled = check([(image, F32), ((1, 16, 10, 10), F32)], build, accumulates=True)
    kinds = [(step.instrs[0].kind, [i.kind for i in step.epilogue or ()]) for step in compiled.steps]
    assert ("Conv", ["Add", "Max"]) in kinds


@pytest.mark.parametrize("strides, threads", [([1, 1], 1), ([2, 2], 1), ([2, 2], 2)])
def test_depthwise_runs_a_residual_add_and_a_clip_in_its_store(strides, threads):
    image, weights = (2, 6, 11, 13), (6, 1, 3, 3)
    conv, _ = constant_conv(image, weights, dict(strides=strides, pads=[1, 1, 1, 1], group=6))
    out = (2, 6, 11 // strides[0] + 11 % strides[0], 13 // strides[1] + 13 % strides[1])

    def build(fn, v):
        (y,) = conv(fn, v)
        module = fn.module
        low = module.create_constant("low", np.zeros((), np.float32)).result()
        high = module.create_constant("high", np.full((), 1.5, np.float32)).result()
        clipped = fn.add(ew.Min, fn.add(ew.Max, fn.add(ew.Add, y, v[1]), low), high)
        return [fn.add(ew.Tanh, clipped)]  # a consumer, so the Add, Max and Min work in place

    compiled = check([(image, F32), (out, F32)], build, accumulates=True, threads=threads)
    kinds = [(step.instrs[0].kind, [i.kind for i in step.epilogue or ()]) for step in compiled.steps]
    assert ("Conv", ["Add", "Max", "Min"]) in kinds


def test_relu_with_a_scalar_is_fused():
    image, weights = (1, 4, 6, 6), (8, 4, 1, 1)
    conv, _ = constant_conv(image, weights, dict(strides=[1, 1], pads=[0, 0, 0, 0]))

    def build(fn, v):
        (y,) = conv(fn, v)
        zero = fn.module.create_constant("zero", np.zeros((), np.float32)).result()
        return [fn.add(ew.Sqrt, fn.add(ew.Max, y, zero))]

    feeds = {"x0": np.random.default_rng(3).standard_normal(image).astype(np.float32)}
    compiled = check([(image, F32)], build, accumulates=True, feeds=feeds)
    assert any(step.epilogue for step in compiled.steps)
    assert compiled.execute(feeds)["y0"].min() == 0.0  # sqrt(-x) would be NaN


@pytest.mark.parametrize("batch, rows, inner, columns", [((), 1, 300, 70), ((), 9, 17, 49), ((), 16, 64, 96),
                                                          ((), 3, 5, 1), ((3,), 2, 40, 70), ((2,), 1, 33, 10)])
def test_matmul_constant_weights_are_packed(batch, rows, inner, columns):
    """Constant right operands, packed into panels (the edge tile's narrower), one set per batch."""
    rng = np.random.default_rng(1)

    def build(fn, v):
        w = fn.module.create_constant("fc", rng.standard_normal((*batch, inner, columns)).astype(np.float32)).result()
        return [fn.add(linalg.MatMul, v[0], w)]

    compiled = check([((*batch, rows, inner), F32)], build, accumulates=True)
    assert any(w.name.endswith(".panels") for w in compiled.program.ir.weights.values())


def test_pack_panels_layout():
    matrix = np.arange(5 * 3, dtype=np.float32).reshape(5, 3)
    rows = pack_row_panels(matrix, 2)  # [3 tiles, K=3, MR=2]
    assert rows.shape == (3, 3, 2)
    for m in range(6):
        for k in range(3):
            assert rows[m // 2, k, m % 2] == (matrix[m, k] if m < 5 else 0)
    columns = pack_column_panels(matrix.T, 4, 4)  # K=3 x N=5 -> [3, 4] then the edge tile's [3, 4]
    assert columns.shape == (2 * 3 * 4,)
    for n in range(8):
        for k in range(3):
            assert columns[(n // 4) * 12 + k * 4 + n % 4] == (matrix.T[k, n] if n < 5 else 0)
    wide = np.arange(3 * 10, dtype=np.float32).reshape(3, 10)  # K=3 x N=10, NR=8, 2 lanes: [3, 8] then [3, 2]
    packed = pack_column_panels(wide, 8, 2)
    assert packed.shape == (3 * 8 + 3 * 2,)
    assert np.array_equal(packed[:24].reshape(3, 8), wide[:, :8])
    assert np.array_equal(packed[24:].reshape(3, 2), wide[:, 8:])


@pytest.mark.parametrize("target", [VectorTarget(8, 16, 32768, 1 << 20), VectorTarget(4, 16, 32768, 1 << 20)],
                         ids=["avx2-shape", "sse-neon-shape"])
def test_narrower_vector_shapes_compute_the_same(monkeypatch, target):
    """The micro-kernel and packers on the vector shapes of other hosts (LLVM legalises them here)."""
    monkeypatch.setattr(gemm_module, "host_vectors", lambda: target)
    for _, image, weights, attrs, _ in (CONVS[0], CONVS[4], CONVS[8]):
        build, _ = constant_conv(image, weights, attrs)
        check([(image, F32)], build, accumulates=True)
    check([((5, 33), F32), ((33, 19), F32)], lambda fn, v: [fn.add(linalg.MatMul, v[0], v[1])], accumulates=True)


def small_network(fn, v):
    """Conv (packed, im2col) -> ReLU -> depthwise conv (stride 2, phase planes) -> pointwise conv."""
    rng = np.random.default_rng(2)
    module = fn.module

    def constant(name, shape):
        return module.create_constant(name, rng.standard_normal(shape).astype(np.float32)).result()

    y = fn.add(nn.Conv, v[0], constant("w1", (16, 3, 3, 3)), constant("b1", (16,)), kernel=[3, 3],
               strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1], group=1)
    y = fn.add(ew.Max, y, module.create_constant("zero", np.zeros((), np.float32)).result())
    y = fn.add(nn.Conv, y, constant("w2", (16, 1, 3, 3)), None, kernel=[3, 3], strides=[2, 2],
               pads=[1, 1, 1, 1], dilations=[1, 1], group=16)
    y = fn.add(nn.Conv, y, constant("w3", (32, 16, 1, 1)), constant("b3", (32,)), kernel=[1, 1],
               strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1], group=1)
    return [y]


@pytest.mark.parametrize("threads", [2, 3])
def test_threads_give_identical_results(threads):
    fn = make([((2, 3, 18, 18), F32)], small_network)
    feeds = {"x0": np.random.default_rng(4).standard_normal((2, 3, 18, 18)).astype(np.float32)}
    single, want, _ = run_both(fn, feeds)
    many = compile_function(fn, get_backend("cpu"), CompileOptions(extra=threaded(threads)))
    for _ in range(3):
        got = many.execute(feeds)
        np.testing.assert_array_equal(got["y0"], single["y0"])
    scale = float(np.abs(want["y0"]).max())
    np.testing.assert_allclose(single["y0"], want["y0"], rtol=0, atol=1e-4 * scale)


@pytest.mark.parametrize("value", [0, 17, "2", True])
def test_bad_thread_counts_are_refused(value):
    fn = make([((2, 3), F32)], lambda fn, v: [fn.add(ew.Tanh, v[0])])
    with pytest.raises(GlowError, match="threads"):
        compile_function(fn, get_backend("cpu"), CompileOptions(extra={"threads": value}))


def deep_network(fn, v):
    """A late-layer shape at batch 1: 7 x 7 outputs are two column tiles, 64 filters eight row
    tiles, so threads share rows (gemm.splits_rows); then a large element-wise step they share."""
    module, rng = fn.module, np.random.default_rng(5)
    weights = module.create_constant("w", rng.standard_normal((64, 32, 3, 3)).astype(np.float32)).result()
    y = fn.add(nn.Conv, v[0], weights, None, kernel=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
               dilations=[1, 1], group=1)
    return [y, fn.add(ew.Tanh, fn.add(ew.Mul, v[1], v[1]))]


@pytest.mark.parametrize("threads", [2, 3])
def test_threads_share_rows_and_element_wise_loops_with_identical_results(threads):
    assert gemm_module.splits_rows(gemm_module.Gemm(64, 49, 288))
    rng = np.random.default_rng(6)
    feeds = {"x0": rng.standard_normal((1, 32, 7, 7)).astype(np.float32),
             "x1": rng.standard_normal((32, 4096)).astype(np.float32)}
    fn = make([((1, 32, 7, 7), F32), ((32, 4096), F32)], deep_network)
    single, want, _ = run_both(fn, feeds)
    many = compile_function(fn, get_backend("cpu"), CompileOptions(extra=threaded(threads)))
    for _ in range(3):
        got = many.execute(feeds)
        for name in single:
            np.testing.assert_array_equal(got[name], single[name])
    np.testing.assert_allclose(single["y0"], want["y0"], rtol=0, atol=1e-4 * float(np.abs(want["y0"]).max()))
    np.testing.assert_allclose(single["y1"], want["y1"], rtol=1e-6, atol=1e-6)


def test_a_failing_run_on_the_thread_pool_raises_and_closing_stops_the_pool():
    fn = make([((64, 4096), F32), ((2,), ElemKind.INT64)],
              lambda fn, v: [fn.add(tensor.Gather, fn.add(ew.Tanh, v[0]), v[1], axis=0)])
    compiled = compile_function(fn, get_backend("cpu"), CompileOptions(extra=threaded(2)))
    rng = np.random.default_rng(7)
    x = rng.standard_normal((64, 4096)).astype(np.float32)
    before = threading.active_count()
    good = compiled.execute({"x0": x, "x1": np.array([3, -1])})
    np.testing.assert_allclose(good["y0"], np.tanh(x[[3, -1]]), rtol=1e-6, atol=1e-6)
    assert threading.active_count() == before + 1  # a worker, parked between runs
    with pytest.raises(GlowError, match="Gather index"):
        compiled.execute({"x0": x, "x1": np.array([3, 64])})
    compiled.close()
    assert threading.active_count() == before


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="thread affinity is a Linux interface")
@pytest.mark.parametrize("pin", [True, False])
def test_pool_workers_are_pinned_to_their_cpu_unless_asked_not_to(pin):
    fn = make([((64, 256), F32)], lambda fn, v: [fn.add(ew.Tanh, v[0])])
    compiled = compile_function(fn, get_backend("cpu"), CompileOptions(extra=threaded(3, pin_threads=pin)))
    compiled.execute({"x0": np.zeros((64, 256), np.float32)})
    allowed = sorted(os.sched_getaffinity(0))
    workers = {t.native_id: t.name for t in threading.enumerate() if t.name.startswith("glowsdk-cpu-")}
    assert len(workers) == 2
    for native_id, name in workers.items():
        index = int(name.rsplit("-", 1)[1])
        expected = {allowed[index % len(allowed)]} if pin else set(allowed)
        assert os.sched_getaffinity(native_id) == expected
    compiled.close()
    with pytest.raises(GlowError, match="pin_threads"):
        compile_function(fn, get_backend("cpu"), CompileOptions(extra={"pin_threads": "yes"}))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers sleep on a futex only on Linux")
def test_an_idle_pool_sleeps_on_its_futex_and_the_next_run_wakes_it():
    from glowsdk.backends.cpu.codegen.pool import SLEEPERS
    x = np.random.default_rng(3).standard_normal((64, 4096)).astype(np.float32)
    fn = make([((64, 4096), F32)], lambda fn, v: [fn.add(ew.Tanh, v[0])])
    compiled = compile_function(fn, get_backend("cpu"), CompileOptions(extra=threaded(2)))
    compiled.execute({"x0": x})
    asleep = compiled._pool._state[SLEEPERS:SLEEPERS + 4].view(np.int32)
    for _ in range(500):  # the spin and yield phases take about 0.5 ms here
        if asleep[0]:
            break
        time.sleep(0.01)
    assert asleep[0] == 1  # the one worker sleeps in the kernel
    np.testing.assert_allclose(compiled.execute({"x0": x})["y0"], np.tanh(x), rtol=1e-6, atol=1e-6)
    compiled.close()


def test_profile_counts_every_step_and_gives_conv_flops():
    from glowsdk.backends.cpu.profile import format_profile, instruction_flops, profile_steps
    fn = make([((2, 3, 18, 18), F32)], small_network)
    compiled = compile_function(fn, get_backend("cpu"), CompileOptions(extra={"profile": True}))
    feeds = {"x0": np.random.default_rng(4).standard_normal((2, 3, 18, 18)).astype(np.float32)}
    times = profile_steps(compiled, feeds, runs=3)
    assert sorted(t.name for t in times) == sorted(step.name for step in compiled.steps)
    assert all(t.milliseconds > 0 for t in times)
    step = next(s for s in compiled.steps if s.instrs[0].kind == "Conv"
                and s.instrs[0].filter.type.shape == (16, 3, 3, 3))
    first_conv = next(t for t in times if t.name == step.name)
    assert first_conv.flops == instruction_flops(step.instrs[0]) == 2 * (2 * 16 * 18 * 18) * (3 * 3 * 3)
    table = format_profile(times)
    assert "TOTAL" in table and "Conv" in table


def test_profile_needs_the_profile_option():
    fn = make([((2, 3), F32)], lambda fn, v: [fn.add(ew.Tanh, v[0])])
    compiled = compile_function(fn, get_backend("cpu"))
    from glowsdk.backends.cpu.profile import profile_steps
    with pytest.raises(GlowError, match="profile option"):
        profile_steps(compiled, {"x0": np.zeros((2, 3), np.float32)})


@pytest.mark.parametrize("size", [100, 3 << 20])
def test_regions_are_zeroed_and_aligned_small_or_huge(size):
    from glowsdk.backends.cpu.image import ALIGNMENT, HUGE_PAGE, aligned_bytes
    region = aligned_bytes(size)
    assert region.size == size and not region.any()
    assert region.ctypes.data % (HUGE_PAGE if size >= HUGE_PAGE else ALIGNMENT) == 0
    region[-1] = 7  # writable to its last byte
    assert region[-1] == 7


def test_the_bundle_guide_states_the_pool_size_the_module_uses():
    from pathlib import Path

    from glowsdk.backends.cpu.codegen.pool import POOL_BYTES, RUN, STOP, WORKER
    guide = (Path(__file__).parents[2] / "vendor_guide" / "cpu_bundle.md").read_text()
    assert f"`pool` is {POOL_BYTES} zeroed bytes" in guide
    assert all(f"int32_t {name}(" in guide for name in (WORKER, RUN, STOP))


def test_broadcast_sources_are_read_before_the_inner_loop(tmp_path):
    """Softmax's x - max(x) then Exp, written into the activations region that also holds the row
    maxima: the maxima are read before the row loop, so LLVM vectorises it (a load of the same
    region inside the loop kept it scalar, 4x slower); a scalar source broadcast over a whole
    tensor too. Against the interpreter."""
    dump = tmp_path / "softmax.s"

    def build(fn, v):
        shifted = fn.add(ew.Sub, v[0], fn.add(reduce.ReduceMax, v[0], axes=[2], keepdims=True))
        exp = fn.add(ew.Exp, shifted)
        return [fn.add(ew.Div, exp, fn.add(reduce.ReduceSum, exp, axes=[2], keepdims=True)),
                fn.add(ew.Mul, fn.add(ew.Exp, v[0]), fn.add(reduce.ReduceMax, v[0], axes=[0, 1, 2], keepdims=False))]
    check([((3, 5, 197), F32)], build, accumulates=True, dump_asm=str(dump))
    assembly = dump.read_text()
    assert "vrndscaleps" in assembly or "vroundps" in assembly  # exp's rounding on whole vectors


@pytest.mark.parametrize("shape", [[1], [1, 1], [1, 1, 1]])
def test_one_element_with_a_scalar_operand(shape):
    # found by tests/test_onnx_hypothesis.py: one element merges into no loop dims, and the hoisting of
    # the sources the innermost loop does not walk read the last stride of an empty layout (IndexError)
    from onnx import TensorProto, helper, numpy_helper

    import glowsdk

    c = numpy_helper.from_array(np.array(2.5, np.float32), "c")
    graph = helper.make_graph([helper.make_node("Add", ["x", "c"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], [c])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    x = np.full(shape, -1.0, np.float32)
    out = glowsdk.compile(glowsdk.load(model), "cpu", fallback=None).run({"x": x})["y"]
    np.testing.assert_array_equal(out, x + np.float32(2.5))
