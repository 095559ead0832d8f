"""Compiled NPU programs and races: pooling tiles never reuse bytes a DMA still moves, and a semaphore wait
planted out of a compiled program shows, as a wrong result in normal mode and as a named race in checked
mode, under two timings.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from glowsdk.reference.evaluator import evaluate
from isa import PRESETS
from isa.program import program_extents, semaphore_protocol
from sim.binding import run_binary
from sim.errors import RaceError

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact

TIMINGS = [pytest.param(False, id="dram"), pytest.param(True, id="ideal-dram")]


def pool_net(pads: int = 1):
    """A conv into a 3x3 stride-2 max pool tiled over rows on edge, the first tile padded at the top (an odd size:
    padded, its last windows read the padding below, so it is a layer of its own, not the convolution's tiles')."""
    b = NetBuilder((1, 8, 95, 95))
    out = b.node("MaxPool", [b.conv("x", 8, 32)], kernel_shape=[3, 3], strides=[2, 2], pads=[pads] * 4)
    return b.network(b.conv(out, 32, 16, 1, 0, relu=False))


@pytest.fixture(scope="module")
def compiled():
    network = pool_net()
    return network, assert_bit_exact(network)


def test_pool_tiles_never_load_over_an_output_a_store_reads(compiled):
    _, npu = compiled
    binary = npu.compiled.binary
    [pool] = [r for r in binary.debug if r.kind.endswith("MaxPool")]  # alone or beside its convolution (overlap.py)
    found = program_extents(binary.instructions, PRESETS["edge"])
    span = range(pool.start, pool.stop)
    stored = [x for i in span if binary.instructions[i].mnemonic == "STORE" for x in found[i] if x.memory == "spad"]
    loaded = [x for i in span if binary.instructions[i].mnemonic == "LOAD" for x in found[i] if x.memory == "spad"]
    assert sum(binary.instructions[i].mnemonic == "POOL" for i in span) >= 4
    assert all(s.stop <= l.start or l.stop <= s.start for s in stored for l in loaded)


@pytest.mark.parametrize("pads, config", [(0, "edge"), (1, "default")])
def test_pooling_over_row_tiles_is_bit_exact_in_checked_mode(pads, config):
    """(The fixture is the padded case on edge; with the output after each tile's own rows it raced.)"""
    assert_bit_exact(pool_net(pads), config=config)


def _without_store_wait(binary):
    """The binary with the pool layer's first STORE no longer waiting for its POOL (nor the POOL signalling it)."""
    program = list(binary.instructions)
    protocol = semaphore_protocol(program)
    [pool] = [r for r in binary.debug if r.kind.endswith("MaxPool")]
    store = next(i for i in range(pool.start, pool.stop) if program[i].mnemonic == "STORE"
                 and any(program[k].mnemonic == "POOL" for k in protocol.consumes[i]))
    [signal] = protocol.consumes[store]
    assert program[signal].mnemonic == "POOL" and program[signal].signal_count == program[store].wait_count == 1
    program[store] = program[store].replace(wait_sem=0, wait_count=0)
    program[signal] = program[signal].replace(signal_sem=0, signal_count=0)
    return dataclasses.replace(binary, instructions=program), store, signal


@pytest.mark.parametrize("ideal_dram", TIMINGS)
def test_a_missing_wait_gives_a_wrong_result_and_checked_mode_names_the_race(compiled, ideal_dram):
    network, npu = compiled
    config = PRESETS["edge"]
    inputs = network.random_inputs(3)
    want = evaluate(npu.compiled.function, inputs)
    intact = run_binary(npu.compiled.binary, config, inputs, ideal_dram=ideal_dram).outputs
    planted, store, pool = _without_store_wait(npu.compiled.binary)
    got = run_binary(planted, config, inputs, ideal_dram=ideal_dram).outputs
    for name, value in want.items():
        np.testing.assert_array_equal(intact[name], value)
        # The STORE copies the output buffer out before the POOL's results land in it.
        assert not np.array_equal(got[name], value)
    with pytest.raises(RaceError) as caught:
        run_binary(planted, config, inputs, checked=True, ideal_dram=ideal_dram)
    message = str(caught.value)
    assert {caught.value.index, int(message.split("and instruction ")[1].split()[0])} == {store, pool}
    assert "(POOL, layer '" in message and "(STORE, layer '" in message and "no semaphore ordering them" in message
