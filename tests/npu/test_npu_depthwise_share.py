"""A depthwise convolution whose last channels the array computes beside the vector engine (depthwise.py).

The vector engine alone does a depthwise layer at lane width and leaves the array idle; where the estimate says
both engines finish sooner, the array takes whole array widths of channels as block diagonals (each tap's weight on
the diagonal of a width x width block, read through im2col from the tile the VMACs read). Each case runs in checked
mode and must give the reference evaluator's bytes on the quantized graph: the two engines' int32 sums, their
requantization by blocks, a table activation and a fused global pool must not tell which engine made a channel.
"""
from __future__ import annotations

import pytest

from glowsdk.backends.npu.depthwise import array_share
from glowsdk.backends.npu.step_cost import ConvShape
from isa import PRESETS

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact


def _depthwise_net(c: int, hw: int, k: int, stride: int, activation: str | None, pool: bool):
    b = NetBuilder((1, c, hw, hw))
    stem = b.conv("x", c, c, 1, 0)
    out = b.node("Conv", [stem, b.weight((c, 1, k, k)), b.weight((c,))], group=c, pads=[k // 2] * 4,
                 strides=[stride] * 2)
    if activation:
        out = b.node(activation, [out])
    if pool:  # squeeze-and-excitation's pool reads the depthwise result beside the gate
        gate = b.node("HardSigmoid", [b.conv(b.node("GlobalAveragePool", [out]), c, c, 1, 0, relu=False)])
        out = b.node("Mul", [out, gate])
    return b.network(b.conv(out, c, 8, 1, 0, relu=False))


def _depthwise(npu):
    [layer] = [layer.body for layer in npu.compiled.layers if type(layer.body).__name__ == "DepthwiseLayer"]
    return layer


@pytest.mark.parametrize("c,hw,k,stride,activation,pool,config", [
    (136, 28, 3, 1, None, False, "default"),          # ShuffleNet's stage-2 depthwise: two array widths
    (112, 28, 3, 2, "Relu", False, "default"),        # stride 2, a clamp in REQUANT
    (96, 14, 5, 1, "HardSwish", True, "default"),     # MobileNetV3's: 5x5, a table in REQUANT, the SE pool fused
    (48, 20, 3, 1, None, False, "edge"),              # a 16-column array
])
def test_array_share_bit_exact(c, hw, k, stride, activation, pool, config):
    npu = assert_bit_exact(_depthwise_net(c, hw, k, stride, activation, pool), config=config)
    layer = _depthwise(npu)
    width = PRESETS[config].array_cols
    assert layer.share > 0 and layer.share % width == 0 and layer.width == width
    assert layer.pool == ("avg" if pool else None)
    oh = (hw - 1) // stride + 1
    ops = [i.mnemonic for i in npu.compiled.binary.instructions]
    assert ops.count("VMAC") == k * k * oh  # the vector engine's taps: one per tap and output row
    diagonals = [i for i in npu.compiled.binary.instructions if i.mnemonic == "MATMUL" and i.k == k * k * width]
    assert len(diagonals) == len(layer.row_tiles()) * layer.share // width  # a product per array width and row tile


def test_array_takes_no_share_where_its_folds_are_mostly_empty():
    """A 7 x 7 image: each product pays a whole fold for a row tile of 7 or 14 pixels, so the vector engine keeps
    every channel; a 28 x 28 image's row tiles fill the array's folds and it takes two widths."""
    config = PRESETS["default"]
    small = ConvShape(544, 7, 7, 544, 7, 7, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1))
    large = ConvShape(136, 28, 28, 136, 28, 28, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1))
    assert array_share(small, 2, config) == 0
    assert array_share(large, 7, config) == 64
