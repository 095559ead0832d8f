"""Gather on the NPU as indexed DMA (gather.py, the GATHER instruction): an embedding lookup of host token ids.

The embedding table is quantized over its own range; the NPU binary, compiled with no host fallback and run under
checked simulation, is bit-exact with the reference evaluator on the quantized graph, for token ids given as int64
(negative ones counting from the end, as ONNX says) and for constant indices; the gathered rows are checked against
numpy indexing of the quantized table; an index outside the table is a fault naming the instruction.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import glowsdk
from glowsdk.backends.npu.gather import GatherLayer
from glowsdk.graph.node import Constant
from glowsdk.quantization import QuantizationConfig, collect_profile
from glowsdk.reference.evaluator import evaluate
from isa import PRESETS
from sim.binding import run_binary
from sim.errors import SimError

VOCAB, WIDTH, TOKENS = 50, 24, 16


def _embedding(constant_indices: bool = False) -> glowsdk.api.Network:
    """tokens [16] -> Embedding(50, 24) [+ its rows picked again by constant indices] -> Linear 24 -> 8."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((VOCAB, WIDTH)).astype(np.float32), "table"),
               numpy_helper.from_array((rng.standard_normal((WIDTH, 8)) / 5).astype(np.float32), "w"),
               numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")]
    nodes = [helper.make_node("Gather", ["table", "tokens"], ["embedded"], axis=0)]
    rows = "embedded"
    if constant_indices:
        weights.append(numpy_helper.from_array((np.arange(TOKENS, dtype=np.int64) * 5) % TOKENS - 8,
                                               "order"))
        nodes += [helper.make_node("Gather", ["embedded", "order"], ["placed"], axis=0),
                  helper.make_node("Add", ["embedded", "placed"], ["summed"])]
        rows = "summed"
    nodes += [helper.make_node("MatMul", [rows, "w"], ["projected"]),
              helper.make_node("Add", ["projected", "b"], ["out"])]
    graph = helper.make_graph(nodes, "embedding", [helper.make_tensor_value_info("tokens", TensorProto.INT64,
                                                                                 (TOKENS,))],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], weights)
    return glowsdk.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))


def _tokens(seed: int) -> dict[str, np.ndarray]:
    return {"tokens": np.random.default_rng(seed).integers(-VOCAB, VOCAB, TOKENS).astype(np.int64)}


def _compile(network, config: str):
    inputs = [_tokens(s) for s in (1, 2)]
    profile = collect_profile(network, inputs)
    return glowsdk.compile(network, "npu", quantization=QuantizationConfig(profile), config=config, fallback="none")


@pytest.mark.parametrize("constant_indices,config", [(False, "edge"), (True, "default")])
def test_embedding_gather_on_the_npu_bit_exact(constant_indices, config):
    npu = _compile(_embedding(constant_indices), config)
    assert sum(isinstance(layer.body, GatherLayer) for layer in npu.compiled.layers) == 1 + constant_indices
    for seed in (3, 4):
        inputs = _tokens(seed)
        want = evaluate(npu.compiled.function, inputs)
        got = run_binary(npu.compiled.binary, PRESETS[config], inputs, checked=True).outputs
        for name, value in want.items():
            np.testing.assert_array_equal(got[name], value)


def test_gathered_rows_are_the_quantized_table_rows():
    """The evaluator's quantized Gather is numpy indexing of the quantized table (negative ids from the end)."""
    npu = _compile(_embedding(), "edge")
    gather = next(n for n in npu.compiled.function.nodes if n.kind == "Gather")
    assert isinstance(gather.data.node, Constant) and gather.data.type.elem.value == "int8q"
    table = np.asarray(gather.data.node.value)
    lo, hi = table.min(), table.max()
    assert lo == -128 or hi == 127  # the table's own range: its extreme rows hit the ends of int8
    ids = _tokens(5)["tokens"]
    from glowsdk.reference.evaluator import run_node
    (got,) = run_node(gather, [table, ids])
    np.testing.assert_array_equal(got, table[np.where(ids < 0, ids + VOCAB, ids)])


def test_an_index_outside_the_table_faults():
    npu = _compile(_embedding(), "edge")
    with pytest.raises(SimError, match=r"GATHER.*index 50 .*outside the table's 50 rows"):
        run_binary(npu.compiled.binary, PRESETS["edge"], {"tokens": np.full(TOKENS, VOCAB, np.int64)},
                   checked=True)


def test_generated_token_ids_stay_within_the_table():
    """`glowsdk simulate` without inputs draws indices the binary's GATHERs accept."""
    npu = _compile(_embedding(), "edge")
    run = run_binary(npu.compiled.binary, PRESETS["edge"], {}, checked=True)
    assert run.generated == ["tokens"]
