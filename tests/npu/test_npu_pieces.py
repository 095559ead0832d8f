"""The next layer's first weight block and first input rows loaded in pieces in the load engine's idle time among the
layer before's steps (pieces.py, prefetch._in_pieces): resnet50's conv__43 -> conv__44 on the server preset in small;
checked mode, bit-exact, and a race named where a piece is moved before the layer's own reads of its region.
"""
from __future__ import annotations

import dataclasses

import pytest

from glowsdk.backends.npu.pipeline import LOADED, PREFETCH, STORED
from isa import PRESETS
from sim.binding import run_binary
from sim.errors import RaceError

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact


@pytest.fixture(scope="module")
def compiled():
    """Two 1 x 1 convolutions in row tiles (the second one's array work outlasting each step's weight load), then a
    strided 3 x 3 one whose block fits none of its idle stretches whole, and whose single row tile reads rows the
    second stores in both its row tiles."""
    b = NetBuilder((1, 512, 14, 14))
    network = b.network(b.conv(b.conv(b.conv("x", 512, 512, 1, 0), 512, 256, 1, 0), 256, 128, 3, 1, 2))
    return network, assert_bit_exact(network, config="server")  # checked mode: no race


def pieces(npu, k):
    """The layer before layer k's instructions, and the indices of its loads into k's weight block and input region."""
    layers, binary = npu.compiled.layers, npu.compiled.binary
    body, ranged = layers[k].body, binary.debug[k - 1]
    program = binary.instructions[ranged.start:ranged.stop]
    _, rows, width = body.first_weights()
    address = body.prefetched_input[0]
    weights = [j for j, i in enumerate(program) if i.mnemonic == "LOAD"
               and body.prefetched <= i.sram < body.prefetched + rows * width]
    inputs = [j for j, i in enumerate(program) if i.mnemonic == "LOAD"
              and address <= i.sram < address + body.first_input_bytes()]
    return program, weights, inputs


def test_the_weight_block_loads_in_pieces_among_the_steps_and_only_its_last_signals(compiled):
    _, npu = compiled
    body = npu.compiled.layers[2].body
    program, weights, inputs = pieces(npu, 2)
    _, rows, width = body.first_weights()
    loads = [program[j] for j in weights]
    assert len(loads) >= 2 and sum(i.rows for i in loads) == rows  # the block's rows, each once, in order
    assert [i.sram for i in loads] == [body.prefetched + width * sum(i.rows for i in loads[:n])
                                       for n in range(len(loads))]
    assert [i.dram - loads[0].dram for i in loads] == [i.sram - body.prefetched for i in loads]
    assert [(i.signal_sem, i.signal_count) for i in loads] == [(0, 0)] * (len(loads) - 1) + [(PREFETCH, 1)]
    own = [j for j, i in enumerate(program) if i.mnemonic == "LOAD" and i.signal_count and i.signal_sem in
           (LOADED, LOADED + 1)]
    assert weights[0] < own[-1]  # (among the layer's own steps, before its last load)
    # the next layer's first product waits for as many signals as with the block whole
    [wait] = [i for i in program if i.wait_count and i.wait_sem == PREFETCH]
    assert wait.mnemonic == "CONFIG_MATMUL" and wait.wait_count == 1 + body.prefetched_input[1]


def test_the_rows_stored_early_load_among_the_steps_the_rest_after_the_last_store(compiled):
    _, npu = compiled
    body = npu.compiled.layers[2].body
    program, weights, inputs = pieces(npu, 2)
    stores = [j for j, i in enumerate(program) if i.mnemonic == "STORE"]
    waits = [j for j in inputs if program[j].wait_count]
    # the first piece of each of the two transfers waits for the STORE of its last rows: the first among the steps
    # (before the block's last piece), the second after the layer's last STORE
    assert waits[0] == inputs[0] and [program[j].wait_sem for j in waits] == [STORED, STORED]
    assert waits[0] < stores[-1] < waits[1] and waits[0] < weights[-1]
    assert sum(program[j].rows for j in inputs) == body.shape.height  # (every row of the 14, padding apart)


def test_a_piece_moved_before_the_layers_own_reads_of_the_region_checked_mode_names_the_race(compiled):
    """The block's region is the top of the scratchpad, where the layer before's own first weight block lies too: a
    piece there moved to that layer's start races its first product, which reads that block."""
    network, npu = compiled
    binary = npu.compiled.binary
    ranged, before = binary.debug[1], npu.compiled.layers[1].body
    _, weights, _ = pieces(npu, 2)
    program = list(binary.instructions)
    _, rows, width = before.first_weights()
    [at] = [ranged.start + j for j in weights if program[ranged.start + j].sram + program[ranged.start + j].rows *
            npu.compiled.layers[2].body.first_weights()[2] > before.prefetched]
    configure, piece = program[at - 1], program[at]
    assert configure.mnemonic == "CONFIG_LOAD" and piece.sram < before.prefetched + rows * width
    del program[at - 1:at + 1]
    program[ranged.start:ranged.start] = [configure, piece]
    planted = dataclasses.replace(binary, instructions=program)
    with pytest.raises(RaceError, match="LOAD.*writes spad.*MATMUL.*reads spad"):
        run_binary(planted, PRESETS["server"], network.random_inputs(3), checked=True)
