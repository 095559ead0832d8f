"""The int8 Softmax layer: a classifier's tail on the vector engine, bit-exact with nn.Softmax's doc.

Each group of L elements (one row of the dense input, the normalised axes being the trailing ones)
is one tile, held as an L x 1 column so that REDUCE and the broadcast operand of VSUB/VDIV work
along it: REDUCE max, VSUB the maximum (differences -255..0), LUT32 through the exponential table
(placed reversed, so that index 255 + difference is the entry of -difference steps), REDUCE sum,
VDIV 2^8 * e by the sum, VADDI the result's zero point, which saturates to int8. The table is
loaded once, in the layer's prologue; tiles alternate between two slots.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from isa.config import ArchConfig
from isa.program import WIDE_LUT_BYTES

from ...errors import UnsupportedError
from ...graph.nodes import nn, quant
from .instructions import (CONFIG_LOAD, CONFIG_STORE, LOAD, LUT32, REDUCE, STORE, VADDI, VDIV, VMAXI, VMINI, VMUL, VSUB,
                           Op)
from .pipeline import Step, Tile
from .scratchpad import align
from .tensors import DramTensor

MAX_GROUP = 65535
"""REDUCE and VDIV count rows in 16 bits."""


def softmax_table(scale: float, length: int) -> bytes:
    """LUT32's table for a group of `length` elements of an int8 input of `scale` (entry 255 - j is T[j])."""
    return quant.softmax_table(scale, length)[::-1].astype("<i4").tobytes()


def fits(length: int, config: ArchConfig, masked: bool = False) -> bool:
    """Whether two slots of a group fit the SRAMs next to the table (a masked one holds its 0/1 weights too)."""
    spad = WIDE_LUT_BYTES + 2 * 2 * align(length)
    acc = 2 * ((1 + masked) * align(length) + 2)
    return length <= MAX_GROUP and spad <= config.scratchpad_bytes and 4 * acc <= config.accumulator_bytes


@dataclass
class SoftmaxLayer:
    """Softmax over the last `length` elements of a dense int8 tensor."""

    source: DramTensor
    result: DramTensor
    length: int
    table: int
    """constants offset of the 1 KiB exponential table"""
    masked: bool = False
    """the input code -128 is -inf (nn.Softmax's `masked`): its exponential is multiplied by 0"""
    wide: bool = False
    """int32 probabilities of scale 2^-16 (nn.Softmax's `wide`), stored from the accumulator"""

    def prologue(self, constants: int) -> list[Op]:
        return [CONFIG_LOAD(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=WIDE_LUT_BYTES),
                LOAD(dram=constants + self.table, space="spad", sram=0, planes=1, rows=1, cols=1)]

    def tiles(self, base: Callable[[DramTensor], int], config: ArchConfig) -> list[Tile]:
        if not fits(self.length, config, self.masked):
            raise UnsupportedError(f"a Softmax over {self.length} elements does not fit the SRAMs")
        n = self.length
        stride = align(n)
        tiles = []
        for g in range(self.source.elements // n):
            slot = g % 2
            x, y = WIDE_LUT_BYTES + slot * 2 * stride, WIDE_LUT_BYTES + slot * 2 * stride + stride
            words = (1 + self.masked) * stride + 2
            e, peak, total = slot * words, slot * words + stride, slot * words + stride + 1
            weight = total + 1
            dma = dict(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=n)
            loads: list[Op] = [CONFIG_LOAD(**dma), LOAD(dram=base(self.source) + g * n, space="spad",
                                                        sram=x, planes=1, rows=1, cols=1)]
            column = dict(rows=n, cols=1)
            vector: list[Op] = [
                REDUCE(op="max", accumulate=0, dst=peak, src_space="spad", src=x, **column),
                VSUB(dst_space="acc", dst=e, src1_space="spad", src1=x, src2_space="acc", src2=peak,
                     bcast=1, **column),
                LUT32(dst=e, src=e, table=0, count=n, base=255),
            ]
            if self.masked:  # e * min(x + 128, 1): no weight for the code -128
                vector += [VADDI(dst_space="acc", dst=weight, src_space="spad", src=x, count=n, imm=128),
                           VMINI(dst_space="acc", dst=weight, src_space="acc", src=weight, count=n, imm=1),
                           VMUL(dst_space="acc", dst=e, src1_space="acc", src1=e, src2_space="acc",
                                src2=weight, bcast=0, **column)]
            vector += [
                REDUCE(op="sum", accumulate=0, dst=total, src_space="acc", src=e, **column),
                *([VMAXI(dst_space="acc", dst=total, src_space="acc", src=total, count=1, imm=1)]
                  if self.masked else []),
                VDIV(dst_space="acc", dst=e, src1_space="acc", src1=e, src2_space="acc", src2=total,
                     bcast=1, shift=nn.SOFTMAX_WIDE_BITS if self.wide else quant.SOFTMAX_SHIFT, **column),
            ]
            if self.wide:  # the int32 quotients are the result
                stores: list[Op] = [CONFIG_STORE(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=4 * n), STORE(
                    dram=base(self.result) + 4 * g * n, space="acc", sram=e, planes=1, rows=1, cols=1)]
            else:
                vector.append(VADDI(dst_space="spad", dst=y, src_space="acc", src=e, count=n,
                                    imm=nn.SOFTMAX_ZERO))
                stores = [CONFIG_STORE(**dma), STORE(dram=base(self.result) + g * n, space="spad", sram=y,
                                                     planes=1, rows=1, cols=1)]
            tiles.append(Tile([Step(loads)], vector, stores))
        return tiles


def trailing_length(shape: tuple[int, ...], axes: tuple[int, ...]) -> int | None:
    """L when `axes` are the trailing dims of `shape` (the groups are then dense rows), else None."""
    rank = len(shape)
    if sorted(axes) != list(range(rank - len(axes), rank)):
        return None
    return int(np.prod([shape[a] for a in axes]))
