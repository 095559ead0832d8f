"""A layer's first step streamed: its input loaded in row chunks, each computed by a MATMUL of its own.

The first step of a layer waits for its whole input tile before the array starts, and nothing overlaps that
wait (the layer before has finished). When the step runs output-stationary, cutting its MATMUL at whole output
rows that fill the array's folds costs no fold, so the first chunk's rows start while the rest load
(`expected.stream_rows`, `tile_loads.streamed_step`, `Step.parts`); weight-stationary, a cut costs each fold's fill and
drain once more, and the step is cut where the wait saved is the larger. Each case is bit-exact with the
reference evaluator in the simulator's checked mode (`assert_bit_exact`), and its first layer streams.
"""
from __future__ import annotations

import pytest

from glowsdk.backends.npu.expected import stream_rows
from glowsdk.backends.npu.step_cost import ConvShape
from isa import PRESETS

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact


def _first_layer_products(npu) -> int:
    binary = npu.compiled.binary
    first = binary.debug[0]
    return sum(i.spec.mnemonic == "MATMUL" for i in binary.instructions[first.start:first.stop])


@pytest.mark.parametrize("c,h,w,k,pad,config", [
    (512, 14, 14, 1, 0, "server"),  # a deep 1x1 on 14x14: chunks of 9 rows (126 pixels, two folds)
    (256, 9, 9, 3, 1, "default"),   # a 3x3 with padding: the last chunk's window ends in the bottom padding
    (192, 11, 11, 3, 0, "edge"),
    (64, 5, 32, 5, 2, "server"),    # the last chunk (one row) adds padding rows only: the chunk before loads them
])
def test_streamed_first_step_bit_exact(c, h, w, k, pad, config):
    b = NetBuilder((1, c, h, w))
    out = b.conv("x", c, 64, k, pad)
    npu = assert_bit_exact(b.network(b.conv(out, 64, 16, 1, 0, relu=False)), config=config)
    tiles = -(-64 // npu.compiled.layers[0].body.tiling.n)
    assert _first_layer_products(npu) > tiles  # the first tile's step is several products


def test_stream_rows_keep_the_folds():
    """Chunks are whole rows, each at least a fold of pixels, and together take the uncut tile's folds."""
    fold = PRESETS["server"].array_rows
    for rows, width in [(14, 14), (51, 7), (18, 28), (5, 64), (3, 7)]:
        s = ConvShape(8, rows, width, 8, rows, width)
        chunks = stream_rows(s, rows, 8, 8, "os", PRESETS["server"])
        assert chunks[0][0] == 0 and chunks[-1][1] == rows
        assert all(a < b for a, b in chunks) and all(x[1] == y[0] for x, y in zip(chunks, chunks[1:]))
        assert sum(-(-(b - a) * width // fold) for a, b in chunks) == -(-rows * width // fold)
        assert all((b - a) * width >= fold for a, b in chunks[:-1])


def test_weight_stationary_cuts_only_where_the_wait_saved_pays():
    """A deep input loads long enough to pay for one more fill of the folds; a shallow short one does not."""
    server = PRESETS["server"]
    deep = ConvShape(512, 36, 28, 64, 36, 28)
    assert len(stream_rows(deep, 36, 512, 64, "ws", server)) > 1
    shallow = ConvShape(64, 4, 56, 256, 4, 56)
    assert stream_rows(shallow, 4, 64, 256, "ws", server) == [(0, 4)]
