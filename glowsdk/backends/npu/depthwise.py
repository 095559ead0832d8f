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

The array is idle meanwhile, and a block diagonal (a tap's weights on the diagonal of a block as wide as the
array, K = taps x width) also runs its MACs at lane width: where the estimate (array_share) says the layer
finishes sooner, the array computes the last channels, whole widths, through im2col from the same input tile, and
the vector engine the others' taps and every channel's REQUANT (a block each, one after another in the SRAMs, and a
STORE each into its channels of the result).

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
from sim.timing import matmul_cycles, vector_cycles

from .epilogue import (AddTensor, Clamp8, EpilogueOp, compact, epilogue_specs, requant_specs, table_places, tables,
                       tables_size)
from .gemm import Requant
from .instructions import (CONFIG_LOAD, CONFIG_MATMUL, CONFIG_REQUANT, CONFIG_STORE, MATMUL, REDUCE, STORE, VADDI, VDIV,
                           VMAC, Op)
from .pipeline import Step, Tile
from .scratchpad import align
from .step_cost import ConvShape
from .tensors import DramTensor
from .tile_loads import Image, config_load, input_loads, load

MIN_TILES = 4
"""Output-row tiles a layer is cut into at least (when it has the rows): the first load and the last
store are not overlapped by the double-buffered pipeline, so a layer of one tile would pay them in full."""
SHARE_MARGIN = 1.15
"""How much fewer cycles an array share must promise: the estimate over-predicts the vector engine alone by up to
7% and under-predicts a shared layer by up to 13% (ShuffleNet's depthwise layers, default preset)."""
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


def _row_sizes(height: int, rows: int, halve: bool) -> list[int]:
    """Output rows of each row tile: `rows` each, but with `halve` the first and the last halved."""
    sizes = [min(rows, height - oy0) for oy0 in range(0, height, rows)]
    if halve and len(sizes) > 1:
        for at in (0, -1):
            whole = sizes[at]
            if whole > 1:
                sizes[at:len(sizes) + at + 1 if at else 1] = [whole // 2, whole - whole // 2]
    return sizes


def array_share(shape: ConvShape, rows: int, config: ArchConfig, halve: bool = True) -> int:
    """The channels (whole array widths, the last ones) whose taps the otherwise idle array computes beside the
    vector engine: the count with the fewest estimated cycles over the row tiles. The vector engine does its
    channels' VMACs, then every channel's REQUANT; the array a block diagonal per array width (taps x width by
    width, so its MACs run at lane width too; a product of few pixels pays a whole fold), after those VMACs, which
    free the input slot with it: a slot's next load, the VMACs and the products on it follow one another, once per
    two tiles; the first tile's load, VMACs and products are the pipeline's fill. Every option is costed on the
    vector engine's row tiles (the first and the last halved, though a shared layer's are not): with SHARE_MARGIN,
    that ranking took a share in ShuffleNet's and MobileNetV3's depthwise layers where it measured faster, and in
    one where it measured 0.8% slower (MobileNetV3's 56 x 56 x 72 stride 2)."""
    s, cols, taps = shape, config.array_cols, shape.kh * shape.kw

    def tile(share: int, rows: int) -> tuple[float, float]:
        """(steady cycles, fill cycles) of a tile of `rows` output rows."""
        pixels = rows * s.out_width
        load = config.dram_latency_cycles + s.in_rows(rows) * s.width * s.channels / config.dram_bytes_per_cycle
        own = rows * taps * vector_cycles(s.out_width * (s.channels - share), config)
        requant = vector_cycles(pixels * (s.channels - share), config) + share // cols * vector_cycles(pixels * cols,
                                                                                                       config)
        array = share // cols * min(matmul_cycles(pixels, taps * cols, cols, flow, config) for flow in config.dataflows)
        return max(own + requant, array, (load + own + array) / 2 if share else 0), load + own + array

    def cost(share: int) -> float:
        sizes = _row_sizes(s.out_height, rows, halve)
        return sum(tile(share, size)[0] for size in sizes) + tile(share, sizes[0])[1]
    return min(range(0, s.channels, cols), key=lambda share: cost(share) * (SHARE_MARGIN if share else 1))


def block_diagonals(per_tap: np.ndarray, start: int, width: int) -> np.ndarray:
    """The array's weights for channels start.. of a depthwise filter (channels x taps), one block diagonal per
    `width` channels: row t x width + c (im2col's order: tap, then channel), column c, holds channel c's tap t."""
    channels, taps = per_tap.shape
    blocks = []
    for c0 in range(start, channels, width):
        block = np.zeros((taps, width, width), np.int8)
        block[:, np.arange(width), np.arange(width)] = per_tap[c0:c0 + width].T
        blocks.append(block.reshape(taps * width, width))
    return np.concatenate(blocks)


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
    share: int = 0
    """the last channels, whole array widths, whose taps the array computes (array_share); the vector engine does the
    others' while it does the tile before's REQUANT"""
    width: int = 0
    """channels per block diagonal: the array's columns"""
    diagonals: int = 0
    """constants offset of the array's block diagonals (block_diagonals)"""
    dataflow: str = "ws"

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
        share = array_share(shape, rows, config, not pool) if block == channels and not adds else 0
        budget = _Budget(shape, fixed + align(share * taps * config.array_cols), adds)
        if share and not budget.fits(rows, block, config):
            share = 0
        divisor = add_constant(np.int32(shape.out_height * shape.out_width).astype("<i4").tobytes()) \
            if pool == "avg" else 0
        pixels, cols = rows * shape.out_width, config.array_cols
        return DepthwiseLayer(
            shape, source, result, add_constant(np.ascontiguousarray(per_tap.T).astype(np.int8).tobytes()),
            add_constant(folded.astype("<i4").tobytes()),
            add_constant(requant.table()) if requant.per_channel else 0, requant, x_zero, rows, block, epilogue,
            tuple(add_constant(t.table) for t in tables(epilogue)), clamp, pool, None, divisor, share, cols,
            add_constant(block_diagonals(per_tap, channels - share, cols).tobytes()) if share else 0,
            min(config.dataflows, key=lambda flow: matmul_cycles(pixels, taps * cols, cols, flow, config)))

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
        drain); its work is a VMAC per tap and output row whatever the tiles. Not with an array share: its products
        pay a whole fold however few the pixels (ShuffleNet's stage-3 depthwise: 17,324 -> 16,178 cycles)."""
        bounds = [0]
        for size in _row_sizes(self.shape.out_height, self.rows, not self.pool and not self.share):
            bounds.append(bounds[-1] + size)
        return list(zip(bounds, bounds[1:]))

    def spad_end(self) -> int:
        """The end of the scratchpad the layer uses: its tables and weights, its two slots, a pool's rows."""
        s, adds = self.shape, sum(isinstance(op, AddTensor) for op in self.epilogue)
        ins, out, _ = _Budget(s, 0, adds).slot(self.rows, self.block)
        slot_bytes = ins + out * (1 + adds)
        return ((align(8 * s.channels) if self.requant.per_channel else 0) + align(tables_size(self.epilogue))
                + align(s.kh * s.kw * s.channels) + align(self.share * s.kh * s.kw * self.width) + 2 * slot_bytes
                + (2 * align(s.channels) if self.pool else 0))

    def tiles(self, base: Callable[[DramTensor], int], constants: int) -> tuple[list[Op], list[Tile], Op | None]:
        """(prologue, tiles, the array's configuration when it takes a share) with absolute DRAM addresses."""
        s, c_all, taps = self.shape, self.shape.channels, self.shape.kh * self.shape.kw
        table_bytes = align(8 * c_all) if self.requant.per_channel else 0
        luts = table_places(self.epilogue, table_bytes)
        weights = table_bytes + align(tables_size(self.epilogue))
        adds = [op for op in self.epilogue if isinstance(op, AddTensor)]
        in_bytes, out_bytes, words = _Budget(s, 0, len(adds)).slot(self.rows, self.block)
        slot_bytes = in_bytes + out_bytes * (1 + len(adds))
        diagonals = weights + align(taps * c_all)
        first_slot = diagonals + align(self.share * taps * self.width)
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
        if self.share:
            prologue += [config_load(self.width, 0, self.width),
                         load(constants + self.diagonals, "spad", diagonals, self.share * taps, 1)]
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
                    if self.share:
                        tile = self._shared_tile(
                            input_loads(s, self.source, self.x_zero, source + b * self.source.batch_stride, oy0, oy1,
                                        n, ins),
                            ins, out, accs[slot], weights, diagonals, luts,
                            result + b * r.batch_stride + oy0 * r.row_stride, oy1 - oy0)
                        for c0, width in self._blocks() if self.pool else ():  # each block folds its own sums
                            specs, store = self._pool(out + pixels * c0, sums + c0, divisor_row,
                                                      pooled_rows[b % 2] + c0, pixels, width, oy0 == 0,
                                                      oy1 == s.out_height)
                            tile.vector += specs
                        if self.pool and oy1 == s.out_height:
                            tile.stores += self._pooled_store(base, b, pooled_rows[b % 2], 0, c_all)
                        tiles.append(tile)
                        continue
                    operands = {id(op): out + (1 + a) * out_bytes for a, op in enumerate(adds)}
                    loads = input_loads(s, self.source, self.x_zero, source + b * self.source.batch_stride + c0,
                                        oy0, oy1, n, ins)
                    for op in adds:
                        x = op.operand
                        loads += [CONFIG_LOAD(row_stride=x.row_stride, plane_stride=0,
                                              col_stride=x.pixel_stride, elem_bytes=n),
                                  load(base(x.tensor) + b * x.batch_stride + oy0 * x.row_stride + c0, "spad",
                                       operands[id(op)], oy1 - oy0, s.out_width)]
                    vector = self._taps(ins, accs[slot], weights + c0, oy1 - oy0, n, n)
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
                            stores += self._pooled_store(base, b, pooled_rows[b % 2], c0, n)
                    tiles.append(Tile([Step(loads)], vector, stores))
        return prologue, tiles, self._matmul_config(0) if self.share else None

    def _pooled_store(self, base: Callable[[DramTensor], int], b: int, row: int, c0: int, n: int) -> list[Op]:
        """The store of batch element b's pooled channels c0.. (n of them) from the scratchpad row at `row`."""
        p = self.pooled
        return [CONFIG_STORE(row_stride=0, plane_stride=0, col_stride=p.pixel_stride, elem_bytes=n),
                STORE(dram=base(p.tensor) + b * p.batch_stride + c0, space="spad", sram=row + c0, planes=1, rows=1,
                      cols=1)]

    def _blocks(self) -> list[tuple[int, int]]:
        """(first channel, channels) of the vector engine's block, then of each of the array's."""
        own = self.shape.channels - self.share
        return [(0, own)] + [(c0, self.width) for c0 in range(own, self.shape.channels, self.width)]

    def _matmul_config(self, width: int) -> Op:
        """The array's window: `width` channels of the tile's pixels (every channel, pixel_pitch apart)."""
        s = self.shape
        (sh, sw), (dh, dw) = s.stride, s.dilation
        return CONFIG_MATMUL(dataflow=self.dataflow, im2col=1, out_w=s.out_width, channels=max(width, 1), kw=s.kw,
                             stride_h=sh, stride_w=sw, dil_h=dh, dil_w=dw, row_pitch=s.padded_width * s.channels,
                             pixel_pitch=s.channels)

    def _shared_tile(self, loads: list[Op], ins: int, out: int, acc: int, weights: int, diagonals: int,
                     luts: dict[int, int], dram: int, rows: int) -> Tile:
        """A row tile of every channel whose last `share` channels the array computes: the vector engine's taps are the
        step's preparation (so the input slot is free only once both engines have read it), the array's products its
        matrix work; then a REQUANT (and the epilogue) per block, the blocks one after another in the accumulator and
        the scratchpad, and a STORE each into its channels of the result."""
        s, c_all, taps, r = self.shape, self.shape.channels, self.shape.kh * self.shape.kw, self.result
        pixels, own = rows * s.out_width, c_all - self.share
        blocks = self._blocks()
        matmuls: list[Op] = []
        for k, (c0, n) in enumerate(blocks[1:]):
            matmuls += [self._matmul_config(n),
                        MATMUL(inp=ins + c0, wgt=diagonals + k * taps * n * n, acc=acc + pixels * c0, rows=pixels,
                               k=taps * n, n=n, acc_mode=0)]
        vector: list[Op] = []
        stores: list[Op] = []
        for c0, n in blocks:
            specs, rest = requant_specs(self._config_requant(c0), out + pixels * c0, acc + pixels * c0, pixels, n,
                                        self.epilogue, luts)
            vector += specs
            for op in rest:
                vector += epilogue_specs(op, out + pixels * c0, acc + pixels * c0, pixels, n, 0, luts)
            stores += [CONFIG_STORE(row_stride=r.row_stride, plane_stride=0, col_stride=r.pixel_stride, elem_bytes=n),
                       STORE(dram=dram + c0, space="spad", sram=out + pixels * c0, planes=1, rows=rows,
                             cols=s.out_width)]
        prepare = self._taps(ins, acc, weights, rows, own, c_all)
        return Tile([Step(loads, matmuls, prepare=prepare)], vector, stores)

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

    def _taps(self, ins: int, acc: int, weights: int, rows: int, n: int, pitch: int) -> list[Op]:
        """Every tap of every output row of a tile, for its first `n` of the `pitch` channels each pixel holds: the
        first tap overwrites the row's accumulators."""
        s = self.shape
        (sh, sw), (dh, dw) = s.stride, s.dilation
        specs: list[Op] = []
        for oy in range(rows):
            for t in range(s.kh * s.kw):
                ky, kx = divmod(t, s.kw)
                specs.append(VMAC(dst=acc + oy * s.out_width * n,
                                  src=ins + ((oy * sh + ky * dh) * s.padded_width + kx * dw) * pitch,
                                  wgt=weights + t * s.channels, rows=s.out_width, cols=n, pitch=sw * pitch,
                                  acc_mode=int(t > 0)))
        return specs

    def _config_requant(self, c0: int) -> Op:
        r = self.requant
        per_channel = r.per_channel
        return CONFIG_REQUANT(
            multiplier=0 if per_channel else int(r.multipliers[0]), shift=0 if per_channel else int(r.shifts[0]),
            zero_point=r.zero, clamp_lo=self.clamp[0], clamp_hi=self.clamp[1], per_channel=int(per_channel),
            table=8 * c0 if per_channel else 0, bias_row=1, bias=c0)
