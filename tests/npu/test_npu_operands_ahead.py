"""A residual block's DRAM-bound last convolution: the compute-bound 3 x 3 layer before loads its residual operand
tiles where its load engine has room (operands_ahead.py), all of them or the first ones that do; checked mode,
bit-exact, and a race named when a piece is loaded after what orders it.
"""
from __future__ import annotations

import dataclasses

import pytest

from glowsdk.backends.npu.pipeline import OPERAND, TABLE
from isa import PRESETS
from sim.binding import run_binary
from sim.errors import RaceError

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact


def bottleneck(width: int, channels: int, mid: int):
    """A stem, then 1 x 1 down to `mid` channels, 3 x 3, 1 x 1 back up plus the stem's result (ReLU), then a head."""
    b = NetBuilder((1, channels, width, width))
    stem = b.conv("x", channels, channels, 1, 0)
    branch = b.conv(b.conv(b.conv(stem, channels, mid, 1, 0), mid, mid, 3, 1), mid, channels, 1, 0, relu=False)
    joined = b.node("Relu", [b.node("Add", [branch, stem])])
    return b.network(b.conv(joined, channels, 8, 1, 0, relu=False))


CASES = {"default": (28, 64, 32), "edge": (28, 32, 16)}
"""default: every tile's operand is loaded ahead; edge: the first two of four (the others load theirs)."""


@pytest.fixture(scope="module", params=list(CASES))
def compiled(request):
    config = request.param
    network = bottleneck(*CASES[config])
    return config, network, assert_bit_exact(network, config=config)  # checked mode: no race across the barrier


def _ahead(npu) -> int:
    [k] = [k for k, layer in enumerate(npu.compiled.layers) if getattr(layer.body, "ahead_operands", None)]
    return k


def test_the_layer_before_loads_the_first_tiles_operands_and_the_tiles_read_them_there(compiled):
    config, _, npu = compiled
    layers, binary = npu.compiled.layers, npu.compiled.binary
    k = _ahead(npu)
    body, prev = layers[k].body, layers[k - 1].body
    address, count = body.ahead_operands
    tiles = len(body.tile_origins())
    assert 0 < count <= tiles and (count < tiles) == (config == "edge")
    before = binary.instructions[binary.debug[k - 1].start:binary.debug[k - 1].stop]
    mine = binary.instructions[binary.debug[k].start:binary.debug[k].stop]
    size = body.operand_bytes()
    pieces = [i for i in before if i.mnemonic == "LOAD" and address <= i.sram < address + count * size]
    assert [i.sram for i in pieces] == [address + j * size for j in range(count)]
    assert max(prev.spad_end(), body.spad_end()) <= address  # above both layers' buffers
    # each piece goes before a step's loads of the layer before: none after its last load of its own
    own = [j for j, i in enumerate(before) if i.mnemonic == "LOAD" and i.signal_count and i.signal_sem in (1, 2)]
    assert before.index(pieces[-1]) < own[-1]
    # the tiles whose operand was loaded ahead load none; the others load theirs
    operands = [i for i in mine if i.mnemonic == "LOAD" and i.signal_count and i.signal_sem in (OPERAND, OPERAND + 1)]
    assert len(operands) == tiles - count
    assert all(i.wait_count == 0 for i in operands[:2])  # (the tiles two back loaded none: nothing to free)


def test_a_piece_loaded_after_the_next_layers_prologue_races_its_reader(compiled):
    """What orders a piece before the vector work that reads it: the load engine runs in order, and the next
    layer's vector engine waits for its prologue's loads (TABLE) before any work. Moved behind those loads, the
    first tile's piece is ordered before nothing it precedes, and checked mode names the race."""
    config, network, npu = compiled
    binary = npu.compiled.binary
    k = _ahead(npu)
    before, mine = binary.debug[k - 1], binary.debug[k]
    program = list(binary.instructions)
    [first] = [j for j in range(before.start, before.stop) if program[j].mnemonic == "LOAD"
               and program[j].sram == npu.compiled.layers[k].body.ahead_operands[0]]
    assert program[first - 1].mnemonic == "CONFIG_LOAD"
    table = max(j for j in range(mine.start, mine.stop) if program[j].mnemonic == "LOAD"
                and program[j].signal_count and program[j].signal_sem == TABLE)
    # (the load engine's next instruction restates the registers the piece's CONFIG_LOAD sets)
    assert next(i.mnemonic for i in program[table + 1:] if i.mnemonic in ("LOAD", "CONFIG_LOAD")) == "CONFIG_LOAD"
    planted = program[:first - 1] + program[first + 1:table + 1] + program[first - 1:first + 1] + \
        program[table + 1:]
    with pytest.raises(RaceError, match="race"):
        run_binary(dataclasses.replace(binary, instructions=planted), PRESETS[config], network.random_inputs(3),
                   checked=True)


def projection(width: int, channels: int, out: int):
    """A block whose projection (a 1 x 1 convolution of the stem's result) runs after the branch's last 1 x 1
    convolution and adds its result: the layer before writes the residual operand itself."""
    b = NetBuilder((1, channels, width, width))
    stem = b.conv("x", channels, channels, 1, 0)
    branch = b.conv(b.conv(b.conv(stem, channels, channels, 1, 0), channels, channels, 3, 1), channels, out, 1, 0,
                    relu=False)
    joined = b.node("Relu", [b.node("Add", [branch, b.conv(stem, channels, out, 1, 0, relu=False)])])
    return b.network(b.conv(joined, out, 8, 1, 0, relu=False))


@pytest.mark.parametrize("config,width,channels,out", [("edge", 28, 16, 64), ("default", 28, 32, 128)])
def test_the_layer_before_keeps_the_results_that_are_the_next_layers_operands(config, width, channels, out):
    """Each of the first tiles of the layer before requantizes its result into the region and stores it from there;
    the next layer's tile of the same index reads it there as its residual operand and loads none (bit-exact,
    checked: the barrier orders the reads after the writes)."""
    npu = assert_bit_exact(projection(width, channels, out), config=config)
    layers, binary = npu.compiled.layers, npu.compiled.binary
    k = _ahead(npu)
    body, prev = layers[k].body, layers[k - 1].body
    assert prev.kept_results == body.ahead_operands
    address, count = body.ahead_operands
    size = body.operand_bytes()
    before = binary.instructions[binary.debug[k - 1].start:binary.debug[k - 1].stop]
    stores = [i.sram for i in before if i.mnemonic == "STORE"]
    assert stores[:count] == [address + j * size for j in range(count)]
    assert not any(i.mnemonic == "LOAD" and address <= i.sram < address + count * size for i in before)
    mine = binary.instructions[binary.debug[k].start:binary.debug[k].stop]
    operands = [i for i in mine if i.mnemonic == "LOAD" and i.signal_count and i.signal_sem in (OPERAND, OPERAND + 1)]
    assert len(operands) == len(body.tile_origins()) - count
