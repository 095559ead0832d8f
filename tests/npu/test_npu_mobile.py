"""Mobile networks on the NPU: one layout for the whole graph, activations in the producing layer.

An inverted residual block (MobileNetV2: 1x1 expansion, ReLU6, depthwise 3x3, ReLU6, 1x1 projection,
residual Add) must compile into convolution layers only: the ReLU6's Min and the residual Add run in
the epilogue of the (grouped) convolution that produces them, and no layout Copy appears between
layers that all read and write channels-innermost images. ShuffleNet's channel shuffle (Reshape,
Transpose, Reshape) must move no byte: the convolution before it writes its channels in shuffled
order. A convolution whose only use is a channel Concat writes its slice of the Concat's result.
Each case runs in checked mode and must give the reference evaluator's bytes on the quantized
graph.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import numpy_helper

from glowsdk.backends.npu.grouped import dram_cycles, groups_per_layer
from glowsdk.backends.npu.step_cost import ConvShape
from isa import PRESETS
from sim.timing import macs

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact


def _relu6(b: NetBuilder, x: str) -> str:
    if not any(w.name == "six" for w in b.weights):
        b.weights += [numpy_helper.from_array(np.float32(0), "zero"), numpy_helper.from_array(np.float32(6), "six")]
    return b.node("Clip", [x, "zero", "six"])


def inverted_residual(c: int = 16, expand: int = 4, hw: int = 14, stride: int = 1):
    b = NetBuilder((1, c, hw, hw))
    stem = b.conv("x", c, c, 1, 0)
    wide = c * expand
    up = _relu6(b, b.conv(stem, c, wide, 1, 0, relu=False))
    dw = b.node("Conv", [up, b.weight((wide, 1, 3, 3)), b.weight((wide,))], group=wide, pads=[1] * 4,
                strides=[stride] * 2)
    down = b.conv(_relu6(b, dw), wide, c, 1, 0, relu=False)
    out = b.node("Add", [down, stem]) if stride == 1 else down
    return b.network(b.conv(out, c, 8, 1, 0, relu=False))


@pytest.mark.parametrize("config,stride", [("default", 1), ("edge", 2)])
def test_inverted_residual_runs_as_convolution_layers_only(config, stride):
    npu = assert_bit_exact(inverted_residual(stride=stride), config=config)
    assert "Min" in {n.kind for n in npu.compiled.function.nodes}  # the quantized graph clamps at 6 ...
    layers = npu.compiled.layers
    copies = [layer.name for layer in layers if layer.kind == "Copy"]
    assert {layer.kind for layer in layers} == {"Conv", "Copy"}  # ... inside the convolution layers
    assert copies == list(npu.compiled.binary.bindings.outputs)  # only the output, written for the host


def shuffle_unit(groups: int, producer_groups: int, c: int = 24, hw: int = 10):
    """ShuffleNet's unit: a (grouped) 1x1 convolution with ReLU, the channel shuffle, a depthwise 3x3, a grouped
    1x1 convolution."""
    b = NetBuilder((1, c, hw, hw))
    first = b.node("Conv", [b.conv("x", c, c, 1, 0), b.weight((c, c // producer_groups, 1, 1)), b.weight((c,))],
                   group=producer_groups)
    shapes = [f"shape{k}" for k in range(2)]
    b.weights += [numpy_helper.from_array(np.array(s, np.int64), name)
                  for s, name in zip(((1, groups, c // groups, hw, hw), (1, c, hw, hw)), shapes)]
    split = b.node("Reshape", [b.node("Relu", [first]), shapes[0]])
    joined = b.node("Reshape", [b.node("Transpose", [split], perm=[0, 2, 1, 3, 4]), shapes[1]])
    dw = b.node("Conv", [joined, b.weight((c, 1, 3, 3)), b.weight((c,))], group=c, pads=[1] * 4)
    last = b.node("Conv", [dw, b.weight((c, c // groups, 1, 1)), b.weight((c,))], group=groups)
    return b.network(b.conv(last, c, 8, 1, 0, relu=False))


@pytest.mark.parametrize("groups,producer_groups,config", [(4, 4, "default"), (3, 1, "edge"), (2, 4, "default")])
def test_channel_shuffle_is_the_order_the_producer_writes(groups, producer_groups, config):
    npu = assert_bit_exact(shuffle_unit(groups, producer_groups), config=config)
    assert "Transpose" in {n.kind for n in npu.compiled.function.nodes}  # the quantized graph shuffles ...
    layers = npu.compiled.layers
    assert {layer.kind for layer in layers} == {"Conv", "Copy"}  # ... and the binary moves no byte for it
    assert [layer.name for layer in layers if layer.kind == "Copy"] == list(npu.compiled.binary.bindings.outputs)


def test_grouped_conv_before_a_shuffle_of_its_groups_runs_them_side_by_side():
    """GMATMUL: the grouped 1x1 before a shuffle of as many groups runs its groups on column blocks of the array,
    writing them interleaved (the shuffle's order): its matrix work is the useful MACs only, no block off the
    diagonal; the grouped 1x1 after the depthwise one (no shuffle) writes its groups one after another."""
    c, hw, groups = 24, 10, 4
    npu = assert_bit_exact(shuffle_unit(groups, groups, c, hw), config="default")
    products = [i for i in npu.compiled.binary.instructions if i.mnemonic == "GMATMUL"]
    assert {(i.groups, i.interleave) for i in products} <= {(groups, 0), (groups, 1)}
    shuffled = [i for i in products if i.interleave]
    assert sum(macs(i) for i in shuffled) == hw * hw * c * c // groups
    assert all(i.k == c // groups for i in shuffled)


def test_one_block_layer_halves_its_first_and_last_row_tiles_where_the_array_takes_no_longer():
    """ShuffleNet's stage 2 shuffle convolution (136 channels, 4 groups, 28 x 28): its output-stationary steps of
    4 rows are 4 array passes of 32 pixels, two of 2 rows as many, so the first and the last row tile are halved
    (the array starts after half the load; half the vector work and store follow it)."""
    npu = assert_bit_exact(shuffle_unit(4, 4, 136, 28), config="default")
    layer = next(layer.body for layer in npu.compiled.layers if getattr(layer.body, "packing", None) is not None
                 and layer.body.packing.interleave)
    sizes = [b - a for a, b in layer.row_tiles()]
    assert sum(sizes) == 28 and sizes[0] == sizes[-1] == layer.tiling.rows // 2 < max(sizes)
    assert layer.steps() == len(sizes) == len(layer.tiles(lambda tensor: 0, 0)[1])


def depthwise_net(c: int, hw: int, k: int, stride: int, dilation: int = 1, residual: bool = False, batch: int = 1):
    b = NetBuilder((batch, c, hw, hw))
    stem = b.conv("x", c, c, 1, 0)
    pad = dilation * (k // 2)
    dw = b.node("Conv", [stem, b.weight((c, 1, k, k)), b.weight((c,))], group=c, pads=[pad] * 4,
                strides=[stride] * 2, dilations=[dilation] * 2)
    out = _relu6(b, dw)
    if residual:
        out = b.node("Add", [out, stem])
    return b.network(b.conv(out, c, 8, 1, 0, relu=False))


@pytest.mark.parametrize("c,hw,k,stride,dilation,residual,config,per_channel,batch", [
    (24, 13, 3, 1, 1, True, "default", False, 1),    # ReLU6 and a residual Add in the epilogue
    (40, 15, 5, 2, 1, False, "edge", True, 1),       # 5x5 stride 2, per-channel weights, odd sizes
    (16, 12, 3, 1, 2, False, "edge", False, 1),      # dilated
    (256, 40, 3, 1, 1, False, "edge", False, 1),     # one output row of every channel overflows the accumulator
    (32, 10, 3, 2, 1, False, "server", False, 2),    # a batch of two
])
def test_depthwise_runs_on_the_vector_engine(c, hw, k, stride, dilation, residual, config, per_channel, batch):
    npu = assert_bit_exact(depthwise_net(c, hw, k, stride, dilation, residual, batch), config=config,
                           per_channel=per_channel)
    [layer] = [layer.body for layer in npu.compiled.layers if type(layer.body).__name__ == "DepthwiseLayer"]
    assert layer.block == c or c == 256 and layer.block < c
    assert not any(type(op).__name__ == "Clamp8" for op in layer.epilogue)  # the ReLU6 bounds REQUANT's output
    assert {layer.kind for layer in npu.compiled.layers} == {"Conv", "Copy"}
    oh = (hw + 2 * dilation * (k // 2) - dilation * (k - 1) - 1) // stride + 1
    vmacs = sum(i.mnemonic == "VMAC" for i in npu.compiled.binary.instructions)
    assert vmacs == batch * k * k * oh * -(-c // layer.block)  # a tap per output row and channel block
    sizes = [b - a for a, b in layer.row_tiles()]  # the first and last row tiles halved: shorter fill and drain
    assert sum(sizes) == oh and (len(sizes) == 1 or max(sizes[0], sizes[-1]) <= -(-layer.rows // 2))


def fire_module(c: int = 16, hw: int = 12):
    """SqueezeNet's fire module: its two expand convolutions write their channels of the Concat's result."""
    b = NetBuilder((1, c, hw, hw))
    squeeze = b.conv(b.conv("x", c, c, 1, 0), c, 8, 1, 0)
    fire = b.node("Concat", [b.conv(squeeze, 8, 16, 1, 0), b.conv(squeeze, 8, 16, 3, 1)], axis=1)
    return b.network(b.conv(fire, 32, 8, 1, 0, relu=False))


def test_shortcut_pool_rescaled_into_its_concat_slice():
    """ShuffleNet's downsampling unit: Concat(AveragePool 3x3 stride 2 of x, a stride-2 branch). The Rescale to the
    Concat's scale after the pool is a table its tiles apply, and the pool writes its slice of the Concat: no
    Rescale or Copy layer."""
    b = NetBuilder((1, 16, 12, 12))
    stem = b.conv("x", 16, 16, 1, 0)
    pooled = b.node("AveragePool", [stem], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    joined = b.node("Concat", [b.conv(stem, 16, 24, 3, 1, 2), pooled], axis=1)
    npu = assert_bit_exact(b.network(b.conv(joined, 40, 8, 1, 0, relu=False)), config="default")
    assert any(n.kind == "Rescale" and n.input.node.kind == "AveragePool" for n in npu.compiled.function.nodes)
    [pool] = [layer.body for layer in npu.compiled.layers if layer.kind == "AveragePool"]
    assert pool.table is not None
    assert [layer.name for layer in npu.compiled.layers if layer.kind in ("Copy", "Rescale")] == \
        list(npu.compiled.binary.bindings.outputs)


def test_concat_parts_are_written_in_place():
    npu = assert_bit_exact(fire_module(), config="default")
    assert "Concat" in {n.kind for n in npu.compiled.function.nodes}
    assert [layer.name for layer in npu.compiled.layers if layer.kind == "Copy"] == \
        list(npu.compiled.binary.bindings.outputs)


@pytest.mark.parametrize("activation", ["HardSwish", "Sigmoid"])
def test_table_activations_run_in_the_producing_layer(activation):
    """MobileNetV3's HardSwish, EfficientNet's SiLU gate (a Sigmoid here, as opset 13 spells it): int8 tables applied
    in the epilogue of the 1x1 and the depthwise convolution before them, no TableLookup layer."""
    b = NetBuilder((1, 16, 12, 12))
    wide = b.node(activation, [b.conv("x", 16, 32, 1, 0, relu=False)])
    dw = b.node("Conv", [wide, b.weight((32, 1, 3, 3)), b.weight((32,))], group=32, pads=[1] * 4)
    npu = assert_bit_exact(b.network(b.conv(b.node(activation, [dw]), 32, 8, 1, 0, relu=False)), config="default")
    assert "TableLookup" in {n.kind for n in npu.compiled.function.nodes}
    assert {layer.kind for layer in npu.compiled.layers} == {"Conv", "Copy"}


def test_narrow_groups_share_a_layer_when_their_dram_runs_are_short():
    """A group of 6 channels per pixel is a 6-byte DRAM request: four such layers (ShuffleNet's first grouped 1x1)
    keep the DRAM busy over four times as long as one layer of all four groups, whose pixels are contiguous."""
    config = PRESETS["default"]
    narrow = ConvShape(6, 56, 56, 28, 56, 56)
    four_layers, one_layer = 4 * dram_cycles(narrow, 4, 1, config), dram_cycles(narrow, 4, 4, config)
    assert four_layers > 4 * one_layer
    assert groups_per_layer(narrow, 4, config) == 4
    wide = ConvShape(136, 7, 7, 136, 7, 7)  # ShuffleNet's last stage: a group is a whole burst, the array decides
    assert groups_per_layer(wide, 4, config) == 1


def test_a_depthwise_row_longer_than_a_vmac_runs_on_the_array():
    b = NetBuilder((1, 2, 3, 4200))
    dw = b.node("Conv", [b.conv("x", 2, 2, 1, 0), b.weight((2, 1, 3, 3)), b.weight((2,))], group=2, pads=[1] * 4)
    npu = assert_bit_exact(b.network(b.conv(dw, 2, 2, 1, 0, relu=False)), config="edge")
    bodies = {type(layer.body).__name__ for layer in npu.compiled.layers}
    assert "DepthwiseLayer" not in bodies and "GemmLayer" in bodies


def shufflenet_v2_unit(c: int = 16, hw: int = 8):
    """ShuffleNetV2's unit: the channels split in two (Slices), a branch of convolutions on the second half, the
    Concat of the first half (a row-major Slice) and the branch, then the channel shuffle (Reshape, Transpose,
    Reshape)."""
    b = NetBuilder((1, c, hw, hw))
    h, half = b.conv("x", c, c, 1, 0), c // 2

    def ints(values: list[int]) -> str:
        name = b._name("c")
        b.weights.append(numpy_helper.from_array(np.asarray(values, np.int64), name))
        return name

    x1 = b.node("Slice", [h, ints([0]), ints([half]), ints([1])])
    x2 = b.node("Slice", [h, ints([half]), ints([c]), ints([1])])
    cat = b.node("Concat", [x1, b.conv(b.conv(x2, half, half, 1, 0), half, half, 3, 1)], axis=1)
    grouped = b.node("Reshape", [cat, ints([1, 2, half, hw, hw])])
    shuffled = b.node("Reshape", [b.node("Transpose", [grouped], perm=[0, 2, 1, 3, 4]), ints([1, c, hw, hw])])
    return b.network(b.conv(shuffled, c, 8, 1, 0, relu=False))


def test_a_concat_with_a_row_major_part_stays_row_major():
    """The branch's convolution does not write into the Concat (that would make it NHWC): the row-major half is
    not copied into an image pixel by pixel and the whole Concat back to row-major for the shuffle's Reshape
    (shufflenet_v2 5.95M -> 3.86M cycles)."""
    npu = assert_bit_exact(shufflenet_v2_unit(), config="default")
    copies = [layer.name for layer in npu.compiled.layers if layer.kind == "Copy"]
    assert [name for name in copies if name.startswith("concat")] == ["concat/0", "concat/1"]
