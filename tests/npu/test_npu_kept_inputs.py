"""A layer's result kept in the scratchpad where the next 1 x 1 convolution reads it as its input (kept_inputs.py):
resnet50's first stage on the server preset (56 x 56, a projection block, then an identity block), checked and
bit-exact; the next layer's kept row tiles load none of their rows and read them where the layer before stored them
from; a region laid over the layer before's residual operands only where its earlier tiles read them; a race named
without the signal the first product waits for (the store after the last write it reads), or when a prefetch made for
the layer after is loaded into the region while it is still read.
"""
from __future__ import annotations

import dataclasses

import pytest

from glowsdk.backends.npu.epilogue import AddTensor
from glowsdk.backends.npu.pipeline import PREFETCH
from isa import PRESETS
from sim.binding import run_binary
from sim.errors import RaceError

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact


def stage(width: int):
    """A stem, a bottleneck whose projection adds the branch's result (resnet50's conv__1 to conv__4), one whose
    first 1 x 1 convolution reads that block's result (conv__5 to conv__7), then a 1 x 1 convolution of 256 channels
    down to 128 (conv__11's shape)."""
    b = NetBuilder((1, 64, width, width))
    stem = b.conv("x", 64, 64, 1, 0)
    branch = b.conv(b.conv(b.conv(stem, 64, 64, 1, 0), 64, 64, 3, 1), 64, 256, 1, 0, relu=False)
    x = b.node("Relu", [b.node("Add", [branch, b.conv(stem, 64, 256, 1, 0, relu=False)])])
    branch = b.conv(b.conv(b.conv(x, 256, 64, 1, 0), 64, 64, 3, 1), 64, 256, 1, 0, relu=False)
    x = b.node("Relu", [b.node("Add", [branch, x])])
    return b.network(b.conv(x, 256, 128, 1, 0, relu=False))


@pytest.fixture(scope="module")
def server():
    network = stage(56)
    return network, assert_bit_exact(network, config="server")  # checked mode: no race across the barrier


def _kept(npu) -> list[int]:
    return [k for k, layer in enumerate(npu.compiled.layers) if getattr(layer.body, "kept_input", None)]


def _region(body) -> tuple[int, int]:
    """The bytes of the kept region the layer's kept row tiles read."""
    address, count = body.kept_input
    return address, address + body.row_tiles()[count - 1][1] * body.shape.width * body.shape.channels


def test_the_next_layers_first_row_tiles_read_their_rows_where_the_layer_before_kept_them(server):
    _, npu = server
    layers, binary = npu.compiled.layers, npu.compiled.binary
    kept = _kept(npu)
    names = [layers[k].name for k in kept]
    assert any(layers[k].body.kept_input[1] == len(layers[k].body.row_tiles()) for k in kept)  # every row tile
    assert len(kept) >= 3, names  # the stem's result, the projection's (conv__5) and the identity block's
    for k in kept:
        body, prev = layers[k].body, layers[k - 1].body
        address, count = body.kept_input
        tiles = prev.kept_results[1]
        assert prev.kept_results[0] == address and body.prefetched_input is None
        assert max(prev.spad_end(), body.spad_end()) <= address
        size = prev.operand_bytes()
        before, mine = binary.debug[k - 1], binary.debug[k]
        stores = [i.sram for i in binary.instructions[before.start:before.stop] if i.mnemonic == "STORE"]
        assert stores[:tiles] == [address + j * size for j in range(tiles)]
        # every step of the kept row tiles reads there (the first may run before the barrier: handoff.py)
        lo, hi = _region(body)
        reads = [i for i in binary.instructions[before.start:mine.stop] if i.mnemonic == "MATMUL" and lo <= i.inp < hi]
        steps = -(-body.shape.out_channels // body.tiling.n)
        assert len(reads) == count * steps
        # and no load brings any of their rows; the other row tiles load theirs, once each
        tensor = body.source.tensor
        base = getattr(binary.plan, tensor.region).base + tensor.offset
        end = base + body.row_tiles()[count - 1][1] * body.source.row_stride
        loads = [i for i in binary.instructions[before.start:mine.stop] if i.mnemonic == "LOAD"
                 and base <= i.dram < base + tensor.extent]
        assert all(i.dram >= end for i in loads) and len(loads) == len(body.row_tiles()) - count


def test_a_region_lies_on_the_layer_befores_residual_operands_only_where_its_earlier_tiles_read_them(server):
    _, npu = server
    layers = npu.compiled.layers
    laid = 0
    for k in _kept(npu):
        prev = layers[k - 1].body
        if prev.ahead_operands is None:
            continue
        adds = sum(isinstance(op, AddTensor) for op in prev.epilogue)
        size = prev.operand_bytes()
        start, stop = prev.ahead_operands[0], prev.ahead_operands[0] + prev.ahead_operands[1] * adds * size
        address, tiles = prev.kept_results
        for j in range(tiles):
            lo, hi = max(address + j * size, start), min(address + (j + 1) * size, stop)
            if lo < hi:
                laid += 1
                assert (hi - 1 - start) // (adds * size) < j  # only tiles before j's operands
    assert laid  # (the projection's result, over the branch's it added: both 800 KB do not fit side by side)


def pair(width: int):
    """1 x 1 up to 512 channels, then down to 128: on the server preset the first layer computes 28 x 28 in two row
    tiles, and the second's first row tile reads rows of the first (which only the kept signal orders before it)."""
    b = NetBuilder((1, 64, width, width))
    x = b.conv(b.conv("x", 64, 512, 1, 0), 512, 128, 1, 0)
    return b.network(b.conv(x, 128, 8, 1, 0, relu=False))


def test_without_the_kept_signal_the_first_product_races_the_vector_work_that_wrote_its_rows():
    """The next layer's first product runs before the barrier (handoff.py) and reads rows the layer before's vector
    work wrote into the region; the STORE of the last tile it reads waits for that work, and the CONFIG_STORE
    restated after it signals PREFETCH, which the product waits for beside its weight block. Without that signal
    (the product waiting for its weights only), nothing orders the REQUANT before the read: checked mode names the
    race."""
    network = pair(28)
    npu = assert_bit_exact(network, config="server")
    binary, layers = npu.compiled.binary, npu.compiled.layers
    [k] = _kept(npu)
    assert layers[k - 1].body.row_tiles()[1][0] < layers[k].body.row_tiles()[-1][1]  # (two tiles; not only the last)
    before = binary.debug[k - 1]
    program = list(binary.instructions)
    [signal] = [j for j in range(before.start, before.stop) if program[j].mnemonic == "CONFIG_STORE"
                and program[j].signal_count and program[j].signal_sem == PREFETCH]
    assert program[signal - 1].mnemonic == "STORE" and program[signal - 1].wait_count
    [product] = [j for j in range(signal, before.stop) if program[j].mnemonic == "CONFIG_MATMUL"
                 and program[j].wait_count == 2 and program[j].wait_sem == PREFETCH]  # (handed off: before the barrier)
    lo, hi = _region(layers[k].body)
    assert lo <= program[product + 1].inp < hi
    program[signal] = program[signal].replace(signal_sem=0, signal_count=0)
    program[product] = program[product].replace(wait_count=1)
    with pytest.raises(RaceError, match="REQUANT.*writes spad"):
        run_binary(dataclasses.replace(binary, instructions=program), PRESETS["server"], network.random_inputs(3),
                   checked=True)


def test_a_prefetch_for_the_layer_after_loaded_into_the_region_races_its_reader(server):
    """The region stays untouched until the last kept row tile has read it: the weight block the layer loads for the
    layer after (prefetch.py) goes elsewhere. Loaded into the rows the product before it reads instead (the load
    engine is ordered after the array only two steps back), checked mode names the race."""
    network, npu = server
    binary, layers = npu.compiled.binary, npu.compiled.layers
    k = next(k for k in _kept(npu) if layers[k].body.kept_input[1] == len(layers[k].body.row_tiles()))
    body, mine = layers[k].body, binary.debug[k]
    program = list(binary.instructions)
    [fetch] = [j for j in range(mine.start, mine.stop) if program[j].mnemonic == "LOAD"
               and program[j].signal_count and program[j].signal_sem == PREFETCH
               and program[j].sram == layers[k + 1].body.prefetched]
    reader = next(program[j] for j in range(fetch, mine.start, -1) if program[j].mnemonic == "MATMUL")
    lo, hi = _region(body)
    assert lo <= reader.inp < hi
    program[fetch] = program[fetch].replace(sram=reader.inp)
    with pytest.raises(RaceError, match="MATMUL.*reads spad.*LOAD.*writes spad"):
        run_binary(dataclasses.replace(binary, instructions=program), PRESETS["server"], network.random_inputs(3),
                   checked=True)


def stem(size: int):
    """ResNet's stem (7 x 7 stride 2, 3 -> 64, its 3 x 3 stride-2 max pool padded on top and left done by its tiles:
    window.py), then two 1 x 1 convolutions: on the server preset the first reads the pooled image the stem keeps."""
    b = NetBuilder((1, 3, size, size))
    pooled = b.node("MaxPool", [b.conv("x", 3, 64, 7, 3, 2)], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    return b.network(b.conv(b.conv(pooled, 64, 64, 1, 0), 64, 8, 1, 0, relu=False))


def test_a_window_pooled_result_is_kept_where_its_pool_writes_it_and_stored_from_there():
    """The stem's POOL writes each tile's pooled rows where they lie in the image kept from the region's start, and
    its STOREs read them there (at the same offset from the region as their DRAM rows from the result's); the 1 x 1
    layer reads every row tile there and loads none of its rows; bit-exact, and checked mode names no race (its first
    product, before the barrier, waits for the STORE of the last pooled rows it reads, behind their POOL)."""
    network = stem(160)
    npu = assert_bit_exact(network, config="server")
    binary, layers = npu.compiled.binary, npu.compiled.layers
    assert _kept(npu)[0] == 1 and layers[0].body.window
    prev, body = layers[0].body, layers[1].body
    address, count = body.kept_input
    assert count == len(body.row_tiles()) and prev.kept_results == (address, len(prev.row_tiles()))
    tensor = body.source.tensor
    base = getattr(binary.plan, tensor.region).base + tensor.offset
    before, mine = binary.debug[0], binary.debug[1]
    program = binary.instructions
    stores = [i for i in program[before.start:before.stop] if i.mnemonic == "STORE"]
    pools = [i for i in program[before.start:before.stop] if i.mnemonic == "POOL"]
    assert [i.sram - address for i in stores] == [i.dram - base for i in stores] == [i.dst - address for i in pools]
    assert sum(i.rows for i in stores) == body.shape.height
    assert not [i for i in program[before.start:mine.stop] if i.mnemonic == "LOAD" and base <= i.dram < base
                + tensor.extent]
