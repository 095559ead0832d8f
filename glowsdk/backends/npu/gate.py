"""The channel gate: an NHWC int8 image times a per-channel int8 vector computed at run time.

Squeeze-and-excitation blocks (MobileNetV3, EfficientNet, RegNetY) end by scaling every channel of the
image by a gate the network computes (global pool, two 1 x 1 convolutions, a sigmoid): `x * s` with s of
shape N x C x 1 x 1. The quantizer gives it as `Rescale(Mul(x, s))`, the exact int32 product
(q_x - z_x) * (q_s - z_s) then one requantization. On an NHWC image a chunk of whole pixels is a
pixels x C matrix and s is one row broadcast over it. The row g = q_s - z_s and the bias row -z_x * g are
made once per tile (VSUBI, VMULI on C elements); then one pass over the chunk: REQUANT_MUL multiplies the
int8 pixels by g and requantizes with the bias row added, so q_x * g - z_x * g is the exact product (|q| <= 128
and |g| <= 255 keep every term within 17 bits), and the products never occupy the accumulator. A tile is one
chunk of pixels of one batch element (and one channel block when a pixel is too wide); its gate row is loaded
with it. Where the gated image's only reader is a 1 x 1 convolution of one image, that layer applies the gate as
it loads its input (gemm.ChannelGate) and this layer is not made.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from isa.config import ArchConfig

from ...errors import UnsupportedError
from .gemm import Requant
from .instructions import CONFIG_LOAD, CONFIG_REQUANT, CONFIG_STORE, LOAD, REQUANT_MUL, STORE, VMULI, VSUBI, Op
from .pipeline import Step, Tile
from .scratchpad import LINE, align
from .tensors import DramTensor

MAX_COLS = 65535
"""REQUANT_MUL counts the columns of a row in 16 bits."""


TILES = 4
"""Tiles an image is cut into at least: the loads, the vector work and the stores of consecutive tiles overlap."""


@dataclass
class GateLayer:
    """x[n, c, y, x] * s[n, c] requantized per tensor: x a compact NHWC image, s any N x C x 1 x 1 tensor."""

    source: DramTensor
    gate: DramTensor
    result: DramTensor
    x_zero: int
    gate_zero: int
    requant: Requant

    def _fit(self, config: ArchConfig) -> tuple[int, int]:
        """(channels per block, pixels per tile): two slots of (pixels x block input and output, a gate row) in the
        scratchpad; in the accumulator two slots of (gate row, bias row)."""
        _, channels, h, w = self.source.shape
        spad, acc = config.scratchpad_bytes // 2, config.accumulator_bytes // 4

        def pixels(block: int) -> int:  # less a line per buffer: each is rounded up to whole lines
            return min(-(-h * w // TILES), (spad - align(block) - 2 * LINE) // (2 * block), 65535) \
                if 4 * block <= acc else 0

        block = min(channels, MAX_COLS)
        while block > 1 and pixels(block) < 1:
            block = -(-block // 2)
        if pixels(block) < 1:
            raise UnsupportedError(f"a channel gate does not fit the {config.scratchpad_bytes}-byte scratchpad")
        return block, pixels(block)

    def tiles(self, base: Callable[[DramTensor], int], config: ArchConfig) -> list[Tile]:
        n, channels, h, w = self.source.shape
        block, pixels = self._fit(config)
        row = align(block)
        span = align(pixels * block)
        x_stride, s_strides = self.source.strides, self.gate.strides
        tiles = []
        for b in range(n):
            for c0 in range(0, channels, block):
                cb = min(block, channels - c0)
                for p0 in range(0, h * w, pixels):
                    k = min(pixels, h * w - p0)
                    slot = len(tiles) % 2
                    x = slot * (2 * span + row)
                    out, s = x + span, x + 2 * span
                    gate, bias = slot * 2 * block, slot * 2 * block + block  # accumulator words
                    offset = b * x_stride[0] + p0 * x_stride[3] + c0 * x_stride[1]
                    loads: list[Op] = [
                        CONFIG_LOAD(row_stride=0, plane_stride=0, col_stride=x_stride[3], elem_bytes=cb),
                        LOAD(dram=base(self.source) + offset, space="spad", sram=x, planes=1, rows=1,
                             cols=k),
                        CONFIG_LOAD(row_stride=0, plane_stride=0, col_stride=s_strides[1], elem_bytes=1),
                        LOAD(dram=base(self.gate) + b * s_strides[0] + c0 * s_strides[1], space="spad",
                             sram=s, planes=1, rows=1, cols=cb)]
                    vector: list[Op] = [
                        VSUBI(dst_space="acc", dst=gate, src_space="spad", src=s, count=cb,
                              imm=self.gate_zero),
                        VMULI(dst_space="acc", dst=bias, src_space="acc", src=gate, count=cb,
                              imm=-self.x_zero),
                        CONFIG_REQUANT(multiplier=int(self.requant.multipliers[0]),
                                       shift=int(self.requant.shifts[0]), zero_point=self.requant.zero,
                                       clamp_lo=-128, clamp_hi=127, per_channel=0, table=0, bias_row=1,
                                       bias=bias),
                        REQUANT_MUL(dst=out, src=x, scale=gate, rows=k, cols=cb)]
                    stores: list[Op] = [
                        CONFIG_STORE(row_stride=0, plane_stride=0, col_stride=self.result.strides[3],
                                     elem_bytes=cb),
                        STORE(dram=base(self.result) + b * self.result.strides[0]
                              + p0 * self.result.strides[3] + c0 * self.result.strides[1], space="spad",
                              sram=out, planes=1, rows=1, cols=k)]
                    tiles.append(Tile([Step(loads)], vector, stores))
        return tiles
