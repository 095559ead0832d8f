"""How many output rows a convolution tile takes (tiling.choose_tiling): the most that fit, or fewer.

Where the input loads are the busiest stream (a 1 x 1 squeeze of many channels into few), the array's work on the
last tile follows the last load, so tiles smaller than the most that fit finish sooner: the tiler costs the image
shared by one and two tiles more too. A tile that pools the whole image (a fused global pool) keeps every row.
"""
from __future__ import annotations

from glowsdk.backends.npu.step_cost import ConvShape
from glowsdk.backends.npu.tiling import Tiling, choose_tiling, estimate
from isa import PRESETS

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact


def test_a_load_bound_squeeze_takes_fewer_rows_than_fit_bit_exact():
    # SqueezeNet's fire3 squeeze: 128 channels in, 16 out, over 55 x 55 pixels
    b = NetBuilder((1, 128, 55, 55))
    npu = assert_bit_exact(b.network(b.conv(b.conv("x", 128, 16, 1, 0), 16, 16, 1, 0, relu=False)),
                           config="default")
    layer = npu.compiled.layers[0].body
    s, t = layer.shape, layer.tiling
    config = PRESETS["default"]
    chosen = choose_tiling(s, config, 0, vector_passes=1)
    assert s.channels == 128 and t.rows < s.out_height
    fullest = max(rows for rows in range(1, s.out_height + 1)
                  if 2 * rows * s.out_width * t.n + s.out_channels <= config.accumulator_bytes // 4
                  and Tiling(rows, t.n, t.c, 0).spad_bytes(s) <= config.scratchpad_bytes)
    assert chosen.rows < fullest  # fewer rows than fit ...
    assert chosen.cycles < estimate(s, fullest, t.n, t.c, config)[1]  # ... because they are estimated faster


def test_a_fused_global_pool_keeps_every_row_in_its_tile():
    # SqueezeNet's classifier: 512 channels into 1000 over 13 x 13 pixels, then its global average pool
    shape = ConvShape(512, 13, 13, 1000, 13, 13)
    config = PRESETS["default"]
    assert choose_tiling(shape, config, 0).rows < shape.out_height  # alone, fewer rows are estimated faster
    assert choose_tiling(shape, config, 0, vector_passes=2, whole_image=True).rows == shape.out_height
