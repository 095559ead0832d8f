"""Depthwise convolutions on the vector engine: one VMAC per tap and output row, a lane per channel.

A depthwise convolution (one input channel per group, one filter each) reduces over its taps only:
on the array it is a block diagonal whose zeros fill all but one column in each group, and the
array's fill and drain are paid per fold of a few dozen pixels (2-5x the vector-lane bound on
MobileNetV2). The vector engine does it at the bound's own rate: VMAC multiplies a row of output
pixels' input pixels (stride x channels bytes apart in the channels-innermost tile) by one tap's
weight per channel and accumulates in int32, so a tile costs taps x output rows instructions of
output width x channels / lanes cycles each. As on the array (gemm.py), the input zero point is
folded into the bias (bias - zx * sum(w)) and the load writes the padding with the zero point; then
REQUANT adds the bias row and applies a leading clamp (a ReLU6) as its output bounds (and a table after it, a
SiLU or HardSwish, in the same pass: REQUANT_LUT), and the rest of
the epilogue runs (gemm.py's steps: tables, clamps, a residual Add).

Tiles are output rows x channel blocks, a block every channel unless one output row of them does
not fit: the input rows of a whole-channel block are one contiguous DRAM run. The scratchpad holds,
once per layer, the per-channel requantize table, the epilogue's tables and the weights (a row of
channels per tap); per slot the input rows with their halo, the int8 result and each residual
operand. The accumulator holds the bias row, then each slot's int32 tile.

A global pool of the result (a squeeze-and-excitation block's, which reads it beside the channel gate) runs in
the tiles too: each REDUCEs its int8 result into a row of running sums (or maxima) per channel, and the last row
tile of a batch element divides it by the pixel count (VDIV, half to even as AveragePool rounds) or takes it
back to int8 (VADDI 0) and stores the pooled row; the pool reads no image from DRAM and is no layer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from isa.config import ArchConfig
from isa.roofline import Workload

from .epilogue import (AddTensor, Clamp8, EpilogueOp, compact, epilogue_specs, requant_specs, table_places, tables,
                       tables_size)
from .gemm import Requant
from .instructions import CONFIG_LOAD, CONFIG_REQUANT, CONFIG_STORE, REDUCE, STORE, VADDI, VDIV, VMAC, Op
from .pipeline import Step, Tile
from .scratchpad import align
from .tensors import DramTensor
from .tile_loads import Image, config_load, input_loads, load
from .tiling import ConvShape

MIN_TILES = 4
"""Output-row tiles a layer is cut into at least (when it has the rows): the first load and the last
store are not overlapped by the double-buffered pipeline, so a layer of one tile would pay them in full."""
MAX_VMAC_ROWS, MAX_VMAC_COLS, MAX_PITCH = 4095, 8191, 65535
MAX_TILE_PIXELS = 65535
"""REQUANT's and VADD's row counts: the pixels of one tile"""


@dataclass(frozen=True)
class _Budget:
    """The SRAM a layer needs besides its slots, and each slot's size for a tile shape."""

    shape: ConvShape
    fixed: int
    """scratchpad bytes held for the whole layer (tables, weights)"""
    adds: int
    pool_words: int = 0
    """accumulator words held for the whole layer besides the bias row (a fused pool's sums and divisor row)"""

    def slot(self, rows: int, block: int) -> tuple[int, int, int]:
        """(input, output, accumulator words) of one slot."""
        s = self.shape
        return (align(s.in_rows(rows) * s.padded_width * block), align(rows * s.out_width * block),
                rows * s.out_width * block)

    def fits(self, rows: int, block: int, config: ArchConfig) -> bool:
        ins, out, words = self.slot(rows, block)
        spad = self.fixed + 2 * (ins + out * (1 + self.adds))
        acc = align(self.shape.channels) + 2 * words + self.pool_words
        return (spad <= config.scratchpad_bytes and 4 * acc <= config.accumulator_bytes
                and rows * self.shape.out_width <= MAX_TILE_PIXELS)


def _tile_shape(budget: _Budget, config: ArchConfig) -> tuple[int, int] | None:
    """(output rows, channels) per tile: every channel if one output row of them fits, else the widest
    half, quarter... that does; then as many rows as fit, keeping at least MIN_TILES row tiles. None when
    not even one output row of one channel fits (or a row is longer than a VMAC)."""
    s = budget.shape
    block = min(s.channels, MAX_VMAC_COLS, MAX_PITCH // s.stride[1])
    while block > 1 and not budget.fits(1, block, config):
        block = -(-block // 2)
    if not budget.fits(1, block, config) or s.out_width > MAX_VMAC_ROWS:
        return None
    most = max(1, -(-s.out_height // MIN_TILES))
    rows = 1
    while rows < most and budget.fits(rows + 1, block, config):
        rows += 1
    return rows, block


@dataclass
class DepthwiseLayer:
    """A placed depthwise convolution (channel multiplier 1); `tiles` makes its instructions."""

    shape: ConvShape
    source: Image
    result: Image
    weights: int
    """constants offset of the int8 weights, taps x channels (a row per tap, (ky, kx) order)"""
    bias: int
    """constants offset of the int32 bias, zero point folded"""
    table: int
    """constants offset of the per-channel requantize table (when per channel)"""
    requant: Requant
    x_zero: int
    rows: int
    block: int
    epilogue: tuple[EpilogueOp, ...] = ()
    luts: tuple[int, ...] = ()
    """constants offsets of the epilogue's tables (gemm.tables)"""
    clamp: tuple[int, int] = (-128, 127)
    """REQUANT's output bounds: a clamp that leads the epilogue (a ReLU6) costs no pass of its own"""
    pool: str | None = None
    """"avg" or "max": a global pool of the result done by the tiles (the module docstring), written to `pooled`"""
    pooled: Image | None = None
    """the pool's result, batch x 1 x 1 x channels"""
    divisor: int = 0
    """avg: constants offset of the pixel count (one int32), repeated along an accumulator row by a zero stride"""

    @staticmethod
    def plan(shape: ConvShape, config: ArchConfig, source: Image, result: Image, filters: np.ndarray,
             bias: np.ndarray, requant: Requant, x_zero: int, add_constant: Callable[[bytes], int],
             epilogue: tuple[EpilogueOp, ...] = (), pool: str | None = None) -> DepthwiseLayer | None:
        """Choose the tile shape and place the weights, the bias and the tables in the constants; None (nothing
        placed) when no tile fits the SRAMs, for the array to do the layer (grouped.py). With `pool` ("avg" or
        "max"), the result is also pooled over the whole image (into `pooled`, which the caller sets)."""
        epilogue, clamp = compact(epilogue), (-128, 127)
        if epilogue and isinstance(epilogue[0], Clamp8):
            clamp, epilogue = (epilogue[0].lo, epilogue[0].hi), epilogue[1:]
        channels, taps = shape.channels, shape.kh * shape.kw
        per_tap = filters.reshape(channels, taps)
        folded = (bias.astype(np.int64) - x_zero * per_tap.astype(np.int64).sum(axis=1) + (1 << 31)) % (1 << 32) \
            - (1 << 31)
        adds = sum(isinstance(op, AddTensor) for op in epilogue)
        fixed = (align(8 * channels) if requant.per_channel else 0) + align(tables_size(epilogue)) + \
            align(taps * channels) + (2 * align(channels) if pool else 0)
        tile = _tile_shape(_Budget(shape, fixed, adds, 2 * align(channels) if pool else 0), config)
        if tile is None:
            return None
        rows, block = tile
        divisor = add_constant(np.int32(shape.out_height * shape.out_width).astype("<i4").tobytes()) \
            if pool == "avg" else 0
        return DepthwiseLayer(
            shape, source, result, add_constant(np.ascontiguousarray(per_tap.T).astype(np.int8).tobytes()),
            add_constant(folded.astype("<i4").tobytes()),
            add_constant(requant.table()) if requant.per_channel else 0, requant, x_zero, rows, block, epilogue,
            tuple(add_constant(t.table) for t in tables(epilogue)), clamp, pool, None, divisor)

    def workload(self) -> Workload:
        """The roofline's work (isa/roofline.py): taps MACs per output element at vector-lane width, every
        constant, the input and each residual operand, and the result once."""
        s, batch = self.shape, self.source.batch
        pixels, taps, c = batch * s.out_height * s.out_width, s.kh * s.kw, s.channels
        adds = sum(isinstance(op, AddTensor) for op in self.epilogue)
        constants = taps * c + 4 * c + (8 * c if self.requant.per_channel else 0)
        return Workload(pixels * c * taps, "vector", constants, batch * s.height * s.width * c + adds * pixels * c,
                        pixels * c + (batch * c if self.pool else 0))

    def row_tiles(self) -> list[tuple[int, int]]:
        """(first, end) output rows of each row tile: `rows` each, but the first and the last halved (the vector
        engine starts after a smaller load, and a smaller REQUANT and store follow its last tap: pipeline fill and
        drain); its work is a VMAC per tap and output row whatever the tiles."""
        s = self.shape
        sizes = [min(self.rows, s.out_height - oy0) for oy0 in range(0, s.out_height, self.rows)]
        if not self.pool and len(sizes) > 1:
            for at in (0, -1):
                whole = sizes[at]
                if whole > 1:
                    sizes[at:len(sizes) + at + 1 if at else 1] = [whole // 2, whole - whole // 2]
        bounds = [0]
        for size in sizes:
            bounds.append(bounds[-1] + size)
        return list(zip(bounds, bounds[1:]))

    def spad_end(self) -> int:
        """The end of the scratchpad the layer uses: its tables and weights, its two slots, a pool's rows."""
        s, adds = self.shape, sum(isinstance(op, AddTensor) for op in self.epilogue)
        ins, out, _ = _Budget(s, 0, adds).slot(self.rows, self.block)
        slot_bytes = ins + out * (1 + adds)
        return ((align(8 * s.channels) if self.requant.per_channel else 0) + align(tables_size(self.epilogue))
                + align(s.kh * s.kw * s.channels) + 2 * slot_bytes + (2 * align(s.channels) if self.pool else 0))

    def tiles(self, base: Callable[[DramTensor], int], constants: int) -> tuple[list[Op], list[Tile]]:
        """(prologue, tiles) with absolute DRAM addresses."""
        s, c_all, taps = self.shape, self.shape.channels, self.shape.kh * self.shape.kw
        table_bytes = align(8 * c_all) if self.requant.per_channel else 0
        luts = table_places(self.epilogue, table_bytes)
        weights = table_bytes + align(tables_size(self.epilogue))
        adds = [op for op in self.epilogue if isinstance(op, AddTensor)]
        in_bytes, out_bytes, words = _Budget(s, 0, len(adds)).slot(self.rows, self.block)
        slot_bytes = in_bytes + out_bytes * (1 + len(adds))
        first_slot = weights + align(taps * c_all)
        inputs = [first_slot + k * slot_bytes for k in (0, 1)]
        accs = [align(c_all) + k * words for k in (0, 1)]
        # a fused pool's running row and divisor row after the slots; its pooled rows, by batch parity, after theirs
        sums, divisor_row = align(c_all) + 2 * words, 2 * align(c_all) + 2 * words
        pooled_rows = [first_slot + 2 * slot_bytes + k * align(c_all) for k in (0, 1)]
        prologue: list[Op] = []
        if self.requant.per_channel:
            prologue += [config_load(0, 0, 8 * c_all), load(constants + self.table, "spad", 0, 1, 1)]
        for offset, lut in zip(self.luts, tables(self.epilogue)):
            prologue += [config_load(0, 0, len(lut.table)), load(constants + offset, "spad", luts[id(lut)], 1, 1)]
        prologue += [config_load(0, 0, taps * c_all), load(constants + self.weights, "spad", weights, 1, 1),
                     config_load(0, 0, 4 * c_all), load(constants + self.bias, "acc", 0, 1, 1)]
        if self.pool == "avg":  # the pixel count in every column of a block
            prologue += [config_load(0, 0, 4), load(constants + self.divisor, "acc", divisor_row, 1, self.block)]
        source, result, r = base(self.source.tensor), base(self.result.tensor), self.result
        tiles: list[Tile] = []
        for b in range(self.source.batch):
            for oy0, oy1 in self.row_tiles():
                pixels = (oy1 - oy0) * s.out_width
                for c0 in range(0, c_all, self.block):
                    n, slot = min(self.block, c_all - c0), len(tiles) % 2
                    ins, out = inputs[slot], inputs[slot] + in_bytes
                    operands = {id(op): out + (1 + a) * out_bytes for a, op in enumerate(adds)}
                    loads = input_loads(s, self.source, self.x_zero, source + b * self.source.batch_stride + c0,
                                        oy0, oy1, n, ins)
                    for op in adds:
                        x = op.operand
                        loads += [CONFIG_LOAD(row_stride=x.row_stride, plane_stride=0,
                                              col_stride=x.pixel_stride, elem_bytes=n),
                                  load(base(x.tensor) + b * x.batch_stride + oy0 * x.row_stride + c0, "spad",
                                       operands[id(op)], oy1 - oy0, s.out_width)]
                    vector = self._taps(ins, accs[slot], weights + c0, oy1 - oy0, n)
                    specs, rest = requant_specs(self._config_requant(c0), out, accs[slot], pixels, n, self.epilogue,
                                                luts)
                    vector += specs
                    for op in rest:
                        vector += epilogue_specs(op, out, accs[slot], pixels, n, operands.get(id(op), 0), luts)
                    stores = [CONFIG_STORE(row_stride=r.row_stride, plane_stride=0, col_stride=r.pixel_stride,
                                           elem_bytes=n),
                              STORE(dram=result + b * r.batch_stride + oy0 * r.row_stride + c0, space="spad",
                                    sram=out, planes=1, rows=oy1 - oy0, cols=s.out_width)]
                    if self.pool:
                        specs, store = self._pool(out, sums + c0, divisor_row, pooled_rows[b % 2] + c0, pixels, n,
                                                  oy0 == 0, oy1 == s.out_height)
                        vector += specs
                        if store:
                            p = self.pooled
                            stores += [CONFIG_STORE(row_stride=0, plane_stride=0, col_stride=p.pixel_stride,
                                                    elem_bytes=n),
                                       STORE(dram=base(p.tensor) + b * p.batch_stride + c0, space="spad",
                                             sram=pooled_rows[b % 2] + c0, planes=1, rows=1, cols=1)]
                    tiles.append(Tile([Step(loads)], vector, stores))
        return prologue, tiles

    def _pool(self, out: int, sums: int, divisor: int, pooled: int, pixels: int, n: int, first: bool,
              last: bool) -> tuple[list[Op], bool]:
        """A tile's part of the global pool: fold its `pixels` x `n` int8 result at `out` into the running row at
        `sums` (restarting it on an image's first row tile); on the last, the pooled int8 row at `pooled`. Returns
        the vector work and whether the tile stores that row."""
        specs = [REDUCE(op="sum" if self.pool == "avg" else "max", accumulate=int(not first), dst=sums,
                        src_space="spad", src=out, rows=pixels, cols=n)]
        if not last:
            return specs, False
        if self.pool == "avg":
            return specs + [VDIV(dst_space="spad", dst=pooled, src1_space="acc", src1=sums, src2_space="acc",
                                 src2=divisor, rows=1, cols=n, bcast=1, shift=0)], True
        return specs + [VADDI(dst_space="spad", dst=pooled, src_space="acc", src=sums, count=n, imm=0)], True

    def _taps(self, ins: int, acc: int, weights: int, rows: int, n: int) -> list[Op]:
        """Every tap of every output row of a tile: the first tap overwrites the row's accumulators."""
        s = self.shape
        (sh, sw), (dh, dw) = s.stride, s.dilation
        specs: list[Op] = []
        for oy in range(rows):
            for t in range(s.kh * s.kw):
                ky, kx = divmod(t, s.kw)
                specs.append(VMAC(dst=acc + oy * s.out_width * n,
                                  src=ins + ((oy * sh + ky * dh) * s.padded_width + kx * dw) * n,
                                  wgt=weights + t * s.channels, rows=s.out_width, cols=n, pitch=sw * n,
                                  acc_mode=int(t > 0)))
        return specs

    def _config_requant(self, c0: int) -> Op:
        r = self.requant
        per_channel = r.per_channel
        return CONFIG_REQUANT(
            multiplier=0 if per_channel else int(r.multipliers[0]), shift=0 if per_channel else int(r.shifts[0]),
            zero_point=r.zero, clamp_lo=self.clamp[0], clamp_hi=self.clamp[1], per_channel=int(per_channel),
            table=8 * c0 if per_channel else 0, bias_row=1, bias=c0)
