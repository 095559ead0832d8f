"""The per-channel affine layer: a standalone BatchNorm, y = x * a[c] + b[c], on the vector engine.

The quantizer gives it as `Rescale(Add(Mul(x, a), b))`: int8 x, a symmetric int8 vector a, the
int32 bias b at the product's scale, one requantization (convert.py's Mul rule). On an NHWC image
the channels are the innermost, so a chunk of whole pixels is a pixels x C matrix and a[c], b[c] are
rows broadcast over it: VSUBI the input zero point into the accumulator, VMUL by the weight row
(bcast), REQUANT with the bias row added: three passes per element, one rounding, exact. (A 1 x 1
depthwise convolution on the array would spend a whole array pass per channel on a K = 1 product.)
The weight and bias rows are loaded once per slot, with its first chunk.

Exactness: |x - zero| <= 255 and |a| <= 127, so the product fits 16 bits; the graph's int32 Add
saturates where REQUANT's bias add does not, so the builder refuses a bias that could overflow.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from isa.config import ArchConfig

from ...errors import UnsupportedError
from .gemm import Requant
from .instructions import CONFIG_LOAD, CONFIG_REQUANT, CONFIG_STORE, LOAD, REQUANT, STORE, VMUL, VSUBI, Op
from .pipeline import Step, Tile
from .scratchpad import LINE, align
from .tensors import DramTensor

MAX_CHUNK = 32768
"""Bytes per chunk: a LOAD's element is at most 65535 bytes; half that keeps four buffers small."""
PRODUCT_BOUND = 255 * 127
"""|(x - zero) * a| for int8 x and a symmetric int8 a."""


def check_bias(bias: np.ndarray, what: str) -> None:
    """UnsupportedError if product + bias could leave int32 (the graph's Add would saturate, REQUANT not)."""
    if bias.size and int(np.abs(bias.astype(np.int64)).max()) + PRODUCT_BOUND >= 1 << 31:
        raise UnsupportedError(f"{what}: a per-channel bias of {int(np.abs(bias).max())} could overflow int32")


@dataclass
class AffineLayer:
    """x * a[c] + b[c] over a compact NHWC (channels innermost) int8 tensor, requantized per tensor."""

    source: DramTensor
    result: DramTensor
    channels: int
    weights: DramTensor
    """the int8 weight row (channels bytes, among the constants)"""
    bias: DramTensor
    """the int32 bias row (channels words, among the constants)"""
    x_zero: int
    requant: Requant

    def _chunk(self, config: ArchConfig) -> int:
        """Whole pixels per chunk: two slots of (weight row, input, output) and of (bias row, product) fit."""
        c = self.channels
        spad = (config.scratchpad_bytes // 2 - align(c)) // 2 - LINE
        acc = config.accumulator_bytes // 4 // 2 - align(c)
        pixels = min(MAX_CHUNK, spad, acc) // c
        if pixels < 1:
            raise UnsupportedError(f"a per-channel affine of {c} channels does not fit the SRAMs")
        return pixels

    def tiles(self, base: Callable[[DramTensor], int], config: ArchConfig) -> list[Tile]:
        """One tile per chunk, alternating between two slots; the first tile of each slot also loads its copy
        of the weight and bias rows, which stay for the slot's later tiles."""
        c = self.channels
        chunk = self._chunk(config) * c
        row = align(c)
        spads = [k * (row + 2 * align(chunk)) for k in (0, 1)]
        accs = [k * (row + chunk) for k in (0, 1)]
        m, shift = int(self.requant.multipliers[0]), int(self.requant.shifts[0])
        tiles = []
        total = self.result.elements
        for k, start in enumerate(range(0, total, chunk)):
            n = min(chunk, total - start)
            weights, bias = spads[k % 2], accs[k % 2]
            x, y, acc = weights + row, weights + row + align(chunk), bias + row
            dma = dict(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=n)
            loads: list[Op] = [CONFIG_LOAD(**dma), LOAD(dram=base(self.source) + start, space="spad",
                                                        sram=x, planes=1, rows=1, cols=1)]
            if k < 2:
                loads += [CONFIG_LOAD(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=c),
                          LOAD(dram=base(self.weights), space="spad", sram=weights, planes=1,
                               rows=1, cols=1),
                          CONFIG_LOAD(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=4 * c),
                          LOAD(dram=base(self.bias), space="acc", sram=bias, planes=1, rows=1,
                               cols=1)]
            vector: list[Op] = [
                VSUBI(dst_space="acc", dst=acc, src_space="spad", src=x, count=n, imm=self.x_zero),
                VMUL(dst_space="acc", dst=acc, src1_space="acc", src1=acc, src2_space="spad", src2=weights,
                     rows=n // c, cols=c, bcast=1),
                CONFIG_REQUANT(multiplier=m, shift=shift, zero_point=self.requant.zero, clamp_lo=-128,
                               clamp_hi=127, per_channel=0, table=0, bias_row=1, bias=bias),
                REQUANT(dst=y, src=acc, rows=n // c, cols=c),
            ]
            stores: list[Op] = [CONFIG_STORE(**dma), STORE(dram=base(self.result) + start, space="spad",
                                                           sram=y, planes=1, rows=1, cols=1)]
            tiles.append(Tile([Step(loads)], vector, stores))
        return tiles
