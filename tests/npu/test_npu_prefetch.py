"""A convolution's first input rows across the barrier: the layer before loads them once its STORE of the last
of them is done (prefetch.py), whole or the first chunk of a streamed first step; checked mode, bit-exact, and
a race named when the wait for that STORE is planted out.
"""
from __future__ import annotations

import dataclasses

import pytest

from glowsdk.backends.npu import binary as npu_binary
from glowsdk.backends.npu.epilogue import AddTensor
from glowsdk.backends.npu.pipeline import OPERAND, PREFETCH, STORED
from glowsdk.backends.npu.prefetch import split_row
from isa import PRESETS
from sim.binding import run_binary
from sim.errors import RaceError

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact
from test_npu_fusion import residual_block


def chain(width: int):
    """3x3, 1x1, 3x3 and a strided 3x3 convolution, tiled over rows: each reads what the one before wrote."""
    b = NetBuilder((1, 16, width, width))
    x = b.conv(b.conv(b.conv(b.conv("x", 16, 32, 3, 1), 32, 64, 1, 0), 64, 32, 3, 1), 32, 32, 3, 1, 2)
    return b.network(b.conv(x, 32, 16, 1, 0, relu=False))


CASES = {"edge": 40, "default": 56}


def build(config: str):
    network = chain(CASES[config])
    return config, network, assert_bit_exact(network, config=config)  # checked mode: no race across the barrier


@pytest.fixture(scope="module", params=list(CASES))
def compiled(request):
    return build(request.param)


@pytest.fixture(scope="module")
def edge():
    """(On edge the wait for the STORE is the only order between it and the load: on default, with more tiles
    between them, the pipeline's own semaphores order them too.)"""
    return build("edge")


def test_the_layer_before_loads_the_first_input_rows_after_the_store_of_their_last(compiled):
    config, _, npu = compiled
    layers, binary = npu.compiled.layers, npu.compiled.binary
    fetched = [k for k, layer in enumerate(layers) if getattr(layer.body, "prefetched_input", None) is not None]
    assert len(fetched) >= 2
    for k in fetched:
        body, before = layers[k].body, binary.debug[k - 1]
        address, transfers = body.prefetched_input
        program = binary.instructions[before.start:before.stop]
        loads = [i for i in program if i.mnemonic == "LOAD" and i.signal_count and i.signal_sem == PREFETCH]
        assert len(loads) == 1 + transfers and loads[1].sram == address
        assert [(i.wait_sem, i.wait_count) for i in loads[1:]] == [(STORED, 1)] + [(0, 0)] * (transfers - 1)
        [stored] = [i for i in program if i.signal_count and i.signal_sem == STORED]
        assert stored.mnemonic == "CONFIG_STORE"
        # its first product runs before the barrier (handoff.py), after the layer before's own
        assert [(i.mnemonic, i.wait_count) for i in program if i.wait_count and i.wait_sem == PREFETCH][-1] == \
            ("CONFIG_MATMUL", 1 + transfers)
        assert max(layers[k - 1].body.spad_end(), body.spad_end()) <= address
        _, rows, width = body.first_weights()  # clear of the weight block it prefetches too
        assert address + body.first_input_bytes() <= body.prefetched or body.prefetched + rows * width <= address
    streamed = [len(layers[k].body.first_chunks()) > 1 for k in fetched]
    assert any(streamed) if config == "edge" else not all(streamed)  # a first chunk, and a whole first tile


@pytest.mark.parametrize("ideal_dram", [False, True], ids=["dram", "ideal-dram"])
def test_without_the_wait_for_the_store_checked_mode_names_the_race(edge, ideal_dram):
    config, network, npu = edge
    binary = npu.compiled.binary
    program = [i.replace(wait_sem=0, wait_count=0) if i.mnemonic == "LOAD" and i.wait_count and i.wait_sem == STORED
               else i for i in binary.instructions]
    program = [i.replace(signal_sem=0, signal_count=0) if i.signal_count and i.signal_sem == STORED else i
               for i in program]
    assert program != list(binary.instructions)
    planted = dataclasses.replace(binary, instructions=program)
    with pytest.raises(RaceError, match="race"):
        run_binary(planted, PRESETS[config], network.random_inputs(3), checked=True, ideal_dram=ideal_dram)


def test_a_prefetched_first_chunk_is_loaded_again_for_the_row_tiles_other_output_channel_tiles():
    """A 1 x 1 convolution whose row tile every output-channel tile reads (all input channels in one step) and whose
    first step streams: the layer before loads the first chunk for the first product, and the second step loads the
    chunk's rows again into the row tile's slot, where the later steps read the whole tile (bit-exact, checked)."""
    b = NetBuilder((1, 16, 40, 40))
    x = b.conv(b.conv("x", 16, 64, 3, 1), 64, 128, 1, 0)
    network = b.network(b.conv(x, 128, 16, 1, 0, relu=False))
    npu = assert_bit_exact(network, config="edge")
    layers, binary = npu.compiled.layers, npu.compiled.binary
    [k] = [k for k, layer in enumerate(layers) if getattr(layer.body, "prefetched_input", None) is not None
           and layer.body.rereads_first_chunk()]
    body, before, mine = layers[k].body, binary.debug[k - 1], binary.debug[k]
    [prefetch] = [i for i in binary.instructions[before.start:before.stop]
                  if i.mnemonic == "LOAD" and i.sram == body.prefetched_input[0]]
    (_, rows), _ = body.first_chunks()[:2]
    [again] = [i for i in binary.instructions[mine.start:mine.stop] if i.mnemonic == "LOAD" and i.dram == prefetch.dram]
    assert again.rows == prefetch.rows == rows * body.shape.stride[0] and again.sram != prefetch.sram


@pytest.mark.parametrize("config,width,first", [("default", 28, True), ("edge", 12, False)])
def test_prefetches_with_no_room_go_before_the_last_residual_operand_where_the_next_product_hides_the_drain(
        config, width, first, monkeypatch):
    """The next layer's first product, run before the barrier, waits for the prefetches; the last tile's residual
    operand only holds up the layer's last vector work and stores. Where that product outlasts them (and the next
    step's loads after the barrier), the prefetches load first; a short one (edge's 12 x 12 block) leaves them after
    (bit-exact, checked). Kept inputs are off: on edge the block's result would stay in the scratchpad for the next
    layer (kept_inputs.py), which then loads no input rows ahead, and this is about where those loads go."""
    monkeypatch.setattr(npu_binary, "plan_kept_inputs", lambda layers, config, across: None)
    npu = assert_bit_exact(residual_block(1, width), config=config)
    layers, binary = npu.compiled.layers, npu.compiled.binary
    orders = []
    for k in range(1, len(layers)):
        prev, body = layers[k - 1].body, layers[k].body
        if getattr(body, "prefetched_input", None) is None or not any(isinstance(op, AddTensor)
                                                                       for op in prev.epilogue):
            continue
        ranged = binary.debug[k - 1]
        program = binary.instructions[ranged.start:ranged.stop]
        operands = [j for j, i in enumerate(program) if i.mnemonic == "LOAD" and i.signal_count
                    and i.signal_sem in (OPERAND, OPERAND + 1)]
        fetches = [j for j, i in enumerate(program) if i.mnemonic == "LOAD" and i.signal_count
                   and i.signal_sem == PREFETCH]
        orders.append(fetches[-1] < operands[-1])
    assert orders == [first]


@pytest.mark.parametrize("size,pads", [(80, [1, 1, 1, 1]), (82, [0, 0, 0, 0])])
def test_a_convolution_that_max_pools_its_tiles_loads_the_next_layers_first_rows_once_it_stored_them(size, pads):
    """A convolution whose tiles max pool their rows (window.py, ResNet's padded stem pool and SqueezeNet's unpadded
    one) stores pooled rows: those its tiles complete before the last row tile (`GemmLayer.stored_early`) are in
    DRAM while that tile computes, so it loads the next layer's first input rows after the STORE of the last of
    them; bit-exact in checked mode."""
    b = NetBuilder((1, 3, size, size))
    pooled = b.node("MaxPool", [b.conv("x", 3, 24, 7, 3, 2)], kernel_shape=[3, 3], strides=[2, 2], pads=pads)
    network = b.network(b.conv(b.conv(pooled, 24, 32, 1, 0), 32, 8, 1, 0, relu=False))
    npu = assert_bit_exact(network, config="edge")
    stem, after = (layer.body for layer in npu.compiled.layers[:2])
    assert stem.window and stem.window_pad == pads[0] and len(stem.row_tiles()) > 2
    last = stem.row_tiles()[-1][0]  # the pooled row the last tile completes first: the window across it
    assert stem.stored_early() == (last + pads[0]) // 2 - 1
    assert after.prefetched_input is not None and after.row_tiles()[0][1] <= stem.stored_early()
    first = npu.compiled.binary.debug[0]
    program = npu.compiled.binary.instructions[first.start:first.stop]
    [load] = [i for i in program if i.mnemonic == "LOAD" and i.wait_count and i.wait_sem == STORED]
    [signal] = [k for k, i in enumerate(program) if i.signal_count and i.signal_sem == STORED]
    assert load.sram == after.prefetched_input[0] and program[signal - 1].mnemonic == "STORE"
    assert any(i.mnemonic == "STORE" for i in program[signal + 1:])  # a tile before the last stored them


@pytest.fixture(scope="module")
def straddling():
    """A 1 x 1 convolution in row tiles, then a strided 3 x 3 one whose single row tile reads every row (resnet50's
    conv__43 and conv__44): its first input begins in rows stored before the last row tile and ends in it."""
    b = NetBuilder((1, 64, 14, 14))
    x = b.conv(b.conv(b.conv("x", 64, 128, 1, 0), 128, 64, 3, 1, 2), 64, 128, 1, 0, relu=False)
    network = b.network(x)
    return network, assert_bit_exact(network, config="default")  # checked mode: no race across the barrier


def test_a_first_input_straddling_the_last_row_tile_loads_in_two_pieces(straddling):
    """The rows stored before the last row tile load once the last of them is stored, the rest after the layer's
    last STORE, each LOAD behind its own STORED token (bit-exact, checked); the first product still runs before the
    barrier (handoff.py)."""
    _, npu = straddling
    layers, binary = npu.compiled.layers, npu.compiled.binary
    [k] = [k for k in range(1, len(layers)) if all(layer.kind == "Conv" for layer in layers[k - 1:k + 1])
           and split_row(layers[k - 1].body, layers[k].body) is not None]
    body, before = layers[k].body, binary.debug[k - 1]
    assert body.prefetched_input[1] == 2
    program = binary.instructions[before.start:before.stop]
    stored = [i for i, instr in enumerate(program) if instr.signal_count and instr.signal_sem == STORED]
    loads = [i for i, instr in enumerate(program) if instr.mnemonic == "LOAD" and instr.wait_count
             and instr.wait_sem == STORED]
    stores = [i for i, instr in enumerate(program) if instr.mnemonic == "STORE"]
    assert len(stored) == len(loads) == 2 and stored[1] == stores[-1] + 1 and stored[0] < stores[-1]
    first, second = (program[i] for i in loads)
    assert second.sram > first.sram == body.prefetched_input[0] and first.rows + second.rows == body.shape.height
    assert [(i.mnemonic, i.wait_count) for i in program if i.wait_count and i.wait_sem == PREFETCH][-1] == \
        ("CONFIG_MATMUL", 3)


def without_the_second_stored_wait(binary):
    """The binary with the second piece of a first input loaded in two (split_row) no longer waiting for its STORE
    (and that STORE's token not made, so that the semaphores still balance)."""
    [_, last] = [i for i, instr in enumerate(binary.instructions) if instr.mnemonic == "LOAD" and instr.wait_count
                 and instr.wait_sem == STORED]
    [_, signal] = [i for i, instr in enumerate(binary.instructions)
                   if instr.signal_count and instr.signal_sem == STORED]
    program = list(binary.instructions)
    program[last] = program[last].replace(wait_sem=0, wait_count=0)
    program[signal] = program[signal].replace(signal_sem=0, signal_count=0)
    return dataclasses.replace(binary, instructions=program)


def test_without_the_wait_for_the_last_store_checked_mode_names_the_race(straddling):
    network, npu = straddling
    planted = without_the_second_stored_wait(npu.compiled.binary)
    with pytest.raises(RaceError, match="race"):
        run_binary(planted, PRESETS["default"], network.random_inputs(3), checked=True)
