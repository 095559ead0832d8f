"""A first input straddling two row tiles before the layer before's last loads in two (prefetch.split_row,
storetime.py) where the later tile stores after the load engine reaches the rows: resnet50's conv__1 and conv__2 on
server (1 x 1 then 3 x 3, 64 channels on 56 x 56, the 1 x 1 layer tiled [18, 18, 18, 2]: the 3 x 3 layer's first
tile reads rows 0..18). Checked mode, bit-exact; without the second piece's wait for its STORE, a race.
"""
from __future__ import annotations


import pytest

from glowsdk.backends.npu.gemm import GemmLayer
from glowsdk.backends.npu.pipeline import PREFETCH, STORED
from glowsdk.backends.npu.prefetch import split_row
from glowsdk.backends.npu.storetime import stored_late
from isa import PRESETS
from sim.binding import run_binary
from sim.errors import RaceError

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact
from test_npu_prefetch import without_the_second_stored_wait


@pytest.fixture(scope="module")
def straddling():
    b = NetBuilder((1, 64, 56, 56))
    x = b.conv(b.conv("x", 64, 64, 1, 0), 64, 64, 3, 1)
    network = b.network(b.conv(x, 64, 8, 1, 0, relu=False))
    return network, assert_bit_exact(network, config="server")  # checked mode: no race across the barriers


def test_rows_straddling_two_row_tiles_before_the_last_load_in_two_each_behind_its_store(straddling):
    """Rows 0..17 load once the first row tile is stored, row 18 once the second is (each LOAD behind the STORED
    a CONFIG_STORE restated after that STORE signals); the 3 x 3 layer's first product waits for both."""
    _, npu = straddling
    layers, binary = npu.compiled.layers, npu.compiled.binary
    first, conv3 = layers[0].body, layers[1].body
    assert isinstance(first, GemmLayer) and first.row_tiles() == [(0, 18), (18, 36), (36, 54), (54, 56)]
    assert conv3.row_tiles()[0] == (0, 18) and split_row(first, conv3) == 18 and stored_late(first, 18)
    assert conv3.prefetched_input[1] == 2
    before = binary.debug[0]
    program = binary.instructions[before.start:before.stop]
    stores = [i for i, instr in enumerate(program) if instr.mnemonic == "STORE"]
    stored = [i for i, instr in enumerate(program) if instr.signal_count and instr.signal_sem == STORED]
    assert stored == [stores[0] + 1, stores[1] + 1]  # (after the first and the second row tile's STORE)
    loads = [instr for instr in program if instr.mnemonic == "LOAD" and instr.wait_count and instr.wait_sem == STORED]
    assert [load.rows for load in loads] == [18, 1] and loads[1].sram > loads[0].sram == conv3.prefetched_input[0]
    assert [(i.mnemonic, i.wait_count) for i in program if i.wait_count and i.wait_sem == PREFETCH][-1] == \
        ("CONFIG_MATMUL", 3)


def test_without_the_second_pieces_wait_checked_mode_names_the_race(straddling):
    network, npu = straddling
    with pytest.raises(RaceError, match="LOAD.*reads dram"):
        run_binary(without_the_second_stored_wait(npu.compiled.binary), PRESETS["server"], network.random_inputs(3),
                   checked=True)


def test_no_split_where_the_later_tile_stores_before_the_load_engine_reaches_the_rows():
    """resnet50's conv__5 (256 -> 64, [18, 18, 18, 1, 1]): its third step's array work (4,791 cycles) outlasts the
    second row tile's requantization and STORE (about 2.1k), so its rows are in DRAM when the prefetch starts."""
    b = NetBuilder((1, 256, 56, 56))
    x = b.conv(b.conv("x", 256, 64, 1, 0), 64, 64, 3, 1)
    npu = assert_bit_exact(b.network(b.conv(x, 64, 8, 1, 0, relu=False)), config="server")
    first, conv3 = npu.compiled.layers[0].body, npu.compiled.layers[1].body
    assert first.row_tiles()[:3] == [(0, 18), (18, 36), (36, 54)] and conv3.row_tiles()[0] == (0, 18)
    assert not stored_late(first, 18) and split_row(first, conv3) is None and conv3.prefetched_input[1] == 1
