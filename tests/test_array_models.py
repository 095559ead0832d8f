"""The matrix engine's fold-by-fold timing against the closed form: equal where every fold is full, fewer
cycles where partial folds fill and drain over fewer PEs, and the same results either way."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from isa import PRESETS, assemble
from sim.simulator import simulate
from sim.timing import grouped_matmul_cycles, matmul_cycles, matmul_cycles_by_fold

CONFIG = PRESETS["edge"].replace(array_rows=8, array_cols=6)


def folds_enumerated(rows: int, k: int, n: int, dataflow: str) -> int:
    """The per-fold costs summed one fold at a time (the docstring's rule, written out)."""
    r, c = CONFIG.array_rows, CONFIG.array_cols
    total = 0
    for j in range(0, n, c):
        nc = min(c, n - j)
        for i in range(0, k if dataflow == "ws" else rows, r):
            used = min(r, (k if dataflow == "ws" else rows) - i)
            total += used + rows + r + nc - 2 if dataflow == "ws" else k + used + nc - 2
    return total - 1


@pytest.mark.parametrize("dataflow", ["ws", "os"])
def test_full_folds_agree_with_the_closed_form(dataflow: str) -> None:
    for a, b, n in itertools.product((1, 2, 3), (1, 2), (1, 4)):
        rows, k = (5 * a, 8 * b) if dataflow == "ws" else (8 * a, 5 * b)
        assert matmul_cycles_by_fold(rows, k, 6 * n, dataflow, CONFIG) == matmul_cycles(rows, k, 6 * n, dataflow, CONFIG)


@pytest.mark.parametrize("dataflow", ["ws", "os"])
def test_partial_folds_are_cheaper_by_their_unused_pes(dataflow: str) -> None:
    for rows, k, n in itertools.product((1, 7, 9, 20), (3, 8, 13), (1, 5, 6, 14)):
        finer = matmul_cycles_by_fold(rows, k, n, dataflow, CONFIG)
        assert finer == folds_enumerated(rows, k, n, dataflow)
        assert finer <= matmul_cycles(rows, k, n, dataflow, CONFIG)


def test_simulation_with_either_model_computes_the_same() -> None:
    program = assemble("""
        CONFIG_MATMUL dataflow=ws im2col=0 out_w=1 channels=1 kw=1 stride_h=1 stride_w=1 dil_h=1 dil_w=1 row_pitch=0 pixel_pitch=0
        MATMUL inp=0x0 wgt=0x400 acc=0x0 rows=20 k=13 n=14 acc_mode=0
        END""")
    closed = simulate(program, CONFIG, dram={})
    finer = simulate(program, CONFIG, dram={}, array_model="folds")
    assert finer.cycles < closed.cycles
    matmul = finer.steps[1]
    assert matmul.cycles == matmul_cycles_by_fold(20, 13, 14, "ws", CONFIG)
    np.testing.assert_array_equal(closed.memories.acc, finer.memories.acc)


@pytest.mark.parametrize("dataflow", ["ws", "os"])
def test_grouped_product_is_timed_as_one_column_block(dataflow: str) -> None:
    """GMATMUL of G groups: the folds of one R x (C div G) block, each filling across that block only; on the
    datasheet's example (four groups of 34 x 34 on a 32 x 32 array) far fewer cycles than the block diagonal."""
    narrow = CONFIG.replace(array_cols=CONFIG.array_cols // 3)
    for rows, k, n in itertools.product((1, 9, 20), (3, 13), (1, 2, 5)):
        assert grouped_matmul_cycles(rows, k, n, 3, dataflow, CONFIG) == matmul_cycles(rows, k, n, dataflow, narrow)
    config = PRESETS["default"]
    assert 2 * grouped_matmul_cycles(112, 34, 34, 4, dataflow, config) < matmul_cycles(112, 136, 136, dataflow, config)
