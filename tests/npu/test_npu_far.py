"""A projection's first weight block and input rows loaded three layers back (far.py), where the layers between are
DRAM-bound: resnet50's last bottleneck on the server preset (conv__43 loads conv__46's); checked mode, bit-exact, and
a race named where a piece loads after the signals the projection's first product waits for.
"""
from __future__ import annotations

import dataclasses

import pytest

from glowsdk.backends.npu.gemm import GemmLayer
from glowsdk.backends.npu.kept_inputs import kept_region
from glowsdk.backends.npu.operands_ahead import operand_region
from glowsdk.backends.npu.pipeline import PREFETCH
from glowsdk.backends.npu.prefetch import weight_region
from isa import PRESETS
from sim.binding import run_binary
from sim.errors import RaceError

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact


@pytest.fixture(scope="module")
def compiled():
    """A 1 x 1 convolution, then a bottleneck that halves the image: 1 x 1, strided 3 x 3 and 1 x 1 convolutions,
    and the strided 1 x 1 projection of the block's input that adds their result."""
    b = NetBuilder((1, 1024, 14, 14))
    x = b.conv("x", 1024, 1024, 1, 0)
    main = b.conv(b.conv(b.conv(x, 1024, 512, 1, 0), 512, 512, 3, 1, 2), 512, 2048, 1, 0, relu=False)
    joined = b.node("Relu", [b.node("Add", [main, b.conv(x, 1024, 2048, 1, 0, 2, relu=False)])])
    network = b.network(b.conv(joined, 2048, 16, 1, 0, relu=False))
    return network, assert_bit_exact(network, config="server")  # checked mode: no race


def far_loads(npu):
    """(k, the loads into layer k's prefetched regions by layer k - 3, by layer k - 1) for the layer whose layer
    before signals PREFETCH with CONFIG_LOADs only."""
    layers, binary = npu.compiled.layers, npu.compiled.binary
    [k] = [k for k, ranged in enumerate(binary.debug) if any(
        i.mnemonic == "CONFIG_LOAD" and i.signal_count and i.signal_sem == PREFETCH
        for i in binary.instructions[ranged.start:ranged.stop])]
    body = layers[k + 1].body
    _, rows, width = body.first_weights()
    regions = [(body.prefetched, body.prefetched + rows * width),
               (body.prefetched_input[0], body.prefetched_input[0] + body.first_input_bytes())]

    def into(ranged):
        return [i for i in binary.instructions[ranged.start:ranged.stop] if i.mnemonic == "LOAD"
                and any(a <= i.sram < b for a, b in regions)]
    return k + 1, into(binary.debug[k - 2]), into(binary.debug[k])


def test_the_layer_three_back_loads_the_projections_first_operands_and_the_one_before_only_signals(compiled):
    _, npu = compiled
    layers, binary = npu.compiled.layers, npu.compiled.binary
    k, early, late = far_loads(npu)
    body = layers[k].body
    assert layers[k].body.source.tensor is layers[k - 4].body.result.tensor  # (the block's input: in DRAM already)
    _, rows, width = body.first_weights()
    weights = [i for i in early if i.sram < body.prefetched + rows * width and i.sram >= body.prefetched]
    assert late == [] and sum(i.rows for i in weights) == rows
    assert sum(i.rows for i in early if i not in weights) == body.shape.height  # (1 x 1, stride 2: every row loaded)
    assert all(not i.signal_count and not i.wait_count for i in early)
    ranged = binary.debug[k - 1]
    signals = [i for i in binary.instructions[ranged.start:ranged.stop] if i.signal_count and i.signal_sem == PREFETCH]
    # the projection's first product, run before the barrier (handoff.py), waits for them
    wait = [i for i in binary.instructions[ranged.start:ranged.stop] if i.wait_count and i.wait_sem == PREFETCH][-1]
    assert {i.mnemonic for i in signals} == {"CONFIG_LOAD"} and len(signals) == wait.wait_count == 2
    # clear of the buffers of the layers from the one loading them to the projection
    assert max(layer.body.spad_end() for layer in layers[k - 3:k + 1]) <= min(body.prefetched,
                                                                               body.prefetched_input[0])


def test_the_moved_regions_are_clear_of_every_region_in_use_meanwhile(compiled):
    """The layers from the one loading them to two after the projection: their prefetched weight blocks and input
    rows, kept inputs and residual operands loaded ahead, the projection's own operands included."""
    _, npu = compiled
    layers = npu.compiled.layers
    k, _, _ = far_loads(npu)
    body = layers[k].body
    _, rows, width = body.first_weights()
    moved = [(body.prefetched, body.prefetched + rows * width),
             (body.prefetched_input[0], body.prefetched_input[0] + body.first_input_bytes())]
    used = [operand_region(body)]
    for b in (layer.body for layer in layers[k - 3:k + 3]):
        if isinstance(b, GemmLayer) and b is not body:
            used += [weight_region(b), operand_region(b), kept_region(b)]
            if b.prefetched_input is not None:
                used.append((b.prefetched_input[0], b.prefetched_input[0] + b.first_input_bytes()))
    used = [region for region in used if region is not None]
    assert used and all(end <= start or stop <= begin for begin, end in moved for start, stop in used)


def test_a_piece_loaded_after_the_signals_checked_mode_names_the_race(compiled):
    """The pieces are ordered before the projection's product by the in-order load engine only: one moved after the
    signals of the layer before loads while the product reads it."""
    network, npu = compiled
    binary = npu.compiled.binary
    k, early, _ = far_loads(npu)
    program = list(binary.instructions)
    at = next(j for j, i in enumerate(program) if i is early[0])
    moved = program[at - 1:at + 1]
    assert moved[0].mnemonic == "CONFIG_LOAD"
    del program[at - 1:at + 1]
    ranged = binary.debug[k - 1]
    last = max(j for j in range(ranged.start - 2, ranged.stop - 2) if program[j].signal_count
               and program[j].signal_sem == PREFETCH and program[j].mnemonic == "CONFIG_LOAD")
    program[last + 1:last + 1] = moved
    planted = dataclasses.replace(binary, instructions=program)
    with pytest.raises(RaceError, match="MATMUL.*reads spad.*LOAD.*writes spad"):
        run_binary(planted, PRESETS["server"], network.random_inputs(3), checked=True)
