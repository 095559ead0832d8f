"""The IR optimiser's cost grows with the program, not with its square (issue 24).

The memory passes used to rebuild their buffer index after every merge, so a
50-step GRU (thousands of instructions, thousands of merges) spent minutes there.
Each pass now builds the index once and keeps it accurate through its edits:
compiling a GRU of 4 or of 16 steps builds it the same number of times, and the
instructions visited by all those builds grow in proportion to the program. The
numbers still agree with onnx's reference evaluator. No clock is read.
"""
from __future__ import annotations

import numpy as np
import pytest
from oracle import glow_run, reference_run, single_op_model
from rnn_cases import recurrent_node

from glowsdk.compiler.ir.passes.buffers import BufferUses


def gru(steps: int) -> tuple:
    """A one-layer GRU over `steps` time steps with its seeded inputs."""
    node, arrays, outputs = recurrent_node("GRU", seq=steps, batch=1, size=8, hidden=16, present=["B"],
                                           lengths=None, layout=0, dtype=np.float32, seed=steps,
                                           attrs={"linear_before_reset": 1})
    inputs = {"X": arrays.pop("X")}
    return single_op_model("GRU", inputs, outputs, initializers=arrays, linear_before_reset=1,
                           hidden_size=16), inputs


def index_work(steps: int) -> tuple[int, int, list[np.ndarray], list[np.ndarray]]:
    """(index builds, instructions indexed) while compiling a `steps`-step GRU, its outputs and the oracle's."""
    model, inputs = gru(steps)
    builds, indexed = BufferUses.builds, BufferUses.indexed
    got = glow_run(model, inputs)
    return BufferUses.builds - builds, BufferUses.indexed - indexed, got, reference_run(model, inputs)


@pytest.mark.parametrize("steps", [4, 16])
def test_gru_numbers_survive_the_ir_passes(steps):
    _, _, got, want = index_work(steps)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_ir_passes_index_the_program_a_fixed_number_of_times():
    short_builds, short_indexed, _, _ = index_work(4)
    long_builds, long_indexed, _, _ = index_work(16)
    assert long_builds == short_builds  # not one rebuild per merge
    assert long_indexed <= 4.5 * short_indexed  # 4x the steps: about 4x the instructions, each visited as often
