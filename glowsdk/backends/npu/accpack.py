"""A layer's last tile in the slot of the tile before, after its rows: it waits for no vector work.

Tiles alternate between two accumulator slots (pipeline.py), so tile t waits for the epilogue of tile t - 2. A
layer's last tiles are often small (the last row tile's tail, halved by `GemmLayer.row_tiles`, each of its
output-channel tiles): the array finishes the second-to-last in a few hundred cycles, then waits for the whole
epilogue of the full tile before it (REQUANT, a residual addition). Where the last two tiles fit in one slot
together, the last takes the words after the second-to-last's in that slot, which the array cleared when it
waited for the epilogue of the tile two before that: it waits for nothing (`Tile.packed`).
"""
from __future__ import annotations

from .step_cost import stacked_rows


def packed_offset(layer) -> int | None:
    """Where the last tile of a `GemmLayer` starts in the second-to-last tile's slot (its words: that tile's), or
    None where it does not pack: fewer than three tiles (the last waits for no epilogue), a window pool (its tiles
    keep a running maximum across them), or the two do not fit in one slot."""
    if layer.window:
        return None
    words = tile_words(layer)
    if len(words) < 3 or words[-2] + words[-1] > layer.acc_slot():
        return None
    return words[-2]


def tile_words(layer) -> list[int]:
    """The accumulator words each tile of a `GemmLayer` writes, in the order of its tiles (`GemmLayer.tiles`)."""
    s, t = layer.tiled_shape(), layer.tiling
    words = []
    for b in range(0, layer.source.batch, t.images):
        images = min(t.images, layer.source.batch - b)
        for oy0, oy1 in layer.row_tiles():
            rows = stacked_rows(s, oy1 - oy0, images) * s.out_width
            words += [rows * min(t.n, s.out_channels - n0) for n0 in range(0, s.out_channels, t.n)]
    return words
