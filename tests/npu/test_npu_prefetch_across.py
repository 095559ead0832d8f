"""A fully connected layer's first weight block across the element-wise layer before it: the convolution two back
(resnet50's last, its global average pool fused) loads it before its barrier, above the element-wise layer's
buffers (prefetch.py); checked mode, bit-exact, and a race named where the block is put on the buffers below.
"""
from __future__ import annotations

import dataclasses

import pytest

from glowsdk.backends.npu.gemm import GemmLayer
from glowsdk.backends.npu.pipeline import PREFETCH
from glowsdk.backends.npu.vector import ElementwiseLayer
from isa import PRESETS
from sim.binding import run_binary
from sim.errors import RaceError

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact


def classifier():
    """Two 1 x 1 convolutions, a global average pool (fused into the second: a pooled row), Flatten and a Gemm: the
    pool's output rescaled to the Gemm's input scale is an element-wise layer between the two."""
    b = NetBuilder((1, 64, 7, 7))
    pooled = b.node("Flatten", [b.node("GlobalAveragePool", [b.conv(b.conv("x", 64, 128, 1, 0), 128, 256, 1, 0)])])
    return b.network(b.node("Gemm", [pooled, b.weight((100, 256)), b.weight((100,))], transB=1))


@pytest.fixture(scope="module", params=["default", "edge"])
def compiled(request):
    network = classifier()
    return request.param, network, assert_bit_exact(network, config=request.param)  # checked mode: no race


def test_the_convolution_two_back_loads_the_first_weights_across_the_element_wise_layer(compiled):
    config, _, npu = compiled
    layers, binary = npu.compiled.layers, npu.compiled.binary
    [k] = [k for k, layer in enumerate(layers) if isinstance(layers[k - 1].body, ElementwiseLayer)]
    conv, rescale, fc = (layer.body for layer in layers[k - 2:k + 1])
    assert isinstance(conv, GemmLayer) and conv.pool == "avg" and isinstance(fc, GemmLayer)
    assert fc.prefetched is not None
    loads = [[i for i in binary.instructions[ranged.start:ranged.stop] if i.signal_count and i.signal_sem == PREFETCH]
             for ranged in binary.debug[k - 2:k + 1]]
    assert [[i.mnemonic for i in signals] for signals in loads] == [["LOAD"], [], []]
    # the block, whole or in pieces (pieces.py) of which only the last signals
    _, rows, width = fc.first_weights()
    ranged = binary.debug[k - 2]
    block = [i for i in binary.instructions[ranged.start:ranged.stop] if i.mnemonic == "LOAD"
             and fc.prefetched <= i.sram < fc.prefetched + rows * width]
    assert block[-1] == loads[0][0] and sum(i.rows for i in block) == rows and block[0].sram == fc.prefetched
    mine = binary.debug[k]
    waits = [i for i in binary.instructions[mine.start:mine.stop] if i.wait_count and i.wait_sem == PREFETCH]
    assert [(i.mnemonic, i.wait_count) for i in waits] == [("CONFIG_MATMUL", 1)]
    assert max(conv.spad_end(), rescale.spad_end(PRESETS[config]), fc.spad_end()) <= fc.prefetched


def test_weights_placed_on_the_buffers_below_checked_mode_names_the_race(compiled):
    """The region rule at work: the block moved to scratchpad 0 (the convolution's and the element-wise layer's
    buffers), its load races the products still reading them. (No wait to plant out: the Gemm's first step loads its
    input after the block on the same in-order load engine, an order checked mode sees too.)"""
    config, network, npu = compiled
    binary = npu.compiled.binary
    [fc] = [layer.body for layer in npu.compiled.layers if layer.kind == "MatMul"]
    program = [i.replace(sram=0) if i.mnemonic == "LOAD" and i.sram == fc.prefetched else
               i.replace(wgt=0) if i.mnemonic == "MATMUL" and i.wgt == fc.prefetched else i
               for i in binary.instructions]
    assert sum(a != b for a, b in zip(program, binary.instructions)) == 2
    planted = dataclasses.replace(binary, instructions=program)
    with pytest.raises(RaceError, match="race"):
        run_binary(planted, PRESETS[config], network.random_inputs(3), checked=True)
