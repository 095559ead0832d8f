"""A cold compile holds each weight in about one form at a time (bytes counted by tracemalloc, not timed).

Convolutions followed by batch normalisation: graph optimisation folds each pair
into new filters, code generation packs each filter into panels, and the
constants region takes the panels. The pipeline's lowered copy is nobody else's,
so the compile lets go of the folded filters as their panels are made
(CompileOptions.release_constants) and of the panels as the region takes them:
at no point do two full copies of the network's weights coexist beside the
imported ones. The numbers agree with onnx's reference evaluator, and a caller's
hook that saw the lowered copy still finds its constants' data afterwards.
"""
from __future__ import annotations

import gc
import tracemalloc

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from glowsdk.backends import get_backend
from glowsdk.backends.cpu import CpuBackend
from glowsdk.compiler.backend import CompileOptions
from glowsdk.compiler.passes import PassManager
from glowsdk.compiler.pipeline import compile_function, prepare_function
from glowsdk.compiler.schedule import schedule
from glowsdk.frontend.onnx.importer import import_model

CHANNELS, LAYERS, SIDE = 384, 4, 4


def conv_bn_model(rng: np.random.Generator):
    """LAYERS 3x3 convolutions of CHANNELS channels, each followed by batch normalisation (5.3 MB of filter
    a layer)."""
    nodes, initializers, x = [], [], "x"
    for i in range(LAYERS):
        filters = (rng.standard_normal((CHANNELS, CHANNELS, 3, 3)) / 30).astype(np.float32)
        stats = [rng.standard_normal(CHANNELS).astype(np.float32) for _ in range(3)]
        variance = rng.uniform(0.5, 2.0, CHANNELS).astype(np.float32)
        names = [f"w{i}", f"scale{i}", f"bias{i}", f"mean{i}", f"var{i}"]
        initializers += [numpy_helper.from_array(a, n) for a, n in zip([filters, *stats, variance], names)]
        nodes.append(helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("BatchNormalization", [f"c{i}", *names[1:]], [f"y{i}"]))
        x = f"y{i}"
    shape = [1, CHANNELS, SIDE, SIDE]
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, shape)], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def lowered(model):
    """`model` imported, optimised, lowered and scheduled for the cpu backend, as the pipeline hands it over."""
    backend = get_backend("cpu")
    function, _ = prepare_function(import_model(model).functions["main"], backend, manager=PassManager(),
                                   hook=lambda stage, function: None)
    backend.transform_post_lowering(function)
    schedule(function)
    return backend, function


def traced_growth(model, release: bool) -> tuple[object, int]:
    """`model` compiled for the cpu backend from its lowered function, releasing its constants or not, and
    how far above their start (the folded filters among it) the bytes Python's allocators (numpy's
    included) held rose during that compile."""
    tracemalloc.start()
    try:
        backend, function = lowered(model)
        gc.collect()  # the imported graph's cycles, with its filters, go now rather than during the compile
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        compiled = backend.compile(function, CompileOptions(release_constants=release))
        return compiled, tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()


def test_a_compile_holds_one_copy_of_the_folded_weights_at_a_time():
    rng = np.random.default_rng(0)
    model = conv_bn_model(rng)
    feeds = {"x": rng.standard_normal((1, CHANNELS, SIDE, SIDE)).astype(np.float32)}
    weights = LAYERS * CHANNELS * CHANNELS * 9 * 4
    growth = {}
    for release in (False, True):
        compiled, growth[release] = traced_growth(model, release)
        expected, = ReferenceEvaluator(model).run(None, feeds)
        got, = compiled.execute(feeds).values()
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    # one layer's panels and their temporaries: each layer's folded filter gives way to its panels
    assert growth[True] < 0.75 * weights, f"{growth[True] / 1e6:.1f} MB more for {weights / 1e6:.1f} MB of weights"
    # kept, the folded filters are still there beside every layer's panels
    assert growth[False] > weights, f"{growth[False] / 1e6:.1f} MB more for {weights / 1e6:.1f} MB of weights"


class Recording(CpuBackend):
    """The cpu backend, noting whether each compile may release its function's constants."""

    def __init__(self) -> None:
        super().__init__()
        self.released: list[bool] = []

    def compile(self, function, options):
        self.released.append(options.release_constants)
        return super().compile(function, options)


def test_only_a_copy_no_hook_saw_is_released():
    model = conv_bn_model(np.random.default_rng(1))
    backend, seen = Recording(), []
    compile_function(import_model(model).functions["main"], backend, CompileOptions())
    compile_function(import_model(model).functions["main"], backend, CompileOptions(),
                     on_stage=lambda stage, function: seen.append(function) if stage == "scheduled" else None)
    assert backend.released == [True, False]
    constants = list(seen[0].module.constants.values())
    assert constants and all(isinstance(c.value, np.ndarray) for c in constants)
