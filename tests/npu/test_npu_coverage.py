"""Issue 21's coverage: forms typical mobile CNNs (torchvision's MobileNetV3, EfficientNet, MNASNet...) need,
each on a small synthetic graph, compiled for the NPU and run under checked simulation bit-exact with the
reference evaluator on the quantized graph (assert_bit_exact)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import glowsdk
from glowsdk.backends.npu.epilogue import AddTensor
from glowsdk.backends.npu.gemm import GemmLayer
from glowsdk.errors import UnsupportedOpsError
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile
from glowsdk.reference.evaluator import evaluate
from isa.config import resolve_config
from sim.binding import run_binary

from onnx import numpy_helper

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact

SMALL = {"preset": "edge", "name": "small", "scratchpad_bytes": 8192, "accumulator_bytes": 1024}
"""SRAMs small enough that a few-KiB tensor streams in many chunks and tiles, reusing both slots."""


def _bit_exact_on(network, tmp_path, overrides: dict) -> glowsdk.api.Network:
    """assert_bit_exact on a configuration file (a preset with some parameters changed)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(overrides))
    quant = QuantizationConfig(collect_profile(network, calibration_random(network, 2)))
    npu = glowsdk.compile(network, "npu", quantization=quant, config=str(path))
    inputs = network.random_inputs(3)
    want = evaluate(npu.compiled.function, inputs)
    got = run_binary(npu.compiled.binary, resolve_config(str(path)), inputs, checked=True).outputs
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)
    return npu


def _layer_kinds(npu) -> list[str]:
    return [type(layer.body).__name__ for layer in npu.compiled.layers]


def _gated(npu) -> list:
    """The convolution layers that apply a channel gate to their input (gemm.ChannelGate)."""
    return [layer.body for layer in npu.compiled.layers if isinstance(layer.body, GemmLayer) and layer.body.gate]


@pytest.mark.parametrize("op", ["GlobalAveragePool", "MaxPool"])
@pytest.mark.parametrize("c,hw,config", [(8, 20, "edge"), (40, 57, "edge"), (24, 16, "default")])
def test_global_pool_of_any_size_bit_exact(op, c, hw, config):
    """A window over the whole image past POOL's 15: REDUCE over row chunks, then VDIV (avg) or a copy (max). The
    pool reads the input (a convolution's only reader would pool in the convolution's tiles: gemm.py)."""
    b = NetBuilder((1, c, hw, hw))
    attrs = {"kernel_shape": [hw, hw]} if op == "MaxPool" else {}
    pooled = b.node(op, ["x"], **attrs)
    npu = assert_bit_exact(b.network(b.conv(pooled, c, 10, 1, 0, relu=False)), config=config)
    assert "GlobalPoolLayer" in _layer_kinds(npu)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "MaxPool"])
def test_global_pool_streams_chunks_and_tiles_through_both_slots(op, tmp_path):
    """Two batch elements, 100 channels in blocks of 64 (a 1 KiB accumulator holds three rows), 20 x 20 pixels in
    chunks of rows: every slot of the scratchpad and accumulator is reused (checked mode sees any race)."""
    b = NetBuilder((2, 100, 20, 20))
    attrs = {"kernel_shape": [20, 20]} if op == "MaxPool" else {}
    pooled = b.node(op, ["x"], **attrs)
    npu = _bit_exact_on(b.network(b.conv(pooled, 100, 10, 1, 0, relu=False)), tmp_path, SMALL)
    layer = next(layer.body for layer in npu.compiled.layers if type(layer.body).__name__ == "GlobalPoolLayer")
    tiles = layer.tiles(lambda t: 0, resolve_config(str(tmp_path / "config.json")))
    assert len(tiles) == 4 and all(len(tile.steps) > 2 for tile in tiles)


def _squeeze_excitation(b: NetBuilder, x: str, c: int, gate: str) -> str:
    """torchvision's SqueezeExcitation: global pool, 1x1 conv, ReLU, 1x1 conv, a sigmoid, the broadcast Mul."""
    pooled = b.node("GlobalAveragePool", [x])
    squeezed = b.conv(pooled, c, max(c // 4, 1), 1, 0)
    scale = b.node(gate, [b.conv(squeezed, max(c // 4, 1), c, 1, 0, relu=False)])
    return b.node("Mul", [x, scale])


@pytest.mark.parametrize("gate", ["Sigmoid", "HardSigmoid"])
@pytest.mark.parametrize("batch,c,hw,config", [(1, 16, 28, "edge"), (2, 24, 9, "default")])
@pytest.mark.parametrize("kernel", [1, 3])
def test_squeeze_excitation_bit_exact(gate, batch, c, hw, config, kernel):
    """The gate Mul of an image by a per-channel tensor computed at run time: applied by the 1x1 convolution
    that reads it as it loads its input tiles (one image), else one GateLayer (a 3x3 convolution reads padded
    windows; tiles of two images would need two gates)."""
    b = NetBuilder((batch, 3, hw, hw))
    x = b.conv("x", 3, c)
    projection = b.conv(_squeeze_excitation(b, x, c, gate), c, 8, kernel, kernel // 2, relu=False)
    npu = assert_bit_exact(b.network(projection), config=config)
    fused = batch == 1 and kernel == 1
    assert _layer_kinds(npu).count("GateLayer") == int(not fused)
    assert len(_gated(npu)) == int(fused)


def test_channel_gate_streams_many_chunks(tmp_path):
    """A small scratchpad: the gate streams in many pixel chunks, both slots reused."""
    b = NetBuilder((1, 3, 20, 20))
    x = b.conv("x", 3, 40, 1, 0)
    npu = _bit_exact_on(b.network(b.conv(_squeeze_excitation(b, x, 40, "Sigmoid"), 40, 8, relu=False)),
                        tmp_path, SMALL)
    layer = next(layer.body for layer in npu.compiled.layers if type(layer.body).__name__ == "GateLayer")
    assert len(layer.tiles(lambda t: 0, resolve_config(str(tmp_path / "config.json")))) > 4


@pytest.mark.parametrize("c,oc", [(40, 24), (100, 8)])
def test_channel_gate_in_the_projection_tiles(c, oc, tmp_path):
    """A small scratchpad: the 1x1 convolution that applies the gate runs many row tiles (and output-channel
    tiles, or input-channel steps), each step's input tile gated in place before the array reads it, both
    slots reused (checked mode sees any race)."""
    b = NetBuilder((1, 3, 20, 20))
    x = b.conv("x", 3, c, 1, 0)
    npu = _bit_exact_on(b.network(b.conv(_squeeze_excitation(b, x, c, "HardSigmoid"), c, oc, 1, 0, relu=False)),
                        tmp_path, SMALL)
    assert "GateLayer" not in _layer_kinds(npu)
    [layer] = _gated(npu)
    _, tiles, _ = layer.tiles(lambda t: 0, 0)
    steps = [step for tile in tiles for step in tile.steps]
    assert len(tiles) > 4 and sum(bool(step.prepare) for step in steps) > 4
    assert all(step.prepare[-1].mnemonic == "REQUANT_MUL" for step in steps if step.prepare)


@pytest.mark.parametrize("config,per_channel", [("edge", True), ("server", False)])
def test_channel_gate_in_a_projection_with_a_residual(config, per_channel):
    """EfficientNet's block end: the gated projection's epilogue adds the block's input (a residual operand loaded
    beside the gated input tiles), per-channel requantization of the projection beside the gate's per-tensor one."""
    b = NetBuilder((1, 3, 12, 12))
    x = b.conv("x", 3, 24, 1, 0)
    projection = b.conv(_squeeze_excitation(b, x, 24, "HardSigmoid"), 24, 24, 1, 0, relu=False)
    npu = assert_bit_exact(b.network(b.conv(b.node("Add", [projection, x]), 24, 8, 1, 0, relu=False)),
                           config=config, per_channel=per_channel)
    [layer] = _gated(npu)
    assert any(isinstance(op, AddTensor) for op in layer.epilogue)


@pytest.mark.parametrize("keepdims", [0, 1])
def test_spatial_reduce_mean_is_global_average_pooling(keepdims):
    """x.mean([2, 3]) (MNASNet, ShuffleNetV2): kept unlowered, quantized to the whole image's AveragePool."""
    b = NetBuilder((1, 3, 19, 19))
    mean = b.node("ReduceMean", [b.conv("x", 3, 16)], axes=[2, 3], keepdims=keepdims)
    if keepdims:
        out = b.conv(mean, 16, 10, 1, 0, relu=False)
    else:
        out = b.node("Gemm", [mean, b.weight((10, 16)), b.weight((10,))], transB=1)
    npu = assert_bit_exact(b.network(out), config="edge")
    kinds = npu.compiled.function.count_kinds()
    assert kinds.get("AveragePool") == 1 and "ReduceSum" not in kinds and "ReduceMean" not in kinds
    # the pool reads a convolution's result only: it runs in that convolution's tiles (gemm.py)
    assert [getattr(layer.body, "pool", None) for layer in npu.compiled.layers][0] == "avg"


@pytest.mark.parametrize("tail", ["Relu", "Clip"])
def test_a_network_ending_in_relu_runs_whole_on_the_npu(tail):
    """The last Max (and Min, ReLU6) is quantized too on a backend that cannot run it in float (before, the host
    took it: a partitioned function, no one binary); the CPU keeps it float (its result goes straight to the
    output: int8 would only add conversions)."""
    b = NetBuilder((1, 3, 9, 9))
    out = b.conv(b.conv("x", 3, 8), 8, 4, relu=False)
    if tail == "Clip":
        b.weights += [numpy_helper.from_array(np.float32(v), n) for v, n in ((0.0, "lo"), (6.0, "hi"))]
        out = b.node("Clip", [out, "lo", "hi"])
    else:
        out = b.node("Relu", [out])
    network = b.network(out)
    npu = assert_bit_exact(network, config="edge")  # one binary: nothing went to the host
    # int8 now, the clamp is the result type's own saturation (the quantization passes drop it)
    assert not any(t.elem.is_float for n in npu.compiled.function.nodes if n.kind in ("Max", "Min") for t in n.types)
    quant = QuantizationConfig(collect_profile(network, calibration_random(network, 2)))
    report = glowsdk.compile(network, "cpu", quantization=quant).compiled.quantization_report
    assert report.kept["no integer user"][{"Relu": "Max", "Clip": "Min"}[tail]] == 1


def _window_net(shape: tuple[int, ...], kernel: tuple[int, int], stride: tuple[int, int], pool: str | None = None):
    """A convolution (or a pool after a 1x1 convolution) with a window or stride past the 4-bit fields of ISA 1."""
    b = NetBuilder(shape)
    c = shape[1]
    if pool:
        out = b.node(pool, [b.conv("x", c, 8, 1, 0)], kernel_shape=list(kernel), strides=list(stride))
    else:
        out = b.node("Conv", ["x", b.weight((8, c, *kernel)), b.weight((8,))], strides=list(stride))
    return b.network(b.conv(out, 8, 4, 1, 0, relu=False))


@pytest.mark.parametrize("shape,kernel,stride,pool", [
    ((1, 3, 64, 48), (16, 16), (16, 16), None),      # a ViT's 16 x 16 patch embedding
    ((1, 1, 1, 800), (1, 80), (1, 16), None),        # an audio front end's kernel of 80, stride 16 (as 2-D)
    ((1, 4, 40, 40), (20, 17), (20, 3), "MaxPool"),
    ((1, 4, 36, 36), (18, 18), (16, 16), "AveragePool"),
])
def test_kernels_and_strides_past_15_bit_exact(shape, kernel, stride, pool):
    """CONFIG_MATMUL's and CONFIG_POOL's window and stride fields are 8 bits wide (ISA 2.0)."""
    npu = assert_bit_exact(_window_net(shape, kernel, stride, pool), config="edge")
    kinds = npu.compiled.function.count_kinds()
    assert kinds.get(pool or "Conv") == (1 if pool else 2)


def test_a_1d_audio_front_end_runs_as_images_of_one_row():
    """Conv1d kernel 80 stride 16, ReLU, MaxPool1d, Conv1d, mean over time, Gemm (an M5-style audio net): the
    1-D windows become 1 x k windows over N x C x 1 x L images (one_row.py), the mean a whole-row pool."""
    b = NetBuilder((1, 1, 1600))
    x = b.node("Relu", [b.node("Conv", ["x", b.weight((8, 1, 80)), b.weight((8,))], strides=[16])])
    x = b.node("MaxPool", [x], kernel_shape=[4], strides=[4])
    x = b.node("Relu", [b.node("Conv", [x, b.weight((12, 8, 3)), b.weight((12,))], pads=[1, 1])])
    mean = b.node("ReduceMean", [x], axes=[2], keepdims=0)
    npu = assert_bit_exact(b.network(b.node("Gemm", [mean, b.weight((5, 12)), b.weight((5,))], transB=1)))
    windows = [n for n in npu.compiled.function.nodes if n.kind in ("Conv", "MaxPool", "AveragePool")]
    assert len(windows) == 4 and all(len(n.kernel) == 2 and n.kernel[0] == 1 for n in windows)
    # the windows pass images of one row to each other: no Reshape back to N x C x L between them, no relayout
    assert [layer.kind for layer in npu.compiled.layers].count("Copy") == 1  # the output's, for the host


def test_an_accumulator_above_2_mib_compiles_and_runs(tmp_path):
    """REQUANT addresses its bias row in 19 bits (2 MiB); with 4 MiB of accumulator a convolution's tiles may
    reach past that, so the bias rows sit at the bottom (the compiler raised an encoding error before). The
    image is 128 pixels wide: on 64-pixel rows the tiler now prefers tiles under 2 MiB."""
    b = NetBuilder((1, 64, 64, 128))
    network = b.network(b.conv(b.conv("x", 64, 128, 1, 0), 128, 8, 1, 0, relu=False))
    npu = _bit_exact_on(network, tmp_path, {"preset": "server", "name": "big", "accumulator_bytes": 4 << 20})
    gemm = next(layer.body for layer in npu.compiled.layers if layer.kind == "Conv")
    assert 2 * gemm.tiling.rows * gemm.shape.out_width * gemm.tiling.n >= 1 << 19  # the old placement overflowed


def test_the_vector_width_is_a_configuration_parameter(tmp_path):
    """vector_lanes sets the vector engine's width as array_rows/array_cols set the array's: the network's
    vector layers (here a channel gate and a global pool) take fewer cycles on more lanes, bit-exact on both."""
    b = NetBuilder((1, 3, 24, 24))
    x = b.conv("x", 3, 32, 1, 0)
    network = b.network(b.conv(_squeeze_excitation(b, x, 32, "Sigmoid"), 32, 8, 1, 0, relu=False))
    cycles = {}
    for lanes in (8, 64):
        (tmp_path / str(lanes)).mkdir()
        npu = _bit_exact_on(network, tmp_path / str(lanes), {"preset": "edge", "name": "lanes", "vector_lanes": lanes})
        config = resolve_config(str(tmp_path / str(lanes) / "config.json"))
        cycles[lanes] = run_binary(npu.compiled.binary, config, network.random_inputs(0)).result.cycles
    assert cycles[64] < cycles[8]


def test_a_pool_window_the_scratchpad_cannot_hold_is_refused_in_one_line():
    """A 250-row window over 300-pixel rows needs 75,000 bytes for one output row of one channel, more than a
    quarter of the edge scratchpad: refused with the reason (a host partition with a fallback), not a crash."""
    b = NetBuilder((1, 3, 300, 300))
    network = b.network(b.node("AveragePool", [b.conv("x", 3, 4, 1, 0)], kernel_shape=[250, 250]))
    quant = QuantizationConfig(collect_profile(network, calibration_random(network, 1)))
    with pytest.raises(UnsupportedOpsError, match=r"a 250x250 window over 300-pixel rows does not "
                                                   r"fit the 'edge' configuration's scratchpad"):
        glowsdk.compile(network, "npu", quantization=quant, config="edge", fallback=None)
