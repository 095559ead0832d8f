"""When a convolution layer has stored a row tile, against when its load engine reaches a prefetch after its loads.

The layer before loads the next layer's first input rows once it has stored them (prefetch.py), after its own last
load, which waits for the matrix work of the step two back: about when the array ends its third-to-last step. Rows
that straddle two row tiles before its last load in two (`prefetch.split_row`), the first piece once the earlier tile
is stored, only where the later one stores after that: else the second piece costs a request latency and saves
nothing (resnet50 on server: conv__1's 18 + 1 rows for conv__2 wait 922 cycles less in two, each of conv__5's and
conv__8's 128 more, conv__17's and conv__20's 71).
"""
from __future__ import annotations

from sim.timing import vector_cycles as lane_cycles

from .epilogue import vector_passes
from .gemm import GemmLayer
from .step_cost import step_array_cycles, transfer_cycles


def stored_late(layer: GemmLayer, row: int) -> bool:
    """Whether the layer's row tile from output row `row` (not its last) stores its last output-channel tile after
    the array ends the layer's third-to-last step: once its own last step's array work ends, its vector work and
    STORE run while the steps after it up to that one keep the array busy."""
    s, t, config = layer.shape, layer.tiling, layer.config
    per_tile = -(-s.out_channels // t.n)
    tiles = layer.row_tiles()
    k = next(i for i, (start, _) in enumerate(tiles) if start == row)
    steps = [step_array_cycles(s, end - start, t.n, config) for start, end in tiles for _ in range(per_tile)]
    last = (k + 1) * per_tile - 1
    rows, n = tiles[k][1] - tiles[k][0], min(t.n, s.out_channels)
    run = s.out_width * n if layer.result.pixel_stride == n else n  # (bytes one after another in DRAM)
    runs = rows * s.out_width * n // run
    store = transfer_cycles(runs * -(-run // config.dma_burst_bytes), runs * -(-run // config.dram_bytes_per_cycle),
                            config)
    drain = lane_cycles(rows * s.out_width * n * vector_passes(layer.epilogue), config) + store
    return drain > sum(steps[last + 1:len(steps) - 2])
