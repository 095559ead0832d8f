"""Tile shapes for convolutions and matrix products: fit the SRAMs, minimise DRAM traffic.

A GEMM-like layer (a convolution, or a MatMul seen as a 1 x 1 convolution over an M x 1 image of K
channels) is tiled over output rows (`rows`), output channels (`n`) and input channels (`c`, the
reduction, accumulated in place). Every candidate keeps two of each scratchpad buffer (input image
rows with their halo, weight block, int8 result) and two accumulator tiles, for double buffering.
The cost model estimates the layer's cycles: the busiest of the DRAM (the bytes the loop nest moves:
the input once per output-channel tile, the weights and the bias once per row tile, the result once),
the array (each tile's MATMUL cycles by the datasheet formula, in the better dataflow) and the
vector engine (requantizing each tile), plus a fixed overhead per step; so it trades DRAM traffic
against array utilisation (large pixel counts amortise the array's fill and drain).
"""
from __future__ import annotations

from dataclasses import dataclass

from isa.config import ArchConfig
from sim.timing import matmul_cycles, vector_cycles

from ...errors import UnsupportedError

STEP_OVERHEAD_CYCLES = 32
"""The cost of one more pipeline step (synchronisation and instruction overhead), in cycles."""
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
    cycles: float = 0.0
    """expected cycles per batch image"""
    extra: int = 0
    """int8 operand tiles (an epilogue's residual inputs) kept next to the result tile"""

    def spad_bytes(self, shape: ConvShape) -> int:
        out = _align(self.rows * shape.out_width * self.n)
        return 2 * (self.input_bytes(shape) + self.weight_bytes(shape)) + 2 * (1 + self.extra) * out

    def input_bytes(self, shape: ConvShape) -> int:
        return _align(shape.in_rows(self.rows) * shape.padded_width * self.c)

    def weight_bytes(self, shape: ConvShape) -> int:
        return _align(shape.kh * shape.kw * self.c * self.n)

    def describe(self, shape: ConvShape) -> str:
        return (f"tile {self.rows}x{shape.out_width} px x {self.n} out-ch x {self.c} in-ch, "
                f"{-(-shape.out_height // self.rows)}x{-(-shape.out_channels // self.n)}x"
                f"{-(-shape.channels // self.c)} tiles, {self.traffic} DRAM bytes, ~{self.cycles:.0f} cycles")


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


def choose_tiling(shape: ConvShape, config: ArchConfig, reserved_spad: int, extra_buffers: int = 0,
                  vector_passes: int = 1) -> Tiling:
    """The cheapest tiling that fits; UnsupportedError if none does. `extra_buffers` int8 tiles of the
    result's size sit next to it (twice over), and the vector engine makes `vector_passes` over each."""
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
            rows = _largest_rows(shape, n, c, spad, acc_words, extra_buffers)
            if rows == 0:
                continue
            row_tiles = -(-shape.out_height // rows)
            n_tiles, c_tiles = -(-shape.out_channels // n), -(-shape.channels // c)
            halo = row_tiles * shape.in_rows(rows) * shape.width * shape.channels
            traffic = (min(halo, in_bytes * row_tiles) * n_tiles + (weights + 4 * shape.out_channels) * row_tiles
                       + out_bytes)
            traffic += extra_buffers * out_bytes
            array, vector = _engine_cycles(shape, rows, n, c, config)
            cycles = max(traffic / config.dram_bytes_per_cycle, array, vector * vector_passes)
            cycles += STEP_OVERHEAD_CYCLES * row_tiles * n_tiles * c_tiles
            if best is None or cycles < best.cycles:
                best = Tiling(rows, n, c, traffic, cycles, extra_buffers)
    if best is None:
        raise UnsupportedError(f"a {shape.kh}x{shape.kw} convolution of {shape.channels} channels on "
                               f"{shape.width}-pixel rows does not fit the scratchpad ({config.scratchpad_bytes} B)")
    return best


def _split(total: int, size: int) -> list[tuple[int, int]]:
    """`total` cut into pieces of `size`: (piece size, how many) for the full pieces and the remainder."""
    return [(p, k) for p, k in ((size, total // size), (total % size, 1)) if p and k]


def _engine_cycles(shape: ConvShape, rows: int, n: int, c: int, config: ArchConfig) -> tuple[int, int]:
    """(array, vector) cycles of one image's tiles."""
    array = vector = 0
    for row_size, row_count in _split(shape.out_height, rows):
        pixels = row_size * shape.out_width
        for n_size, n_count in _split(shape.out_channels, n):
            vector += row_count * n_count * vector_cycles(pixels * n_size, config)
            for c_size, c_count in _split(shape.channels, c):
                k = shape.kh * shape.kw * c_size
                best = min(matmul_cycles(pixels, k, n_size, flow, config) for flow in config.dataflows)
                array += row_count * n_count * c_count * best
    return array, vector


def _largest_rows(shape: ConvShape, n: int, c: int, spad: int, acc_words: int, extra: int) -> int:
    """The most output rows per tile that fit both SRAMs twice over, with a bias row per accumulator tile
    (0 if not even one does)."""
    best = 0
    lo, hi = 1, shape.out_height
    while lo <= hi:
        rows = (lo + hi) // 2
        tiling = Tiling(rows, n, c, 0, 0.0, extra)
        pixels = rows * shape.out_width
        fits = (tiling.spad_bytes(shape) <= spad and 2 * (pixels + 1) * n <= acc_words and pixels <= MAX_ROWS
                and shape.in_rows(rows) <= 65535)
        if fits:
            best, lo = rows, rows + 1
        else:
            hi = rows - 1
    return best
