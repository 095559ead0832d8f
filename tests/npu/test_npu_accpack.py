"""A layer's small last tile in its second-to-last tile's slot, after that tile's words (accpack.py): it waits for
no epilogue; checked mode, bit-exact, and a race named when it is planted on that tile's own words."""
from __future__ import annotations

import pytest

import glowsdk
from glowsdk.backends.npu import accpack, gemm
from glowsdk.backends.npu.pipeline import ACCFREE, PREFETCH
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile
from isa import PRESETS
from sim.binding import run_binary
from sim.errors import RaceError

from test_npu_accplace import bottlenecks
from test_npu_backend import assert_bit_exact


@pytest.fixture(scope="module")
def server():
    network = bottlenecks(28, 1)
    return network, assert_bit_exact(network, config="server")  # checked mode: no race on the shared slot


def packing(npu) -> list[int]:
    return [k for k, layer in enumerate(npu.compiled.layers)
            if isinstance(layer.body, gemm.GemmLayer) and accpack.packed_offset(layer.body) is not None]


def test_the_last_product_follows_the_second_to_last_s_words_and_waits_for_no_slot(server):
    _, npu = server
    debug, program, layers = npu.compiled.binary.debug, npu.compiled.binary.instructions, npu.compiled.layers
    assert packing(npu)
    for k in packing(npu):
        span = range(debug[k].start, debug[k].stop)
        products = [j for j in span if program[j].mnemonic == "MATMUL"]
        moved = [j for j in span if program[j].mnemonic == "CONFIG_MATMUL" and program[j].wait_count
                 and program[j].wait_sem == PREFETCH and j > products[0]]  # the next layer's, before the barrier
        products = [j for j in products if not moved or j < moved[0]]
        before, last = program[products[-2]], program[products[-1]]
        assert last.acc == before.acc + before.rows * before.n  # (one product a tile: one input-channel block)
        assert last.rows * last.n + before.rows * before.n <= layers[k].body.acc_slot()
        waits = {(program[j].wait_sem, program[j].wait_count) for j in range(products[-2] + 1, products[-1] + 1)}
        assert not waits & {(ACCFREE, 1), (ACCFREE + 1, 1)}


def test_the_last_tile_planted_on_the_second_to_last_s_words_races(server, monkeypatch):
    """Without its wait, the last tile's words are free only after the second-to-last's: at offset 0 it overwrites
    what that tile's epilogue still reads, and checked mode says so."""
    network, _ = server
    monkeypatch.setattr(gemm, "packed_offset", lambda layer: 0 if accpack.packed_offset(layer) is not None else None)
    quant = QuantizationConfig(collect_profile(network, calibration_random(network, 2)))
    planted = glowsdk.compile(network, "npu", quantization=quant, config="server")
    with pytest.raises(RaceError, match="race"):
        run_binary(planted.compiled.binary, PRESETS["server"], network.random_inputs(3), checked=True)
