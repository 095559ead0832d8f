"""The int8 LRN layer on the vector engine, bit-exact with nn.LRN's integer semantics (lrn_int8.py).

An NHWC image holds each pixel's channels contiguously, so the window over channels is a window over
neighbouring elements, provided each pixel's channels are fenced by zeros. The load DMA writes that
fence: a chunk of P pixels is loaded as P rows of C one-byte elements with `before` and `after`
padding elements of the zero point around each row, a P x W image (W = C + size - 1). Then, over the
flat chunk (L = P * W elements, L' = L - size + 1):

    VSUBI  A = x - zero                   (the fence becomes 0)
    VMUL   B = A * A
    VADD   S = B[0:] + B[1:]; S = S[0:] + S[2:] ...   sum of squares over the window, for each flat position:
           doubling the width summed while it fits, then S = S + B[w:] for each position left (size 5: three
           VADDs, not four)
    VSHRI  S = S >> k                      the table index
    LUT32  S = T[S]                        the normaliser, times 2^F
    VMUL   S = S * A[before:]              u * T, exact in int32
    REQUANT y = round(S / 2^F) + zero      (M = 2^30, shift F - 1), half to even

Position p*W + c (c < C) of S holds channel c of pixel p; the size - 1 positions after each row's C
are garbage. The STORE writes P rows of W bytes C bytes apart, so each row's garbage lands on the
next row's first channels, which that row (later in the transfer) overwrites, and the last row's on
the next chunk's, which its STORE (later on the same engine) overwrites; the layer's last row is stored
alone, C bytes. The 1 KiB table is loaded once, with the first chunk. The int32 buffers are one set:
only the vector engine uses them, in order, so the chunks take turns only in the scratchpad slots.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from isa.config import ArchConfig
from isa.program import WIDE_LUT_BYTES

from ...errors import UnsupportedError
from .instructions import (CONFIG_LOAD, CONFIG_PAD, CONFIG_REQUANT, CONFIG_STORE, LOAD, LUT32, REQUANT, STORE, VADD,
                           VMUL, VSHRI, VSUBI, Op)
from .pipeline import Step, Tile
from .scratchpad import LINE, align
from .tensors import DramTensor

MAX_FLAT = 65535
"""The vector instructions' cols field: a chunk's flat length."""


@dataclass
class LrnLayer:
    """LRN over a compact NHWC int8 tensor into another (same type)."""

    source: DramTensor
    result: DramTensor
    channels: int
    size: int
    table: DramTensor
    """the 256 int32 entries (among the constants)"""
    index_shift: int
    fraction_bits: int
    zero: int
    spad_base: int = 0
    """where its table and slots start in the scratchpad, and its int32 buffers in the accumulator: above a
    convolution's when it runs beside one (overlap.py)"""
    acc_base: int = 0

    def _pixels(self, config: ArchConfig) -> int:
        """Pixels per chunk: two slots of (padded input, output) and the three int32 buffers fit (one set: only
        the vector engine, in order, uses them)."""
        width = self.channels + self.size - 1
        spad = (config.scratchpad_bytes - self.spad_base - WIDE_LUT_BYTES) // 2 // 2 - LINE
        acc = (config.accumulator_bytes // 4 - self.acc_base) // 3
        pixels = min(MAX_FLAT, spad, acc) // width
        if pixels < 1:
            raise UnsupportedError(f"an LRN over {self.channels} channels does not fit the SRAMs")
        return pixels

    def check(self, config: ArchConfig) -> None:
        """UnsupportedError if not even one pixel's chunk fits the SRAMs above its bases."""
        self._pixels(config)

    def tiles(self, base: Callable[[DramTensor], int], config: ArchConfig) -> list[Tile]:
        c, size = self.channels, self.size
        before = (size - 1) // 2
        width = c + size - 1
        pixels_per = self._pixels(config)
        total = self.source.elements // c
        tiles = []
        for k, p0 in enumerate(range(0, total, pixels_per)):
            pixels = min(pixels_per, total - p0)
            flat = pixels * width
            valid = flat - (size - 1)
            slot = self.spad_base + WIDE_LUT_BYTES + (k % 2) * 2 * align(pixels_per * width)
            x, y = slot, slot + align(pixels_per * width)
            a = self.acc_base
            b, s = a + flat, a + 2 * flat
            loads: list[Op] = [
                CONFIG_LOAD(row_stride=c, plane_stride=0, col_stride=1, elem_bytes=1),
                CONFIG_PAD(pad_top=0, pad_bottom=0, pad_left=before, pad_right=size - 1 - before,
                           pad_value=self.zero),
                LOAD(dram=base(self.source) + p0 * c, space="spad", sram=x, planes=1, rows=pixels, cols=c),
                CONFIG_PAD(pad_top=0, pad_bottom=0, pad_left=0, pad_right=0, pad_value=0)]
            if k == 0:
                loads += [CONFIG_LOAD(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=WIDE_LUT_BYTES),
                          LOAD(dram=base(self.table), space="spad", sram=self.spad_base, planes=1, rows=1, cols=1)]
            tiles.append(Tile([Step(loads)], self._vector(x, y, a, b, s, flat, valid, before),
                              self._stores(base, y, p0, pixels, width, p0 + pixels == total)))
        return tiles

    def _vector(self, x: int, y: int, a: int, b: int, s: int, flat: int, valid: int, before: int) -> list[Op]:
        def acc_op(op: Callable[..., Op], dst: int, src1: int, src2: int, count: int) -> Op:
            return op(dst_space="acc", dst=dst, src1_space="acc", src1=src1, src2_space="acc", src2=src2,
                           rows=1, cols=count, bcast=0)

        specs: list[Op] = [
            VSUBI(dst_space="acc", dst=a, src_space="spad", src=x, count=flat, imm=self.zero),
            acc_op(VMUL, b, a, a, flat)]
        window, width = b, 1  # S holds sums over `width` positions: doubled while it fits, then one more at a time
        while 2 * width <= self.size:
            specs.append(acc_op(VADD, s, window, window + width, flat - 2 * width + 1))
            window, width = s, 2 * width
        while width < self.size:
            specs.append(acc_op(VADD, s, window, b + width, flat - width))
            window, width = s, width + 1
        specs += [
            VSHRI(dst_space="acc", dst=s, src_space="acc", src=window, count=valid, imm=self.index_shift),
            LUT32(dst=s, src=s, table=self.spad_base, count=valid, base=0),
            acc_op(VMUL, s, s, a + before, valid),
            CONFIG_REQUANT(multiplier=1 << 30, shift=self.fraction_bits - 1, zero_point=self.zero,
                           clamp_lo=-128, clamp_hi=127, per_channel=0, table=0, bias_row=0, bias=0),
            REQUANT(dst=y, src=s, rows=1, cols=valid)]
        return specs

    def _stores(self, base: Callable[[DramTensor], int], y: int, p0: int, pixels: int, width: int,
                last: bool) -> list[Op]:
        c = self.channels
        dram = base(self.result) + p0 * c
        stores: list[Op] = [CONFIG_STORE(row_stride=c, plane_stride=0, col_stride=1, elem_bytes=1)]
        if not last:  # rows of W bytes, C apart: each row's garbage is overwritten by the next row
            return stores + [STORE(dram=dram, space="spad", sram=y, planes=1, rows=pixels, cols=width)]
        if pixels > 1:
            stores.append(STORE(dram=dram, space="spad", sram=y, planes=1, rows=pixels - 1, cols=width))
        stores.append(STORE(dram=dram + (pixels - 1) * c, space="spad", sram=y + (pixels - 1) * width,
                            planes=1, rows=1, cols=c))
        return stores
