"""A layer's first product before the barrier (handoff.py), where the layer before loaded both its operands: an
input the layer before writes (after its STORE) and one an earlier layer wrote (a residual block's projection,
loaded with no wait); checked mode, bit-exact, and a race named when the HANDOFF wait is planted out."""
from __future__ import annotations

import dataclasses

import pytest

from glowsdk.backends.npu.handoff import HANDOFF
from glowsdk.backends.npu.pipeline import PREFETCH, STORED
from isa import PRESETS
from sim.binding import run_binary
from sim.errors import RaceError

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact


def block(width: int):
    """A bottleneck block with a projection: the projection reads the block's input, which the layer before it
    (the block's last 1 x 1) did not write."""
    b = NetBuilder((1, 16, width, width))
    x = b.conv("x", 16, 32, 3, 1)
    y = b.conv(b.conv(b.conv(x, 32, 16, 1, 0), 16, 16, 3, 1), 16, 64, 1, 0, relu=False)
    out = b.node("Relu", [b.node("Add", [y, b.conv(x, 32, 64, 1, 0, relu=False)])])
    return b.network(b.conv(out, 64, 16, 1, 0, relu=False))


@pytest.fixture(scope="module")
def edge():
    network = block(40)
    return network, assert_bit_exact(network, config="edge")  # checked mode: no race across the barrier


def handed_off(npu) -> list[int]:
    """The layers whose first product the layer before runs before its barrier."""
    layers = npu.compiled.layers
    return [k for k, layer in enumerate(layers) if getattr(layer.body, "prefetched_input", None) is not None]


def test_the_first_product_runs_before_the_barrier_after_its_operands(edge):
    _, npu = edge
    binary, layers = npu.compiled.binary, npu.compiled.layers
    moved = handed_off(npu)
    assert len(moved) >= 2
    for k in moved:
        before = binary.debug[k - 1]
        program = binary.instructions[before.start:before.stop]
        assert program[-1].mnemonic == "NOP"
        [at] = [j for j, i in enumerate(program) if i.wait_count and i.wait_sem == PREFETCH]
        assert program[at].mnemonic == "CONFIG_MATMUL" and program[at + 1].mnemonic == "MATMUL"
        waits = [j for j, i in enumerate(program) if i.wait_count and i.wait_sem == HANDOFF]
        signals = [i for i in program if i.signal_count and i.signal_sem == HANDOFF]
        assert waits in ([], [at - 1]) and len(signals) == len(waits)
        assert all(i.mnemonic == "CONFIG_CLAMP" for i in signals)
    earlier = [k for k in moved if layers[k - 1].body.result.tensor is not layers[k].body.source.tensor]
    assert earlier  # the projection: its input loaded with no wait for a STORE
    for k in earlier:
        before = binary.debug[k - 1]
        program = binary.instructions[before.start:before.stop]
        loads = [i for i in program if i.mnemonic == "LOAD" and i.signal_count and i.signal_sem == PREFETCH]
        assert not any(i.wait_count and i.wait_sem == STORED for i in loads)


@pytest.mark.parametrize("ideal_dram", [False, True], ids=["dram", "ideal-dram"])
def test_without_the_handoff_wait_checked_mode_names_the_race(edge, ideal_dram):
    network, npu = edge
    binary = npu.compiled.binary
    program = [i.replace(wait_sem=0, wait_count=0) if i.wait_count and i.wait_sem == HANDOFF else
               i.replace(signal_sem=0, signal_count=0) if i.signal_count and i.signal_sem == HANDOFF else i
               for i in binary.instructions]
    assert program != list(binary.instructions)
    planted = dataclasses.replace(binary, instructions=program)
    with pytest.raises(RaceError, match="race"):
        run_binary(planted, PRESETS["edge"], network.random_inputs(3), checked=True, ideal_dram=ideal_dram)


def test_a_layer_takes_its_other_accumulator_slot_first_where_the_layer_before_still_reads_the_first(edge):
    """(The block's layers on edge: the moved product's rows in the first slot would wait for the layer before's
    last tile; in the second, for less or nothing.)"""
    _, npu = edge
    binary, layers = npu.compiled.binary, npu.compiled.layers
    swapped = [k for k in handed_off(npu) if layers[k].body.swapped]
    assert swapped
    for k in swapped:
        before = binary.debug[k - 1]
        program = binary.instructions[before.start:before.stop]
        [at] = [j for j, i in enumerate(program) if i.wait_count and i.wait_sem == PREFETCH]
        assert program[at + 1].acc > layers[k].body.shape.out_channels  # past the bias row: the second slot
