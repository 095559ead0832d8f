"""Weight quantization of fully-connected layers: the least-squares clipping bound (`params.weight_bounds`).

Oracles: a brute-force search of the actual clip-and-round error over a fine grid
of bounds, and the float network's outputs from the interpreter.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glowsdk
from glowsdk.backends import get_backend
from glowsdk.compiler.pipeline import compile_function
from glowsdk.graph.node import Constant
from glowsdk.quantization import QuantizationConfig, collect_profile
from glowsdk.quantization.accuracy import cosine_similarity
from glowsdk.quantization.params import weight_bounds


def quantization_error(weights: np.ndarray, bound: float) -> float:
    """Mean squared error of `weights` clipped to +-bound and rounded to the grid bound/127."""
    scale = np.float32(bound / 127)
    return float(np.mean((weights - np.clip(np.rint(weights / scale), -127, 127) * scale) ** 2))


def brute_force_error(weights: np.ndarray) -> float:
    top = float(np.abs(weights).max())
    return min(quantization_error(weights, b) for b in np.linspace(0.2 * top, top, 401))


@pytest.mark.parametrize("draw", ["normal", "laplace"])
def test_the_bound_is_the_least_squares_one_and_beats_min_max(draw):
    weights = getattr(np.random.default_rng(1), draw)(size=50_000)
    bound = weight_bounds(np.abs(weights)[None])[0]
    best = brute_force_error(weights)
    assert quantization_error(weights, bound) <= 1.01 * best
    # a large tensor's largest weight is far out in its tail: min-max's grid is much coarser than need be
    assert quantization_error(weights, float(np.abs(weights).max())) > 1.1 * best


def test_bounds_are_per_row_and_zero_rows_stay_zero():
    rng = np.random.default_rng(2)
    rows = np.abs(np.stack([rng.normal(0, 1, 5000), rng.normal(0, 10, 5000), np.zeros(5000)]))
    bounds = weight_bounds(rows)
    assert bounds[2] == 0.0
    for row, bound in zip(rows[:2], bounds[:2]):
        assert bound <= row.max()
        assert quantization_error(row, bound) <= 1.02 * brute_force_error(row)


def gemm_model(weights: np.ndarray) -> onnx.ModelProto:
    bias = numpy_helper.from_array(np.linspace(-0.5, 0.5, weights.shape[0]).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)], "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, weights.shape[1]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weights.astype(np.float32), "w"), bias])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("per_channel", [False, True])
def test_a_heavy_tailed_matmul_weight_is_clipped_to_a_finer_grid_and_stays_accurate(per_channel):
    rng = np.random.default_rng(3)
    columns, depth = 16, 8192
    weights = rng.laplace(0, 0.05, (columns, depth))
    network = glowsdk.load(gemm_model(weights))
    calibration = [{"x": rng.standard_normal((4, depth)).astype(np.float32)} for _ in range(8)]
    config = QuantizationConfig(collect_profile(network, calibration), per_channel=per_channel)
    seen = {}
    compiled = compile_function(network.function, get_backend("interpreter"), quantization=config,
                                on_stage=lambda stage, fn: seen.setdefault(stage, list(fn.nodes)))
    rhs = next(n for n in seen["quantized"] if n.kind == "MatMul").rhs
    assert isinstance(rhs.node, Constant) and rhs.type.elem.is_quantized
    assert rhs.node.value.min() >= -127 and rhs.node.value.max() <= 127  # still symmetric after clipping
    # the MatMul's columns are the Gemm's rows; per tensor, every column has the tensor's largest weight
    largest = np.abs(weights).max(axis=1) if per_channel else np.full(columns, np.abs(weights).max())
    scales = np.broadcast_to(np.ravel(rhs.type.scales), (columns,))
    assert np.all(scales < 0.99 * largest / 127)
    float_run = glowsdk.compile(network)
    for _ in range(4):
        sample = {"x": rng.standard_normal((4, depth)).astype(np.float32)}
        assert cosine_similarity(float_run.run(sample)["y"], compiled.execute(sample)["y"]) > 0.999
