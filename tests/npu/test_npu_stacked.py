"""Stacked images: a tile holds several batch images one above another, so small images fill the array's folds.

A convolution whose images are small (a ResNet's 7x7 and 14x14 stages at batch 8) computes each image's few
pixels in partly filled folds; stacking whole images in one tile, with zero-point rows between them, lets the
array run them as one tall image and discard the output rows whose windows span two images
(`Tiling.images`, `ConvShape.stack_period`). Each case is bit-exact with the reference evaluator in the
simulator's checked mode (`assert_bit_exact`), and the layer intended is stacked.
"""
from __future__ import annotations

import pytest

from glowsdk.backends.npu.gemm import GemmLayer
from glowsdk.backends.npu.step_cost import ConvShape, stacked_rows
from glowsdk.backends.npu.tiling import Tiling
from isa import PRESETS

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact


def _stacked(npu) -> list[GemmLayer]:
    return [layer.body for layer in npu.compiled.layers
            if isinstance(layer.body, GemmLayer) and layer.body.tiling.images > 1]


@pytest.mark.parametrize("batch,c,oc,hw,k,pad,stride,config", [
    (8, 64, 256, 7, 3, 1, 1, "server"),   # the bottom padding row is read: a second LOAD for the last image
    (3, 32, 128, 14, 3, 1, 2, "server"),  # stride 2: the period rounded up to an even row count, one LOAD
    (5, 24, 24, 6, 5, 2, 1, "default"),   # a 5x5 window, two padding rows between images
])
def test_stacked_convolution_bit_exact(batch, c, oc, hw, k, pad, stride, config):
    """Stacking pays where a layer has several output-channel tiles to pipeline (one tile of all the images
    would wait for all their loads and leave all their vector work and stores after the array)."""
    b = NetBuilder((batch, c, hw, hw))
    first = b.conv("x", c, c, 1, 0)
    out = b.conv(first, c, oc, k, pad, stride)
    npu = assert_bit_exact(b.network(b.conv(out, oc, c, 1, 0, relu=False)), config=config)
    stacked = _stacked(npu)
    assert stacked and all(layer.shape.kh == k for layer in stacked)


def test_stacked_convolution_with_residual_add_bit_exact():
    """The residual operand of a stacked tile is loaded as one block of all its images' rows."""
    b = NetBuilder((8, 32, 7, 7))
    first = b.conv("x", 32, 256, 1, 0)
    body = b.conv(first, 256, 256, 3, 1, 1, relu=False)
    out = b.node("Relu", [b.node("Add", [body, first])])
    npu = assert_bit_exact(b.network(b.conv(out, 256, 16, 1, 0, relu=False)), config="server")
    assert any(layer.epilogue for layer in _stacked(npu))


def test_stack_period_keeps_windows_within_their_image():
    """Every output row of a stacked image reads only its own image's rows and padding, and the stack's
    output rows are each image's own, the period apart."""
    for h, k, pad, stride in [(7, 3, 1, 1), (14, 3, 1, 2), (6, 5, 2, 1), (9, 1, 0, 1), (8, 3, 0, 2)]:
        oh = (h + 2 * pad - k) // stride + 1
        s = ConvShape(4, h, h, 4, oh, oh, k, k, (stride, stride), (1, 1), (pad, pad, pad, pad))
        period = s.stack_period()
        assert period % stride == 0 and period >= pad + h
        for image in range(3):
            first, last = image * period, image * period + s.in_rows(oh) - 1  # rows the image's outputs read
            assert first >= (image - 1) * period + pad + h  # below the image before's rows
            assert last < (image + 1) * period + pad  # above the next image's rows
        assert stacked_rows(s, oh, 3) == 2 * period // stride + oh


def test_stacking_fills_the_server_arrays_folds():
    """ResNet's 3x3 convolution on 7x7 images at batch 8: one image is 49 of a fold's 64 rows; eight stacked
    images (63 rows of 7 pixels, one discarded between each two) take 7 folds instead of 8."""
    s = ConvShape(512, 7, 7, 512, 7, 7, 3, 3, (1, 1), (1, 1), (1, 1, 1, 1))
    tiling = Tiling(7, 64, 512, 0, 0.0, 0, images=8)
    assert tiling.array_rows(s) * s.out_width == 441 <= 7 * PRESETS["server"].array_rows


def test_stacked_convolution_with_global_pool_bit_exact():
    """A global average pool fused into a stacked tile reduces each image to its own row, stored as one block."""
    b = NetBuilder((5, 32, 7, 7))
    first = b.conv("x", 32, 32, 1, 0)
    out = b.node("GlobalAveragePool", [b.conv(first, 32, 48, 3, 1, 1)])
    npu = assert_bit_exact(b.network(b.conv(out, 48, 16, 1, 0, relu=False)), config="server")
    assert any(layer.pool for layer in _stacked(npu))
