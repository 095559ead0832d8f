"""Pooling over the whole image (global average or max pooling) of any size, on the vector engine.

POOL's window fields and the scratchpad bound a windowed pool; a window covering the whole image needs
neither, because its result is one reduction per channel: the image streams through the scratchpad in
chunks of rows (or of pixels, when a row is too long), each folded into the tile's int32 accumulator row
by REDUCE (sum, or max), and the tile ends with one division. Average: VDIV of the sum by the pixel count
(a constant row loaded once, in the layer's prologue) rounds half to even, exactly AveragePool's integer
semantics (`numerics.rounded_average`) without a POOL; the mean of int8 codes is an int8 code, so the
result keeps the input's type. Max: VADDI 0 copies the maximum back to int8. A tile is one batch element
and one block of channels (VDIV counts columns in 12 bits).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from isa.config import ArchConfig

from ...errors import UnsupportedError
from .instructions import CONFIG_LOAD, CONFIG_STORE, LOAD, REDUCE, STORE, VADDI, VDIV, Op
from .pipeline import Step, Tile
from .scratchpad import align, align_down
from .tensors import DramTensor
from .tile_loads import Image

MAX_CHANNELS = 4095
"""VDIV's column count is 12 bits."""
MAX_REDUCE_ROWS = 65535
"""REDUCE counts rows (pixels of a chunk) in 16 bits."""


STEPS = 4
"""Chunks an image is cut into at least (when it has the rows): the DMA and the vector engine overlap."""


@dataclass
class GlobalPoolLayer:
    """AveragePool or MaxPool of an NHWC int8 image whose window is the whole image (1 x 1 result)."""

    op: str
    """"avg" or "max\""""
    source: Image
    result: Image
    channels: int
    height: int
    width: int
    count: DramTensor
    """avg: the pixel count as one int32 among the constants, repeated along the divisor row by a zero stride"""

    def _block(self, config: ArchConfig) -> int:
        """Channels per tile: three accumulator rows (two sums, the divisor) and two slots of one pixel each."""
        return max(1, min(self.channels, MAX_CHANNELS, align_down(config.accumulator_bytes // (4 * 3)),
                          align_down(config.scratchpad_bytes // 4)))

    def prologue(self, base: Callable[[DramTensor], int], config: ArchConfig) -> list[Op]:
        """avg: the divisor row (the pixel count in every column of a channel block) into the accumulator."""
        if self.op != "avg":
            return []
        block = self._block(config)
        return [CONFIG_LOAD(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=4),
                LOAD(dram=base(self.count), space="acc", sram=2 * align(block), planes=1, rows=1,
                     cols=block)]

    def tiles(self, base: Callable[[DramTensor], int], config: ArchConfig) -> list[Tile]:
        block = self._block(config)
        out_bytes = align(block)
        slot = align_down((config.scratchpad_bytes - 2 * out_bytes) // 2)
        if slot < block:
            raise UnsupportedError(f"a global pool of {block} channels does not fit the scratchpad")
        src, dst = self.source, self.result
        h, w = self.height, self.width
        # Whole rows per step when a row fits a slot, else runs of pixels within a row; at least STEPS steps where
        # the image has the rows, so that the load of one chunk overlaps the REDUCE of the one before.
        rows = min(-(-h // STEPS), slot // (w * block), MAX_REDUCE_ROWS // w) \
            if w * block <= slot and w <= MAX_REDUCE_ROWS else 0
        run = min(w, slot // block, MAX_REDUCE_ROWS)
        chunks = ([(y, 0, min(rows, h - y), w) for y in range(0, h, rows)] if rows else
                  [(y, x, 1, min(run, w - x)) for y in range(h) for x in range(0, w, run)])
        tiles = []
        g = 0
        for b in range(src.batch):
            for c0 in range(0, self.channels, block):
                n = min(block, self.channels - c0)
                t = len(tiles)
                acc = (t % 2) * out_bytes
                out = 2 * slot + (t % 2) * out_bytes
                steps = []
                for k, (y, x, r, cols) in enumerate(chunks):
                    sram = (g % 2) * slot
                    g += 1
                    dram = base(src.tensor) + b * src.batch_stride + y * src.row_stride + x * src.pixel_stride + c0
                    loads: list[Op] = [
                        CONFIG_LOAD(row_stride=src.row_stride, plane_stride=0, col_stride=src.pixel_stride,
                                    elem_bytes=n),
                        LOAD(dram=dram, space="spad", sram=sram, planes=1, rows=r, cols=cols)]
                    fold = REDUCE(op="sum" if self.op == "avg" else "max", accumulate=int(k > 0), dst=acc,
                                  src_space="spad", src=sram, rows=r * cols, cols=n)
                    steps.append(Step(loads, vector=[fold]))
                if self.op == "avg":
                    finish: Op = VDIV(dst_space="spad", dst=out, src1_space="acc", src1=acc,
                                      src2_space="acc", src2=2 * out_bytes, rows=1, cols=n, bcast=1,
                                      shift=0)
                else:
                    finish = VADDI(dst_space="spad", dst=out, src_space="acc", src=acc, count=n, imm=0)
                stores: list[Op] = [
                    CONFIG_STORE(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=n),
                    STORE(dram=base(dst.tensor) + b * dst.batch_stride + c0, space="spad", sram=out,
                          planes=1, rows=1, cols=1)]
                tiles.append(Tile(steps, [finish], stores))
        return tiles
