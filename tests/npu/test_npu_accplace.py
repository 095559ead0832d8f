"""A handed-off layer's accumulator layout (accplace.py): moved off the words the layer before reads last, its bias
row after its tile slots where its first product fills one; checked mode, bit-exact, and a race named when the
layout stays where it was but the moved product waits only as long as the chosen placement lets it."""
from __future__ import annotations

import pytest

import glowsdk
from glowsdk.backends.npu import accplace, binary
from glowsdk.backends.npu.epilogue import AddTensor
from glowsdk.backends.npu.handoff import HANDOFF
from glowsdk.backends.npu.pipeline import COMPUTED, PREFETCH
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile
from isa import PRESETS
from isa.schema import Engine
from sim.binding import run_binary
from sim.errors import RaceError

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact


def bottlenecks(width: int, count: int):
    """`count` residual bottlenecks of 512 channels (128 inside) on 28 x 28 images: on the server preset their
    1 x 1 expansions and 3 x 3 layers each fill about the whole accumulator (resnet50's third stage)."""
    b = NetBuilder((1, 64, width, width))
    x = b.conv("x", 64, 512, 1, 0)
    for _ in range(count):
        y = b.conv(b.conv(b.conv(x, 512, 128, 1, 0), 128, 128, 3, 1), 128, 512, 1, 0, relu=False)
        x = b.node("Relu", [b.node("Add", [y, x])])
    return b.network(b.conv(x, 512, 128, 1, 0, relu=False))


@pytest.fixture(scope="module")
def server():
    network = bottlenecks(28, 2)
    return network, assert_bit_exact(network, config="server")  # checked mode: no race across the barrier


@pytest.fixture(scope="module")
def wide():
    """(On 28 x 28 images every layout moved off base 0 has its bias row last: each bottleneck's small last tiles
    share a slot, accpack.py, and leave the other whole.)"""
    network = bottlenecks(48, 2)
    return network, assert_bit_exact(network, config="server")


def handed_off(npu) -> list[int]:
    return [k for k, layer in enumerate(npu.compiled.layers)
            if getattr(layer.body, "prefetched_input", None) or getattr(layer.body, "kept_input", None)]


@pytest.mark.parametrize("net, bias_last", [("server", True), ("wide", False)])
def test_layouts_move_and_the_moved_product_writes_its_first_slot_there(net, bias_last, request):
    """On `server` a layout puts its bias row last (a slot-sized first product in the layer before's other slot);
    on `wide` one moves up with its bias row first."""
    _, npu = request.getfixturevalue(net)
    debug, program, layers = npu.compiled.binary.debug, npu.compiled.binary.instructions, npu.compiled.layers
    bodies = [layers[k].body for k in handed_off(npu)]
    assert any(body.bias_last for body in bodies) if bias_last else \
        any(body.acc_base and not body.bias_last for body in bodies)
    words = PRESETS["server"].accumulator_bytes // 4
    for k in handed_off(npu):
        body, before, mine = layers[k].body, debug[k - 1], debug[k]
        assert body.acc_end() <= words
        [at] = [j for j in range(before.start, before.stop)
                if program[j].wait_count and program[j].wait_sem == PREFETCH]
        assert program[at + 1].acc == body.first_product()[0]
        bias = body.acc_base + (2 * body.acc_slot() if body.bias_last else 0)
        requants = [i for i in program[mine.start:mine.stop] if i.mnemonic == "CONFIG_REQUANT"]
        assert requants and all(bias <= i.bias < bias + body.shape.out_channels for i in requants)


def test_a_moved_layout_waits_for_less_than_the_layer_before_s_last_vector_work(server):
    """(Its bias row first at base 0, the bias_last layer's product would overlap the layer before's bias row,
    which every REQUANT reads.)"""
    _, npu = server
    debug, program, layers = npu.compiled.binary.debug, npu.compiled.binary.instructions, npu.compiled.layers
    for k in handed_off(npu):
        if not layers[k].body.bias_last:
            continue
        part = program[debug[k - 1].start:debug[k - 1].stop]
        signals = [j for j, i in enumerate(part) if i.signal_count and i.signal_sem == HANDOFF]
        vector = [j for j, i in enumerate(part) if i.spec.engine is Engine.VECTOR]
        assert not signals or signals[0] < vector[-1] - 1


def test_the_layout_kept_at_base_0_under_the_moved_one_s_handshake_races(server, monkeypatch):
    """The handshake guards the words the chosen placement writes: the first product written where it was (base
    0, bias row first) behind the same wait overwrites what the layer before still reads, and checked mode says
    so."""
    network, _ = server
    chosen = accplace.place

    def misplaced(em, body, config, after=None):
        waited = chosen(em, body, config, after)
        if body.bias_last:
            body.acc_base, body.bias_last, body.swapped = 0, False, False
        return waited
    monkeypatch.setattr(binary, "place", misplaced)
    quant = QuantizationConfig(collect_profile(network, calibration_random(network, 2)))
    planted = glowsdk.compile(network, "npu", quantization=quant, config="server")
    with pytest.raises(RaceError, match="race"):
        run_binary(planted.compiled.binary, PRESETS["server"], network.random_inputs(3), checked=True)


def first_stage(width: int, count: int):
    """resnet50's first stage: `count` bottlenecks of 256 channels (64 inside) on `width` x `width` images."""
    b = NetBuilder((1, 64, width, width))
    x = b.conv("x", 64, 256, 1, 0, relu=False)
    for _ in range(count):
        y = b.conv(b.conv(b.conv(x, 256, 64, 1, 0), 64, 64, 3, 1), 64, 256, 1, 0, relu=False)
        x = b.node("Relu", [b.node("Add", [y, x])])
    return b.network(b.conv(x, 256, 64, 1, 0, relu=False))


def last_handshakes(npu) -> list[tuple[int, int]]:
    """For each layer with a residual addition whose next layer is handed off: where it signals HANDOFF, and where
    its last tile's vector work starts (its last vector instruction that waits for a tile's products)."""
    debug, program, layers = npu.compiled.binary.debug, npu.compiled.binary.instructions, npu.compiled.layers
    out = []
    for k, layer in enumerate(layers):
        if not any(isinstance(op, AddTensor) for op in getattr(layer.body, "epilogue", ())):
            continue
        span = range(debug[k].start, debug[k].stop)
        signals = [j for j in span if program[j].signal_count and program[j].signal_sem == HANDOFF]
        starts = [j for j in span if program[j].spec.engine is Engine.VECTOR and program[j].wait_count
                  and program[j].wait_sem in (COMPUTED, COMPUTED + 1)]
        out += [(signals[0], starts[-1])] if signals else []
    return out


def test_a_layout_leaves_the_next_hand_off_room_beside_its_last_tile(monkeypatch):
    """On 56 x 56 images the expansions with a residual addition (1 x 1, 64 -> 256, 14 tiles of 57344 words) come
    before a 1 x 1 256 -> 64 whose first product is 64512 of the accumulator's 131072 words: it misses both their
    bias row and their last tile's slot only where that slot lies next to the bias row and the other slot next to
    the free words, so it waits for the second-to-last tile's vector work, not for the last's."""
    network = first_stage(56, 2)
    npu = assert_bit_exact(network, config="server")  # checked mode: no race across the barrier
    found = last_handshakes(npu)
    assert len(found) == 2 and all(signal < last for signal, last in found)
    chosen = accplace.place
    monkeypatch.setattr(binary, "place", lambda em, body, config, after=None: chosen(em, body, config))
    alone = assert_bit_exact(network, config="server")
    assert all(signal > last for signal, last in last_handshakes(alone))
    inputs = network.random_inputs(1)
    cycles = [run_binary(n.compiled.binary, PRESETS["server"], inputs).result.cycles for n in (npu, alone)]
    assert cycles[0] < cycles[1]


def test_a_residual_layer_leaves_the_next_hand_off_room_before_its_own():
    """resnet50's first block on 56 x 56 images: after the downsample (1 x 1, 64 -> 256, a REQUANT a tile), the
    expansion with the residual addition (two passes a tile) can have its own product wait for the downsample's
    last tile, or the next layer's wait for its own last tile: the latter is longer, so it is the one avoided."""
    b = NetBuilder((1, 64, 56, 56))
    x = b.conv("x", 64, 64, 1, 0)
    y = b.conv(b.conv(x, 64, 64, 1, 0), 64, 64, 3, 1)
    shortcut = b.conv(x, 64, 256, 1, 0, relu=False)
    z = b.node("Relu", [b.node("Add", [b.conv(y, 64, 256, 1, 0, relu=False), shortcut])])
    npu = assert_bit_exact(b.network(b.conv(b.conv(z, 256, 64, 1, 0), 64, 64, 3, 1)), config="server")
    [(signal, last)] = last_handshakes(npu)
    assert signal < last
