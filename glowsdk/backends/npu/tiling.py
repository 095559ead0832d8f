"""Tile shapes for convolutions and matrix products: fit the SRAMs, minimise DRAM traffic.

A GEMM-like layer (a convolution, or a MatMul seen as a 1 x 1 convolution over an M x 1 image of K
channels) is tiled over output rows (`rows`), output channels (`n`) and input channels (`c`, the
reduction, accumulated in place). Every candidate keeps two of each scratchpad buffer (input image
rows with their halo, weight block, int8 result) and two accumulator tiles, for double buffering.
The cost model counts the DRAM bytes the loop nest moves (the input is read once per output-channel
tile, the weights once per row tile, the bias once per output tile, the result written once) and
adds a fixed overhead per step, so among equal traffic fewer, larger tiles win.
"""
from __future__ import annotations

from dataclasses import dataclass

from isa.config import ArchConfig

from ...errors import UnsupportedError

STEP_OVERHEAD_BYTES = 256
"""The cost of one more pipeline step, in DRAM-byte equivalents (instruction and latency overhead)."""
MAX_K = 8191
MAX_N = 4095
MAX_ROWS = 65535


@dataclass(frozen=True)
class ConvShape:
    """A GEMM-like layer's geometry (per batch image)."""

    channels: int
    height: int
    width: int
    out_channels: int
    out_height: int
    out_width: int
    kh: int = 1
    kw: int = 1
    stride: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    """top, left, bottom, right"""

    def in_rows(self, out_rows: int) -> int:
        return (out_rows - 1) * self.stride[0] + (self.kh - 1) * self.dilation[0] + 1

    @property
    def padded_width(self) -> int:
        return self.pads[1] + self.width + self.pads[3]


@dataclass(frozen=True)
class Tiling:
    rows: int
    n: int
    c: int
    traffic: int
    """expected DRAM bytes per batch image"""

    def spad_bytes(self, shape: ConvShape) -> int:
        return 2 * (self.input_bytes(shape) + self.weight_bytes(shape)) + 2 * self.rows * shape.out_width * self.n

    def input_bytes(self, shape: ConvShape) -> int:
        return _align(shape.in_rows(self.rows) * shape.padded_width * self.c)

    def weight_bytes(self, shape: ConvShape) -> int:
        return _align(shape.kh * shape.kw * self.c * self.n)

    def describe(self, shape: ConvShape) -> str:
        return (f"tile {self.rows}x{shape.out_width} px x {self.n} out-ch x {self.c} in-ch, "
                f"{-(-shape.out_height // self.rows)}x{-(-shape.out_channels // self.n)}x"
                f"{-(-shape.channels // self.c)} tiles, {self.traffic} DRAM bytes")


def _align(size: int) -> int:
    return -(-size // 64) * 64


def _candidates(total: int, unit: int) -> list[int]:
    """Whole, then multiples of `unit` and halvings below it."""
    values = {total}
    v = total
    while v > 1:
        v = -(-v // 2)
        values.add(v)
    values |= {m for m in range(unit, total, unit)}
    return sorted(values, reverse=True)


def choose_tiling(shape: ConvShape, config: ArchConfig, reserved_spad: int) -> Tiling:
    """The cheapest tiling that fits; UnsupportedError if none does."""
    spad = config.scratchpad_bytes - reserved_spad
    acc_words = config.accumulator_bytes // 4
    best: Tiling | None = None
    in_bytes = shape.height * shape.width * shape.channels
    out_bytes = shape.out_height * shape.out_width * shape.out_channels
    weights = shape.kh * shape.kw * shape.channels * shape.out_channels
    for n in _candidates(min(shape.out_channels, MAX_N), config.array_cols):
        for c in _candidates(shape.channels, config.array_rows):
            if shape.kh * shape.kw * c > MAX_K:
                continue
            rows = _largest_rows(shape, n, c, spad, acc_words)
            if rows == 0:
                continue
            row_tiles = -(-shape.out_height // rows)
            n_tiles, c_tiles = -(-shape.out_channels // n), -(-shape.channels // c)
            halo = row_tiles * shape.in_rows(rows) * shape.width * shape.channels
            traffic = (min(halo, in_bytes * row_tiles) * n_tiles + weights * row_tiles + out_bytes * 5
                       + STEP_OVERHEAD_BYTES * row_tiles * n_tiles * c_tiles)
            if best is None or traffic < best.traffic:
                best = Tiling(rows, n, c, traffic)
    if best is None:
        raise UnsupportedError(f"a {shape.kh}x{shape.kw} convolution of {shape.channels} channels on "
                               f"{shape.width}-pixel rows does not fit the scratchpad ({config.scratchpad_bytes} B)")
    return best


def _largest_rows(shape: ConvShape, n: int, c: int, spad: int, acc_words: int) -> int:
    """The most output rows per tile that fit both SRAMs twice over (0 if not even one does)."""
    best = 0
    lo, hi = 1, shape.out_height
    while lo <= hi:
        rows = (lo + hi) // 2
        tiling = Tiling(rows, n, c, 0)
        pixels = rows * shape.out_width
        fits = (tiling.spad_bytes(shape) <= spad and 2 * pixels * n <= acc_words and pixels <= MAX_ROWS
                and shape.in_rows(rows) <= 65535)
        if fits:
            best, lo = rows, rows + 1
        else:
            hi = rows - 1
    return best
