"""A max pool beside an independent convolution (overlap.py): one layer of both, interleaved, still exact.

An Inception-style module whose pool branch reads the module's input, as its other branches do: the pool
touches no byte of a convolution of another branch, so it runs during one (the costliest it can reach without
passing its own reader). Checked mode finds no
race between the two layers' transfers and buffers, and the result matches the reference evaluator.
"""
from __future__ import annotations

import pytest

from glowsdk.backends.npu.lrn import LrnLayer
from glowsdk.backends.npu.maxpool import SeparableMaxPoolLayer
from glowsdk.backends.npu.overlap import Beside, Footprint, _meet, config_state, interleave
from isa import PRESETS
from isa.encoding import make_instr

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact


def inception_module(width: int = 14, c: int = 24):
    b = NetBuilder((1, 8, width, width))
    stem = b.conv("x", 8, c)
    wide = b.conv(b.conv(stem, c, 16, 1, 0), 16, 48)
    pooled = b.conv(b.node("MaxPool", [stem], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1]), c, 8, 1, 0)
    joined = b.node("Concat", [b.conv(stem, c, 8, 1, 0), wide, pooled], axis=1)
    return b.network(b.conv(joined, 64, 8, 1, 0, relu=False))


@pytest.mark.parametrize("config", ["edge", "default"])
def test_a_pool_branch_runs_beside_the_3x3_convolution_bit_exact(config):
    npu = assert_bit_exact(inception_module(), config=config)
    pairs = [layer for layer in npu.compiled.layers if isinstance(layer.body, Beside)]
    assert len(pairs) == 1 and pairs[0].kind == "Conv+MaxPool"
    host, rider = pairs[0].body.host.body, pairs[0].body.rider.body
    assert host.source.tensor.name != rider.pool.result.tensor.name  # not the pool's reader
    assert isinstance(rider, SeparableMaxPoolLayer) and rider.base >= host.spad_end()
    assert not any(layer.kind == "MaxPool" for layer in npu.compiled.layers)
    barriers = [i for i in npu.compiled.binary.instructions if i.mnemonic == "NOP"]
    assert len(barriers) == len(npu.compiled.layers) and sorted({i.wait_count for i in barriers}) == [1, 2]


@pytest.mark.parametrize("config", ["edge", "default"])
def test_a_pool_follows_the_stores_of_the_convolution_it_reads_bit_exact(config):
    # the pool reads the convolution's result, and the next convolution reads the pool's: it can run only beside
    # its producer, each of its tiles waiting for the producer's tiles that store the rows it reads (its windows
    # read the padding below and on the right of an odd-sized image: the convolution cannot pool its tiles itself,
    # gemm.GemmLayer.window)
    b = NetBuilder((1, 8, 21, 21))
    pooled = b.node("MaxPool", [b.conv("x", 8, 32)], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    npu = assert_bit_exact(b.network(b.conv(pooled, 32, 8, 1, 0, relu=False)), config=config)
    pairs = [layer for layer in npu.compiled.layers if isinstance(layer.body, Beside)]
    assert len(pairs) == 1 and pairs[0].body.host.body.result.tensor is pairs[0].body.rider.body.pool.source.tensor
    debug = next(r for r in npu.compiled.binary.debug if r.name == pairs[0].name)
    span = npu.compiled.binary.instructions[debug.start:debug.stop]
    signals = [i for i in span if i.mnemonic == "CONFIG_STORE" and i.signal_count]
    waits = [i for i in span if i.mnemonic == "CONFIG_LOAD" and i.wait_count]
    assert signals and sum(i.wait_count for i in waits) == len(signals)
    assert {i.signal_sem for i in signals} == {i.wait_sem for i in waits}


def test_footprints_meet_where_a_write_overlaps():
    assert _meet(((0, 10), (20, 30)), ((9, 12),)) and not _meet(((0, 10), (20, 30)), ((10, 20),))
    reader, writer = Footprint(((0, 100),), ()), Footprint((), ((50, 60),))
    assert reader.meets(writer) and writer.meets(reader) and not reader.meets(reader)


def test_interleaving_refuses_when_the_semaphores_run_out():
    host = [make_instr("NOP", wait_sem=s, wait_count=1) for s in range(1, 32)]
    rider = [make_instr("NOP", signal_sem=1, signal_count=1)]
    assert interleave(host, [(0, 31)], rider, [(0, 1)], PRESETS["default"], config_state([], PRESETS["default"])) is None


def test_the_report_names_the_pool_beside_its_convolution():
    npu = assert_bit_exact(inception_module(), config="default")
    report = npu.compiled.report(False, "module")
    assert "beside it maxpool" in report and "Conv+MaxPool" in report


def test_an_lrn_follows_the_convolution_it_normalises_bit_exact():
    # GoogLeNet's stem: a 3x3 convolution, then an LRN over its channels; the LRN's chunks of pixels run beside
    # the convolution in the accumulator and scratchpad it leaves free
    b = NetBuilder((1, 16, 16, 16))
    norm = b.node("LRN", [b.conv("x", 16, 48)], size=5, alpha=1e-4, beta=0.75, bias=1.0)
    npu = assert_bit_exact(b.network(b.conv(norm, 48, 8, 1, 0, relu=False)), config="default")
    pairs = [layer.body for layer in npu.compiled.layers if isinstance(layer.body, Beside)]
    assert len(pairs) == 1 and isinstance(pairs[0].rider.body, LrnLayer)
    host, rider = pairs[0].host.body, pairs[0].rider.body
    assert rider.spad_base >= host.spad_end() and rider.acc_base >= host.acc_end()
