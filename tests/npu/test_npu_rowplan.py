"""First row tiles planned along a chain (rowplan.py): a 1x1 layer's first tile made a row longer, so that the 3x3
layer after it reads only rows it stores before its last tile and its first input is loaded by it; checked mode,
bit-exact against the reference evaluator, the array's cycles unchanged.
"""
from __future__ import annotations

import dataclasses

import pytest

from glowsdk.backends.npu import rowplan
from glowsdk.backends.npu.gemm import GemmLayer
from glowsdk.backends.npu.pipeline import PREFETCH, STORED
from glowsdk.backends.npu.prefetch import input_region, split_row
from glowsdk.backends.npu.step_cost import step_array_cycles
from isa import PRESETS

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact


def chain():
    """1x1, 3x3, 1x1, 3x3 and a 1x1 convolution on 14 x 14 rows: on server each is tiled [7, 7] (or so) over
    rows, and the 3x3 layer's first tile (rows 0..6) reads row 7, which a 1x1 layer tiled [7, 7] stores last."""
    b = NetBuilder((1, 256, 14, 14))
    x = b.conv(b.conv(b.conv(b.conv("x", 256, 128, 1, 0), 128, 128, 3, 1), 128, 256, 1, 0), 256, 128, 3, 1)
    return b.network(b.conv(x, 128, 16, 1, 0, relu=False))


@pytest.fixture(scope="module")
def compiled():
    return assert_bit_exact(chain(), config="server")  # checked mode: no race across any barrier


def gemms(npu) -> list[tuple[int, GemmLayer]]:
    return [(k, layer.body) for k, layer in enumerate(npu.compiled.layers) if isinstance(layer.body, GemmLayer)]


def test_the_first_1x1_tile_is_planned_a_row_longer_for_the_3x3_after_it(compiled):
    (k0, first), (k1, conv3) = gemms(compiled)[:2]
    assert (first.shape.kh, conv3.shape.kh) == (1, 3) and k1 == k0 + 1
    assert first.first_rows == 8 and first.row_tiles() == [(0, 8), (8, 14)] and first.tiling.rows == 8
    assert conv3.first_rows == 0 and conv3.row_tiles()[0] == (0, 7)
    assert first.stored_early() == 8  # rows 0..7: every row the 3x3 layer's first tile reads (with its padding)
    assert conv3.prefetched_input is not None
    config = PRESETS["server"]
    # the array's cycles: the same folds for 8 + 6 rows of 14 pixels as for 7 + 7
    assert sum(step_array_cycles(first.shape, rows, first.tiling.n, config) for rows in (8, 6)) == \
        2 * step_array_cycles(first.shape, 7, first.tiling.n, config)
    # the tiling's own rows: the 3x3 layer's first input ends in the layer before's last tile (row 7 loads after
    # its last STORE, split_row), planned it is all stored before it, one load
    unplanned = dataclasses.replace(first, first_rows=0, tiling=dataclasses.replace(first.tiling, rows=7))
    assert unplanned.stored_early() == 7 and split_row(unplanned, conv3) == 7
    assert split_row(first, conv3) is None and conv3.prefetched_input[1] == 1
    after = compiled.compiled.layers[k1 + 1].body
    assert input_region(first, conv3, after, config) == conv3.prefetched_input


def test_the_layer_before_loads_the_planned_first_input_after_the_store_of_its_last_row(compiled):
    _, (k1, conv3) = gemms(compiled)[:2]
    binary = compiled.compiled.binary
    before = binary.debug[k1 - 1]
    address, transfers = conv3.prefetched_input
    program = binary.instructions[before.start:before.stop]
    loads = [i for i in program if i.mnemonic == "LOAD" and i.signal_count and i.signal_sem == PREFETCH]
    assert len(loads) == 1 + transfers and loads[1].sram == address  # its weight block, then its rows
    assert (loads[1].wait_sem, loads[1].wait_count) == (STORED, 1)
    # its first product runs before the barrier (handoff.py), after the prefetched operands
    assert [(i.mnemonic, i.wait_count) for i in program if i.wait_count and i.wait_sem == PREFETCH][-1] == \
        ("CONFIG_MATMUL", 1 + transfers)


def strided():
    """A 1 x 1 convolution 256 -> 64 on 56 x 56, a 3 x 3 stride-2 one 64 -> 128 (resnet50's conv__11 and conv__12),
    then a 1 x 1 one 128 -> 8 on 28 x 28, which on server is tiled 14 rows of 28 pixels."""
    b = NetBuilder((1, 256, 56, 56))
    x = b.conv(b.conv("x", 256, 64, 1, 0), 64, 128, 3, 1, 2)
    return b.network(b.conv(x, 128, 8, 1, 0, relu=False))


def test_a_first_step_loaded_whole_by_the_layer_before_is_planned_over_one_that_streams(monkeypatch):
    """Tiled [14, 14] the last layer's first step streams (GemmLayer.first_chunks): the layer before loads its first
    chunk only, the other loads after the barrier while the array waits. Tiled [13, 15] it does not: the layer before
    loads the whole first step (rows 0..12, which it stores before its last row tile). Checked mode, bit-exact."""
    npu = assert_bit_exact(strided(), config="server")  # checked mode: no race across the barriers
    _, (_, conv3), (_, last) = gemms(npu)[:3]
    assert last.row_tiles() == [(0, 13), (13, 28)] and len(last.first_chunks()) == 1
    address, transfers = last.prefetched_input
    assert last.first_input_bytes() == 13 * 28 * 128 and transfers == 1 + (split_row(conv3, last) is not None)
    assert conv3.stored_early() >= 13
    monkeypatch.setattr(rowplan, "_streamed", lambda body, option: False)  # (the plan without the criterion)
    npu = assert_bit_exact(strided(), config="server")
    _, _, (_, last) = gemms(npu)[:3]
    assert last.row_tiles() == [(0, 14), (14, 28)] and len(last.first_chunks()) > 1
