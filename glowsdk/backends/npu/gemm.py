"""Convolution and matrix-product layers: pre-tiled weights, the tile loop nest, its instructions.

One layer is `Conv -> Rescale` or `MatMul [-> Add bias] -> Rescale` from the quantized graph. The
input's zero point is folded into the bias (`bias - zp_x * sum(w)`, per output channel) and the
convolution padding is written by the load DMA with the zero point, so the array multiplies raw
int8 values (vendor_guide/npu_architecture.md, idioms). The bias of every output channel is loaded
into the accumulator once, by the layer's prologue. Per tile: load the input rows with their halo
(implicit im2col reads them in place) and the weight block; MATMUL, overwriting for the first
input-channel block and accumulating after; REQUANT with the tile's part of the bias row added, into
the scratchpad; STORE into the NHWC (or row-major) result. Each MATMUL takes the dataflow the array's
cycle formula favours for its shape (weight-stationary for many pixels, output-stationary for few
pixels and a deep K).

An epilogue (the NPU's operator stacking, epilogue.py) applies the element-wise chain that follows the
layer in the graph to each tile while it is still in the scratchpad, on the vector engine while the
array computes the next tile.

A channel gate before a 1 x 1 convolution (squeeze-and-excitation's `x * s` before its projection) is the
prologue's counterpart (`ChannelGate`): each step's input tile is gated in place between its load and the array.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from isa.config import ArchConfig
from isa.roofline import Workload
from sim.timing import grouped_matmul_cycles, matmul_cycles

from ...errors import UnsupportedError
from .accpack import packed_offset
from .epilogue import (AddTensor, EpilogueOp, compact, epilogue_specs, requant_specs, table_loaded_once, table_places,
                       tables, tables_size, vector_passes)
from .expected import stream_rows
from .instructions import (CONFIG_LOAD, CONFIG_MATMUL, CONFIG_PAD, CONFIG_REQUANT, CONFIG_STORE, GMATMUL, MATMUL,
                           REDUCE, REQUANT_MUL, STORE, VADDI, VDIV, VMULI, VSUBI, Op)
from .pipeline import PREFETCH, Step, Tile
from .scratchpad import align
from .step_cost import ConvShape, Pitches, row_tile_sizes, stacked_rows, step_array_cycles
from .tensors import DramTensor
from .tile_loads import Image, config_load, input_loads, load, stacked_loads, streamed_step
from .tiling import Tiling, block_touches, choose_grouped_tiling, choose_packed_tiling, choose_tiling
from .window import pool_across, window_pooled, running_width, split_shape, tile_maxima, window_tiling


@dataclass(frozen=True)
class Requant:
    """Per-output-channel fixed-point multipliers and shifts, the output zero point."""

    multipliers: np.ndarray
    shifts: np.ndarray
    zero: int

    @property
    def per_channel(self) -> bool:
        return len(set(zip(self.multipliers.tolist(), self.shifts.tolist()))) > 1

    def take(self, order: np.ndarray) -> Requant:
        """The parameters of output channels `order` (a permutation or a slice of the channels)."""
        return Requant(self.multipliers[order], self.shifts[order], self.zero)

    def table(self) -> bytes:
        table = np.zeros((len(self.multipliers), 8), np.uint8)
        table[:, :4] = self.multipliers.astype("<i4").view(np.uint8).reshape(-1, 4)
        table[:, 4] = self.shifts.astype(np.int8).view(np.uint8)
        return table.tobytes()


@dataclass(frozen=True)
class Packing:
    """A grouped convolution run by GMATMUL (its groups side by side on the array, no zeros multiplied); with
    `interleave` its result is in a channel shuffle's order (group q's channel j at j*groups + q)."""

    groups: int
    interleave: bool

    def order(self, channels: int) -> np.ndarray:
        """Result channel t is the convolution's channel order[t]."""
        return np.arange(channels).reshape(self.groups, -1).T.reshape(-1) if self.interleave else np.arange(channels)


@dataclass(frozen=True)
class ChannelGate:
    """The input of a 1 x 1 convolution scaled per channel by a gate computed at run time, as each input tile is
    loaded: squeeze-and-excitation's `Rescale(x * s)` before its projection (gate.py's arithmetic), so the gated
    image never makes a round trip through DRAM and is no layer of its own. The prologue loads s (one int8 per
    input channel); the first step makes the gate row g = s - z_s and the bias row -z_x * g in the accumulator;
    every step's input tile is requantized in place (REQUANT_MUL: q_x * g - z_x * g, exact) before the array
    reads it."""

    gate: DramTensor
    """s: N x C x 1 x 1, one int8 per input channel (N = 1)"""
    x_zero: int
    gate_zero: int
    requant: Requant

    def rows(self, sram: int, gate: int, bias: int, channels: int) -> list[Op]:
        """The gate row at accumulator `gate` and the bias row at `bias` from s at scratchpad `sram`."""
        return [VSUBI(dst_space="acc", dst=gate, src_space="spad", src=sram, count=channels, imm=self.gate_zero),
                VMULI(dst_space="acc", dst=bias, src_space="acc", src=gate, count=channels, imm=-self.x_zero)]

    def apply(self, tile: int, pixels: int, c: int, gate: int, bias: int) -> list[Op]:
        """A dense `pixels` x `c` int8 input tile at `tile` gated in place, its channels' rows at `gate`, `bias`."""
        r = self.requant
        return [CONFIG_REQUANT(multiplier=int(r.multipliers[0]), shift=int(r.shifts[0]), zero_point=r.zero,
                               clamp_lo=-128, clamp_hi=127, per_channel=0, table=0, bias_row=1, bias=bias),
                REQUANT_MUL(dst=tile, src=tile, scale=gate, rows=pixels, cols=c)]


def pretile_packed(filters: np.ndarray, tiling: Tiling, packing: Packing) -> list[tuple[int, int, bytes]]:
    """(n0, 0, bytes) per output tile of a GMATMUL layer: `filters` is the O x C/G x KH x KW grouped filter, the
    tile at result channel n0 is the same nt = n / G channels j0.. of every group (n0 = G j0 interleaved, else
    every channel, j0 = 0), each group's (KH*KW*C/G) x nt block row-major, rows ordered (ky, kx, ci), one after
    another: GMATMUL's weight operand, one contiguous LOAD."""
    out_channels, g = filters.shape[0], packing.groups
    per_group = out_channels // g
    blocks = []
    for n0 in range(0, out_channels, tiling.n):
        j0, nt = n0 // g, min(tiling.n, out_channels - n0) // g
        data = b"".join(np.ascontiguousarray(filters[q * per_group + j0:q * per_group + j0 + nt].transpose(2, 3, 1, 0))
                        .reshape(-1, nt).astype(np.int8).tobytes() for q in range(g))
        blocks.append((n0, 0, data))
    return blocks


def pretile_weights(filters: np.ndarray, tiling: Tiling) -> list[tuple[int, int, bytes]]:
    """(n0, c0, bytes) blocks of the O x C x KH x KW int8 filter, each (KH*KW*c) x n row-major with
    rows ordered (ky, kx, ci): the K x N layout the array reads, one contiguous LOAD per block."""
    out_channels, channels = filters.shape[:2]
    blocks = []
    for n0 in range(0, out_channels, tiling.n):
        for c0 in range(0, channels, tiling.c):
            block = filters[n0:n0 + tiling.n, c0:c0 + tiling.c]          # n, c, kh, kw
            block = np.ascontiguousarray(block.transpose(2, 3, 1, 0))      # kh, kw, c, n
            blocks.append((n0, c0, block.reshape(-1, block.shape[-1]).astype(np.int8).tobytes()))
    return blocks


def _reserved_spad(shape: ConvShape, per_channel: bool, epilogue: Sequence[EpilogueOp], gated: bool = False) -> int:
    """Scratchpad bytes a layer keeps before its tiles: the per-channel requantize table, the epilogue's tables,
    a channel gate's row."""
    return align(8 * shape.out_channels if per_channel else 0) + align(tables_size(epilogue)) + \
        (align(shape.channels) if gated else 0)


def prologue_loads(shape: ConvShape, per_channel: bool, epilogue: Sequence[EpilogueOp], gated: bool = False
                   ) -> tuple[int, ...]:
    """The bytes of each load of a layer's prologue besides the bias (expected.expected): the per-channel requantize
    table, the epilogue's tables, a channel gate's row."""
    return ((8 * shape.out_channels,) if per_channel else ()) + tuple(len(t.table) for t in tables(epilogue)) + \
        ((shape.channels,) if gated else ())


def gateable(shape: ConvShape, batch: int) -> bool:
    """Whether a layer's input tiles can be gated as they are loaded (`ChannelGate`): a 1 x 1 convolution whose
    input tile is the dense pixels x channels of its output pixels (no padding, no stride), of one image."""
    return (shape.kh, shape.kw) == (1, 1) and shape.stride == (1, 1) and not any(shape.pads) and batch == 1


def whole_image_fits(shape: ConvShape, config: ArchConfig, per_channel: bool,
                     epilogue: Sequence[EpilogueOp], gated: bool = False) -> bool:
    """Whether a layer of `shape` has a tiling whose every tile holds the whole image (a fused global pool)."""
    epilogue = compact(epilogue)
    try:
        choose_tiling(shape, config, _reserved_spad(shape, per_channel, epilogue, gated),
                      sum(isinstance(op, AddTensor) for op in epilogue), whole_image=True,
                      reserved_acc=2 * shape.channels if gated else 0,
                      tables=prologue_loads(shape, per_channel, epilogue, gated))
    except UnsupportedError:
        return False
    return True


def window_plan(shape: ConvShape, config: ArchConfig, per_channel: bool, epilogue: Sequence[EpilogueOp],
                pad: int = 0) -> tuple[Tiling, bool] | None:
    """`window.window_tiling` for a layer of this requantization and epilogue and a pool padded by `pad` (None: its
    tiles cannot pool)."""
    epilogue = compact(epilogue)
    return window_tiling(shape, config, _reserved_spad(shape, per_channel, epilogue), vector_passes(epilogue),
                         prologue_loads(shape, per_channel, epilogue), pad)


@dataclass
class GemmLayer:
    """Everything one convolution/matrix layer needs, placed; `tiles` makes its instructions."""

    shape: ConvShape
    tiling: Tiling
    source: Image
    result: Image
    weights: dict[tuple[int, int], int]
    """(n0, c0) -> constants offset of the block"""
    bias: int
    """constants offset of the int32 bias (zero-point folded)"""
    table: int
    """constants offset of the per-channel requantize table"""
    requant: Requant
    x_zero: int
    config: ArchConfig
    epilogue: tuple[EpilogueOp, ...] = ()
    spad_table: int = 0
    groups: int = 1
    """groups of a grouped convolution on the filter's block diagonal (their zeros are no work)"""
    luts: tuple[int, ...] = ()
    """constants offsets of the epilogue's tables (`tables`), loaded once after the requantize table"""
    input_bytes: int = 0
    """the bytes of the tensor the layer reads, where its shape reads fewer (`merged_view`); 0: the shape's"""
    pool: str | None = None
    """"avg" or "max": a pool over the whole image of the result, its only reader, done by the tiles (each holds
    every row of its channels, `whole_image_pool`), so the layer writes the pooled row"""
    window: bool = False
    """a 3x3 stride-2 max pool of the result (its only reader) done by the tiles (window.py), so the layer writes
    the pooled image and the full one never reaches DRAM"""
    window_pad: int = 0
    """with `window`: the pool's padding on top and on the left (0 or 1; none is read below or on the right)"""
    divisor: int = 0
    """avg: constants offset of the pixel count (one int32), repeated along an accumulator row by a zero stride"""
    prefetched: int | None = None
    """the scratchpad address of the first step's weight block when the layer before loads it (prefetch.py)"""
    ahead_operands: tuple[int, int] | None = None
    """(scratchpad address, tiles) of the residual operands of the first tiles when the layer before loads them
    (operands_ahead.py): tile i's are at address + (i * adds + a) * `operand_bytes`, and it loads none"""
    kept_results: tuple[int, int] | None = None
    """(scratchpad address, tiles): the first tiles requantize their result there, `operand_bytes` apart, and store it
    from there, where the next layer's tiles read it as their residual operand (operands_ahead.py) or its first row
    tiles as their input (kept_inputs.py)"""
    prefetched_input: tuple[int, int] | None = None
    """(scratchpad address, transfers) of the first step's input rows when the layer before loads them (prefetch.py)"""
    kept_input: tuple[int, int] | None = None
    """(scratchpad address, row tiles): the first row tiles read their input rows there, where the layer before kept
    its result (its `kept_results`; kept_inputs.py), image row y at address + y * width * channels, and load none"""
    gate: ChannelGate | None = None
    """the per-channel gate each input tile is scaled by as it is loaded"""
    swapped: bool = False
    """the first tile's accumulator rows are the second slot's (accplace.py: clear of the layer before's last tile)"""
    acc_base: int = 0
    """the accumulator word the layer's layout (`acc_span`) starts at (accplace.py: a handed-off first product
    clear of what the layer before still reads)"""
    bias_last: bool = False
    """the layout's bias row after its two tile slots, not before them (accplace.py)"""
    packing: Packing | None = None
    """a grouped convolution run by GMATMUL (`plan_packed`)"""
    split: bool = False
    """with `window`: each step computes the tile's even columns, then its odd ones, two products whose results
    lie one block after the other, so that the pool's maxima across are whole rows (window.py)"""
    first_rows: int = 0
    """the first row tile's output rows where rowplan.py plans them (at most the tiling's `rows`); 0: the tiling's"""

    @staticmethod
    def plan(shape: ConvShape, config: ArchConfig, source: Image, result: Image, filters: np.ndarray,
             bias: np.ndarray, requant: Requant, x_zero: int, add_constant: Callable[[bytes], int],
             epilogue: tuple[EpilogueOp, ...] = (), groups: int = 1, diagonal: bool = False,
             pool: str | None = None, gate: ChannelGate | None = None, window: bool = False, window_pad: int = 0
             ) -> GemmLayer:
        """Choose the tiling and place the pre-tiled weights, the bias and the table in the constants. With
        `diagonal`, `filters` is the block diagonal of `groups` groups in their order: the tiles follow the
        groups and the blocks off the diagonal are no step (tiling.choose_grouped_tiling). With `pool`, the
        result is pooled over the whole image ("avg" or "max"; UnsupportedError if no tile holds a whole image).
        With `gate`, the input is gated as it is loaded (the shape must be `gateable`). With `window`, the result
        is max pooled 3x3 with stride 2, padded by `window_pad` on top and on the left (UnsupportedError if
        `window_plan` finds no tiling)."""
        if gate is not None and (diagonal or not gateable(shape, source.batch)):
            raise AssertionError("a channel gate on the input of a layer whose input tiles are not its pixels")
        read = source.batch * shape.height * shape.width * shape.channels
        if groups == 1 and pool is None and not window:
            shape, source, result, epilogue = merged_view(shape, source, result, epilogue)
        epilogue = compact(epilogue)
        table_bytes = 8 * shape.out_channels if requant.per_channel else 0
        reserved = _reserved_spad(shape, requant.per_channel, epilogue, gate is not None)
        adds = sum(isinstance(op, AddTensor) for op in epilogue)
        pitches = Pitches(source.pixel_stride, result.pixel_stride)
        stackable = groups == 1 and gate is None \
            and result.batch_stride == (1 if pool else shape.out_height) * result.row_stride \
            and all(op.operand.batch_stride == shape.out_height * op.operand.row_stride
                    for op in epilogue if isinstance(op, AddTensor))
        split = False
        if diagonal:
            tiling = choose_grouped_tiling(shape, groups, config, reserved, adds, vector_passes(epilogue), pitches,
                                           prologue_loads(shape, requant.per_channel, epilogue))
        elif window:
            chosen = window_plan(shape, config, requant.per_channel, epilogue, window_pad)
            if chosen is None:
                raise UnsupportedError("no two-row tile of the convolution fits beside the pool's running maximum")
            tiling, split = chosen
        else:
            tiling = choose_tiling(
                shape, config, reserved, extra_buffers=adds,
                vector_passes=vector_passes(epilogue) + (pool is not None), pitches=pitches,
                whole_image=pool is not None, reserved_acc=2 * shape.channels if gate else 0,
                input_passes=int(gate is not None), batch=source.batch if stackable else 1,
                tables=prologue_loads(shape, requant.per_channel, epilogue, gate is not None))
        divisor = add_constant(np.int32(shape.out_height * shape.out_width).astype("<i4").tobytes()) \
            if pool == "avg" else 0
        sums = filters.astype(np.int64).reshape(shape.out_channels, -1).sum(axis=1)
        folded = (bias.astype(np.int64) - x_zero * sums + (1 << 31)) % (1 << 32) - (1 << 31)
        og, cg = (shape.out_channels // groups, shape.channels // groups) if diagonal else (shape.out_channels,
                                                                                             shape.channels)
        weights = {(n0, c0): add_constant(data) for n0, c0, data in pretile_weights(filters, tiling)
                   if block_touches(n0, tiling.n, c0, tiling.c, og, cg)}
        return GemmLayer(shape, tiling, source, result, weights, add_constant(folded.astype("<i4").tobytes()),
                         add_constant(requant.table()) if table_bytes else 0, requant, x_zero, config, epilogue,
                         groups=groups, luts=tuple(add_constant(t.table) for t in tables(epilogue)), input_bytes=read,
                         pool=pool, divisor=divisor, gate=gate, window=window, split=split,
                         window_pad=window_pad)

    @staticmethod
    def packed_tiling(shape: ConvShape, config: ArchConfig, source: Image, result: Image, requant: Requant,
                      epilogue: tuple[EpilogueOp, ...], packing: Packing) -> Tiling:
        """The tiling `plan_packed` takes (its estimate lets a caller weigh it against another way)."""
        epilogue = compact(epilogue)
        return choose_packed_tiling(shape, packing.groups, packing.interleave, config,
                                    _reserved_spad(shape, requant.per_channel, epilogue),
                                    sum(isinstance(op, AddTensor) for op in epilogue), vector_passes(epilogue),
                                    Pitches(source.pixel_stride, result.pixel_stride),
                                    prologue_loads(shape, requant.per_channel, epilogue))

    @staticmethod
    def plan_packed(shape: ConvShape, config: ArchConfig, source: Image, result: Image, filters: np.ndarray,
                    bias: np.ndarray, requant: Requant, x_zero: int, add_constant: Callable[[bytes], int],
                    epilogue: tuple[EpilogueOp, ...], packing: Packing) -> GemmLayer:
        """A grouped convolution as GMATMUL steps: `filters` is its O x C/G x KH x KW grouped filter, `bias` and
        `requant` per output channel of the convolution; the layer writes its result in `packing`'s order."""
        tiling = GemmLayer.packed_tiling(shape, config, source, result, requant, epilogue, packing)
        epilogue = compact(epilogue)
        order = packing.order(shape.out_channels)
        sums = filters.astype(np.int64).reshape(shape.out_channels, -1).sum(axis=1)
        folded = ((bias.astype(np.int64) - x_zero * sums + (1 << 31)) % (1 << 32) - (1 << 31))[order]
        requant = requant.take(order)
        weights = {(n0, c0): add_constant(data) for n0, c0, data in pretile_packed(filters, tiling, packing)}
        return GemmLayer(shape, tiling, source, result, weights, add_constant(folded.astype("<i4").tobytes()),
                         add_constant(requant.table()) if requant.per_channel else 0, requant, x_zero, config,
                         epilogue, groups=packing.groups, luts=tuple(add_constant(t.table) for t in tables(epilogue)),
                         input_bytes=source.batch * shape.height * shape.width * shape.channels, packing=packing)

    def workload(self) -> Workload:
        """The work no tiling avoids (isa/roofline.py): the useful MACs (a block diagonal's zeros are none),
        every constant once, the input and each residual operand once, the result once. A depthwise layer
        (one input channel per group) is bounded by the vector lanes."""
        s, g, batch = self.shape, self.groups, self.source.batch
        pixels = batch * s.out_height * s.out_width
        taps = s.kh * s.kw * s.channels // g
        constants = taps * s.out_channels + 4 * s.out_channels + (8 * s.out_channels if self.requant.per_channel else 0)
        adds = sum(isinstance(op, AddTensor) for op in self.epilogue)
        gate = self.gate.gate.elements if self.gate else 0
        return Workload(pixels * s.out_channels * taps, "vector" if g > 1 and s.channels == g else "array", constants,
                        (self.input_bytes or batch * s.height * s.width * s.channels) + adds * pixels * s.out_channels
                        + gate,
                        (batch if self.pool else batch * self.result_pixels() if self.window else pixels)
                        * s.out_channels)

    def result_pixels(self) -> int:
        """An image's pixels in the result: the pooled ones with a `window` pool."""
        s = self.shape
        pad = self.window_pad
        return window_pooled(s.out_height, pad) * window_pooled(s.out_width, pad) if self.window else \
            s.out_height * s.out_width

    def tiled_shape(self) -> ConvShape:
        """The geometry the tiles compute: the layer's, or with `split` its even number of columns."""
        return split_shape(self.shape) if self.split else self.shape

    def spad_end(self) -> int:
        """The end of the scratchpad the layer's tiles use: its tables, then its double buffers (`tiles`)."""
        s = self.tiled_shape()
        return _reserved_spad(s, self.requant.per_channel, self.epilogue, self.gate is not None) + \
            self.tiling.spad_bytes(s)

    def acc_end(self) -> int:
        """The end of the accumulator the layer's tiles use (`acc_span` from `acc_base`)."""
        return self.acc_base + self.acc_span()

    def acc_span(self) -> int:
        """The accumulator words of the layer's layout: the bias row and two tile slots (in either order,
        `bias_last`), an average's divisor row, a channel gate's two rows, a window pool's running maximum."""
        s, t = self.tiled_shape(), self.tiling
        running = running_width(self.shape, self.split) * s.out_channels if self.window else 0
        return s.out_channels + 2 * self.acc_slot() + (t.n if self.pool == "avg" else 0) + \
            (2 * s.channels if self.gate else 0) + running

    def acc_slot(self) -> int:
        """The accumulator words of one of the two tile slots (the second starts this far after the first)."""
        s, t = self.tiled_shape(), self.tiling
        return t.array_rows(s) * s.out_width * t.n

    def first_product(self) -> tuple[int, int]:
        """[start, stop): the accumulator words the first step's product writes (its first chunk's where it streams,
        `_first_rows`), in the layer's layout (`acc_base`, `bias_last`) and slot (`swapped`): what a hand-off's
        handshake guards (handoff.py)."""
        s, t = self.shape, self.tiling
        oy0, oy1 = self._first_rows()
        start = self._slots() + (self.acc_slot() if self.swapped else 0)
        return start, start + (oy1 - oy0) * s.out_width * min(t.n, s.out_channels)

    def _slots(self) -> int:
        """The accumulator word of the first of the two tile slots."""
        return self.acc_base + (0 if self.bias_last else self.tiled_shape().out_channels)

    def steps(self) -> int:
        """How many steps (loads, then matrix work) the layer's tiles make."""
        s, t = self.shape, self.tiling
        return (-(-self.source.batch // t.images) * len(self.row_tiles()) * -(-s.out_channels // t.n)
                * -(-s.channels // t.c))

    def row_tiles(self) -> list[tuple[int, int]]:
        """(first, end) output rows of each row tile: the tiling's rows, except that with one weight block (no
        reload between row tiles) and no residual operand (whose loads the smaller tiles would multiply) the
        first and the last tile are halved where the halves take no more array cycles than the whole: the array
        starts after a smaller load, and less vector work and store follow its last step (pipeline fill and
        drain); a first tile `first_rows` long where rowplan.py plans one."""
        s, t = self.shape, self.tiling
        operands = any(isinstance(op, AddTensor) for op in self.epilogue)  # more loads to a DRAM-bound layer
        halve = len(self.weights) == 1 and t.c >= s.channels and not self.pool and not self.window and not operands
        if self.window_pad and t.rows < s.out_height:  # tiles end on an even virtual row (window.tile_maxima):
            # the first has one row less
            sizes = [t.rows - 1, *row_tile_sizes(replace(s, out_height=s.out_height - t.rows + 1), t.rows, t.n,
                                                 self.config)]
        else:
            sizes = row_tile_sizes(s, t.rows, t.n, self.config, self.packing.groups if self.packing else 1, halve,
                                   self.first_rows)
        bounds = [0]
        for size in sizes:
            bounds.append(bounds[-1] + size)
        return list(zip(bounds, bounds[1:]))

    def stored_early(self) -> int:
        """The result rows (of each image) the tiles store before the last row tile: its first row, or with a
        `window` pool the first pooled row the last tile completes (window.tile_maxima)."""
        last = self.row_tiles()[-1][0]
        return (last + self.window_pad) // 2 - 1 if self.window else last

    def first_chunks(self) -> list[tuple[int, int]]:
        """Output rows [a, b) of the first step's chunks, from its row tile's first row, where it streams
        (`expected.stream_rows`: the array starts on the first rows while the rest load); fewer than two: it
        does not."""
        s, t = self.shape, self.tiling
        if self.packing or self.gate or self.split or self.kept_input or min(t.images, self.source.batch) != 1:
            return []
        oy0, oy1 = self.row_tiles()[0]
        c, n = min(t.c, s.channels), min(t.n, s.out_channels)
        computed = stacked_rows(s, oy1 - oy0, 1) * s.out_width
        return stream_rows(s, oy1 - oy0, c, n, best_dataflow(computed, s.kh * s.kw * c, n, self.config), self.config)

    def first_product_cycles(self) -> int:
        """The array's cycles for the first step's product (`first_product`)."""
        oy0, oy1 = self._first_rows()
        return step_array_cycles(self.shape, oy1 - oy0, self.tiling.n, self.config)

    def rereads_first_chunk(self) -> bool:
        """Whether the row tile of a streamed first step is read by later steps too (every input channel in one
        step, several output-channel tiles): where the layer before loads the first chunk (prefetch.py), the second
        step loads its rows again into the row tile's slot (`_first_chunk_again`)."""
        s, t = self.shape, self.tiling
        return t.c >= s.channels and s.out_channels > t.n and len(self.first_chunks()) > 1

    def _first_rows(self) -> tuple[int, int]:
        """The output rows whose input the layer before loads when it prefetches it: the first chunk of a streamed
        first step, else its whole row tile."""
        oy0, oy1 = self.row_tiles()[0]
        chunks = self.first_chunks()
        return (oy0, oy0 + chunks[0][1]) if len(chunks) > 1 else (oy0, oy1)

    def first_input(self, base: Callable[[DramTensor], int], sram: int) -> list[Op]:
        """The loads of the first step's input rows (`_first_rows` of the first image, its first input-channel
        block) into `sram`: what the layer before issues when it prefetches them."""
        s, t = self.shape, self.tiling
        oy0, oy1 = self._first_rows()
        return input_loads(s, self.source, self.x_zero, base(self.source.tensor), oy0, oy1, min(t.c, s.channels),
                           sram)

    def first_input_bytes(self) -> int:
        """The scratchpad bytes of the first step's prefetched input rows (`first_input`)."""
        s, t = self.shape, self.tiling
        oy0, oy1 = self._first_rows()
        return align(s.in_rows(oy1 - oy0) * s.padded_width * min(t.c, s.channels))

    def first_weights(self) -> tuple[int, int, int]:
        """(constants offset, rows, bytes per row) of the weight block the first step loads."""
        s, t = self.shape, self.tiling
        groups = self.packing.groups if self.packing else 1  # GMATMUL's block: every group's rows of n / groups
        return self.weights[(0, 0)], s.kh * s.kw * min(t.c, s.channels), min(t.n, s.out_channels) // groups

    def tiles(self, base: Callable[[DramTensor], int], constants: int) -> tuple[list[Op], list[Tile], Op]:
        """(prologue, tiles, matrix configuration) with absolute DRAM addresses."""
        s, t = self.tiled_shape(), self.tiling
        table_bytes = 8 * s.out_channels if self.requant.per_channel else 0
        lut_base = align(table_bytes)
        luts = table_places(self.epilogue, lut_base)
        gate_row = lut_base + align(tables_size(self.epilogue))  # a channel gate's s
        slot_base = gate_row + (align(s.channels) if self.gate else 0)
        in_bytes, w_bytes = t.input_bytes(s), t.weight_bytes(s)
        out_bytes = align(t.images * t.rows * s.out_width * t.n)
        acc_tile = self.acc_slot()
        inputs = [slot_base + k * in_bytes for k in (0, 1)]
        weight_slots = [slot_base + 2 * in_bytes + k * w_bytes for k in (0, 1)]
        outputs = [slot_base + 2 * (in_bytes + w_bytes) + k * out_bytes for k in (0, 1)]
        # with every input channel in one step, a row tile's input is loaded once, into the input slot of the row
        # tile's parity, and its output-channel tiles read it there: with several of them, the load waits for the
        # last MATMUL of the row tile two back (Step.shared), so it overlaps the row tile before's last two steps
        # (with one, that MATMUL is the step two back's, which the load waits for anyway)
        stationary = t.c >= s.channels
        several = stationary and s.out_channels > t.n
        streamed = self.prefetched_input is not None and self.rereads_first_chunk()
        kept_rows = self.kept_input[1] if self.kept_input else 0  # (read where the layer before kept them)
        # every output channel's bias first, loaded once (no tile's load waits for the vector engine), at the
        # layout's base: low in the accumulator (REQUANT addresses it in 19 bits, and an accumulator may hold 2^20
        # words), or where accplace.py moves the layout
        bias_row = self.acc_base + (2 * acc_tile if self.bias_last else 0)
        accs = [self._slots(), self._slots() + acc_tile][::-1 if self.swapped else 1]
        adds = [op for op in self.epilogue if isinstance(op, AddTensor)]
        extra_base = outputs[1] + out_bytes
        operands = {id(op): [extra_base + (2 * a + k) * out_bytes for k in (0, 1)] for a, op in enumerate(adds)}
        prologue: list[Op] = []
        if table_bytes:
            prologue = [config_load(0, 0, table_bytes), load(constants + self.table, "spad", 0, 1, 1)]
        for offset, lut in zip(self.luts, tables(self.epilogue)):
            prologue += [config_load(0, 0, len(lut.table)), load(constants + offset, "spad", luts[id(lut)], 1, 1)]
        prologue += [config_load(0, 0, 4 * s.out_channels),
                     load(constants + self.bias, "acc", bias_row, 1, 1)]
        divisor_row = self.acc_base + s.out_channels + 2 * acc_tile
        if self.pool == "avg":  # the pixel count in every column of a tile's channels, after the two tiles
            prologue += [config_load(0, 0, 4), load(constants + self.divisor, "acc", divisor_row, 1, t.n)]
        gates = divisor_row + (t.n if self.pool == "avg" else 0)  # a channel gate's rows: g, then -z_x * g
        if self.gate:
            prologue += [config_load(0, self.gate.gate.strides[1], 1),
                         load(base(self.gate.gate), "spad", gate_row, 1, s.channels)]
        source, result = base(self.source.tensor), base(self.result.tensor)
        tiles, g, row_tile = [], 0, -1
        packed = packed_offset(self)
        last = -(-self.source.batch // t.images) * len(self.row_tiles()) * -(-s.out_channels // t.n) - 1
        held: list[tuple[int, int] | None] = [None, None]
        """the weight block each weight slot holds: a step whose block the step two back loaded reads it there"""
        single = len(self.weights) == 1 and stationary
        config = None
        for b in range(0, self.source.batch, t.images):
            images = min(t.images, self.source.batch - b)  # stacked in the tile (Tiling.images)
            for oy0, oy1 in self.row_tiles():
                pixels = images * (oy1 - oy0) * s.out_width
                computed = stacked_rows(s, oy1 - oy0, images) * s.out_width
                row_tile += 1
                for n0 in range(0, s.out_channels, t.n):
                    n = min(t.n, s.out_channels - n0)
                    slot = len(tiles) % 2
                    pack = packed is not None and len(tiles) == last
                    acc = accs[1 - slot] + packed if pack else accs[slot]
                    steps = []
                    for c0 in range(0, s.channels, t.c):
                        if (n0, c0) not in self.weights:  # off a block diagonal: no work
                            continue
                        c = min(t.c, s.channels - c0)
                        ins, wgt = inputs[row_tile % 2 if stationary else g % 2], weight_slots[g % 2]
                        # the layer before loaded the first step's input: its first chunk when it streams, else the
                        # whole tile (every step of the row tile reads it there)
                        chunks = self.first_chunks() if g == 0 else []
                        ahead = self.prefetched_input is not None and (g == 0 or stationary and row_tile == 0)
                        if ahead and len(chunks) <= 1 and not (g and streamed):
                            ins = self.prefetched_input[0]
                        if row_tile < kept_rows:  # the layer before's result, where it kept it (kept_inputs.py)
                            ins, ahead = self.kept_input[0] + oy0 * s.width * c, True
                        dram = source + b * self.source.batch_stride + c0
                        image = [] if ahead or stationary and n0 > 0 else input_loads(
                            s, self.source, self.x_zero, dram, oy0, oy1, c, ins) if images == 1 else stacked_loads(
                            s, self.source, self.x_zero, dram, images, c, ins)
                        shared, loads = (image, []) if several else ([], image)
                        if streamed and g == 1:  # the prefetched chunk's rows, for the row tile's other readers
                            loads += self._first_chunk_again(ins, dram)
                        prepare = self.gate.apply(ins, pixels, c, gates + c0, gates + s.channels + c0) \
                            if self.gate and image else []
                        if prepare and g == 0:
                            prepare = self.gate.rows(gate_row, gates, gates + s.channels, s.channels) + prepare
                        k = s.kh * s.kw * c
                        groups = self.packing.groups if self.packing else 1  # GMATMUL's weights: k rows of n / groups
                        early = (PREFETCH, 1 + (self.prefetched_input[1] if self.prefetched_input else 0)
                                 + bool(self.kept_input)) \
                            if g == 0 and self.prefetched is not None else None
                        # the slot that holds this step's block: the step two back loaded it into this one, or (one
                        # block for the whole layer: no load ever replaces it) an earlier step into either
                        kept = [k for k in (g % 2, (g + 1) % 2) if held[k] == (n0, c0) and (k == g % 2 or single)]
                        if early:  # the layer before loaded this block: one step less of pipeline fill
                            wgt = self.prefetched
                        elif kept and image:  # (a step loads something: its wait frees a slot)
                            wgt = weight_slots[kept[0]]
                        else:
                            loads += [config_load(n // groups, 0, n // groups),
                                      load(constants + self.weights[(n0, c0)], "spad", wgt, k, 1)]
                            held[g % 2] = (n0, c0)
                        if self.packing:  # k and the window's channels are one group's
                            k //= groups
                            dataflow = min(self.config.dataflows, key=lambda flow: grouped_matmul_cycles(
                                pixels, k, n // groups, groups, flow, self.config))
                            product = GMATMUL(inp=ins, wgt=wgt, acc=acc, rows=pixels, k=k, n=n // groups,
                                              groups=groups, interleave=int(self.packing.interleave),
                                              acc_mode=int(bool(steps)))
                        elif self.split:  # even columns, then odd ones: a stride twice the layer's
                            half = computed // 2
                            dataflow = best_dataflow(half, k, n, self.config)
                            product = MATMUL(inp=ins, wgt=wgt, acc=acc, rows=half, k=k, n=n,
                                             acc_mode=int(bool(steps)))
                            odd = MATMUL(inp=ins + s.stride[1] * c, wgt=wgt, acc=acc + half * n, rows=half,
                                         k=k, n=n, acc_mode=int(bool(steps)))
                        else:
                            dataflow = best_dataflow(computed, k, n, self.config)
                            product = MATMUL(inp=ins, wgt=wgt, acc=acc, rows=computed, k=k, n=n,
                                             acc_mode=int(bool(steps)))
                        columns = 2 if self.split else 1
                        config = CONFIG_MATMUL(
                            dataflow=dataflow, im2col=1, out_w=s.out_width // columns, channels=c // groups,
                            kw=s.kw, stride_h=s.stride[0], stride_w=s.stride[1] * columns, dil_h=s.dilation[0],
                            dil_w=s.dilation[1], row_pitch=s.padded_width * c, pixel_pitch=c)
                        if len(chunks) > 1:  # the layer's first step: the array starts on its first rows
                            steps.append(streamed_step(s, self.source, self.x_zero, dram, oy0, c, ins, chunks,
                                                       loads if several or ahead else loads[4:], product, config,
                                                       early, several,
                                                       self.prefetched_input[0] if ahead else None))
                        else:
                            products = [product, odd] if self.split else [product]
                            steps.append(Step(loads, [config, *products], matrix_wait=early, prepare=prepare,
                                              shared=shared))
                        g += 1
                    # read by the vector engine only: the array does not wait for them
                    ahead = len(tiles) < self.ahead_operands[1] if self.ahead_operands else False
                    if ahead:  # (the layer before loaded them)
                        first = self.ahead_operands[0] + len(tiles) * len(adds) * out_bytes
                        places = {id(op): first + a * out_bytes for a, op in enumerate(adds)}
                    else:
                        places = {id(op): operands[id(op)][slot] for op in adds}
                    residuals = [] if ahead else self._residual_loads(base, b, images, oy0, oy1, n0, n, places)
                    r = self.result
                    if self.window:
                        running = gates + n0 * running_width(self.shape, self.split)
                        kept = self.kept_results[0] if self.kept_results and len(tiles) < self.kept_results[1] \
                            else None
                        vector, stores = self._window_pool(oy0, oy1, n0, n, acc, outputs[slot], running,
                                                           bias_row, result, luts, kept)
                        tiles.append(Tile(steps, vector, stores, residuals, pack))
                        continue
                    out = outputs[slot] if not self.kept_results or len(tiles) >= self.kept_results[1] else \
                        self.kept_results[0] + len(tiles) * out_bytes
                    vector, rest = requant_specs(self._config_requant(n0, bias_row + n0), out, acc,
                                                 pixels, n, self.epilogue, luts, images,
                                                 s.stack_period() // s.stride[0] * s.out_width)
                    for op in rest:
                        vector += epilogue_specs(op, out, acc, pixels, n,
                                                  places.get(id(op), 0), luts)
                    if self.pool:  # the tile holds whole images: reduce each to one row, stored in its channels
                        each = pixels // images  # image i's row lands in image 0's pixels, which are pooled first
                        for i in range(images):
                            vector += whole_image_pool(self.pool, out + i * each * n, acc,
                                                       divisor_row, each, n, out + i * n)
                        rows, width = images, 1  # (not oy1: the row tile's next output-channel tile still reads it)
                    else:
                        rows, width = images * (oy1 - oy0), s.out_width
                    stores = [CONFIG_STORE(row_stride=r.row_stride, plane_stride=0,
                                           col_stride=r.pixel_stride, elem_bytes=n),
                              STORE(dram=result + b * r.batch_stride + oy0 * r.row_stride + n0,
                                    space="spad", sram=out, planes=1, rows=rows, cols=width)]
                    tiles.append(Tile(steps, vector, stores, residuals, pack))
                if several and row_tile >= kept_rows and not (row_tile == 0 and self.prefetched_input and not streamed):
                    # its last step: the input's last reader
                    next(step for tile in reversed(tiles) for step in reversed(tile.steps)).releases = True
        return prologue, table_loaded_once(tiles), config

    def _residual_loads(self, base: Callable[[DramTensor], int], b: int, images: int, oy0: int, oy1: int, n0: int,
                        n: int, places: dict[int, int]) -> list[Op]:
        """The loads of the residual operands of the tile of output rows [oy0, oy1) of images b.., channels
        [n0, n0 + n), each epilogue addition's into the scratchpad at places[id(op)]."""
        s, loads = self.tiled_shape(), []
        for op in self.epilogue:
            if isinstance(op, AddTensor):
                x = op.operand
                loads += [CONFIG_LOAD(row_stride=x.row_stride, plane_stride=0, col_stride=x.pixel_stride,
                                      elem_bytes=n),
                          load(base(x.tensor) + b * x.batch_stride + oy0 * x.row_stride + n0, "spad",
                               places[id(op)], images * (oy1 - oy0), s.out_width)]
        return loads

    def operand_bytes(self) -> int:
        """The scratchpad bytes of one residual operand of one tile (each of its slots)."""
        s, t = self.tiled_shape(), self.tiling
        return align(t.images * t.rows * s.out_width * t.n)

    def tile_origins(self) -> list[tuple[int, int, int, int, int, int]]:
        """(first image, images, first output row, end row, first output channel, channels) of each tile, in the
        order `tiles` makes them."""
        s, t = self.tiled_shape(), self.tiling
        return [(b, min(t.images, self.source.batch - b), oy0, oy1, n0, min(t.n, s.out_channels - n0))
                for b in range(0, self.source.batch, t.images) for oy0, oy1 in self.row_tiles()
                for n0 in range(0, s.out_channels, t.n)]

    def operands_ahead(self, base: Callable[[DramTensor], int], count: int) -> list[list[Op]]:
        """The residual operand loads of the first `count` tiles into the region of `ahead_operands`, one list
        per tile: what the layer before issues (operands_ahead.py)."""
        adds = [op for op in self.epilogue if isinstance(op, AddTensor)]
        size, pieces = self.operand_bytes(), []
        for i, (b, images, oy0, oy1, n0, n) in enumerate(self.tile_origins()[:count]):
            first = self.ahead_operands[0] + i * len(adds) * size
            pieces.append(self._residual_loads(base, b, images, oy0, oy1, n0, n,
                                               {id(op): first + a * size for a, op in enumerate(adds)}))
        return pieces

    def _first_chunk_again(self, sram: int, dram: int) -> list[Op]:
        """The loads of the input rows of a streamed first step's first chunk that the chunk after does not load
        (`tile_loads.streamed_step`), into the row tile's shared slot at `sram`, from the channels at `dram`: what
        the layer before loaded for the first product (prefetch.py), for the row tile's later steps."""
        s, c = self.shape, min(self.tiling.c, self.shape.channels)
        oy0, oy1 = self._first_rows()
        first = oy0 * s.stride[0] - s.pads[0]
        rows = (oy1 - oy0) * s.stride[0]  # (the chunk after loads its window's rows from there on)
        y0, y1 = max(first, 0), min(first + rows - 1, s.height - 1)
        return [CONFIG_LOAD(row_stride=self.source.row_stride, plane_stride=0, col_stride=self.source.pixel_stride,
                            elem_bytes=c),
                CONFIG_PAD(pad_top=y0 - first, pad_bottom=first + rows - 1 - y1, pad_left=s.pads[1],
                           pad_right=s.pads[3], pad_value=self.x_zero),
                load(dram + y0 * self.source.row_stride, "spad", sram, y1 - y0 + 1, s.width),
                CONFIG_PAD(pad_top=0, pad_bottom=0, pad_left=0, pad_right=0, pad_value=0)]

    def _window_pool(self, oy0: int, oy1: int, n0: int, n: int, acc: int, out: int, running: int, bias_row: int,
                     result: int, luts: dict[int, int], kept: int | None = None) -> tuple[list[Op], list[Op]]:
        """The vector work and stores of the row tile [oy0, oy1) of output channels [n0, n0 + n) under the 3x3
        stride-2 max pool (window.py): the maxima in the accumulator, one pass requantizing the pooled rows (and
        an epilogue of clamps and int8 rescales by a non-negative multiplier, `monotone`, which commute with a
        maximum too), then unless split the pool across, into pooled row y at `kept` + y * its bytes where the
        layer keeps its result (kept_inputs.py). A tile that completes no window stores nothing."""
        s, r = self.tiled_shape(), self.result
        pad = self.window_pad
        maxima = tile_maxima(s, self.split, oy0, oy1, n, acc, running, pad)
        vector, rest = list(maxima.down), ()
        if maxima.pooled:
            requant, rest = requant_specs(self._config_requant(n0, bias_row + n0), out, maxima.rows,
                                          maxima.pooled * maxima.pixels, n, self.epilogue, luts)
            vector += requant
        vector += maxima.keep
        for op in rest:  # the tile's accumulator is free scratch now
            vector += epilogue_specs(op, out, acc, maxima.pooled * maxima.pixels, n, 0, luts)
        if not maxima.pooled:
            return vector, []
        if not self.split:
            dst = None if kept is None else kept + maxima.row * window_pooled(s.out_width, pad) * n
            vector += pool_across(out, maxima.pooled, s.out_width, n, pad, dst)
            out = out + maxima.pooled * s.out_width * n if dst is None else dst
        stores = [CONFIG_STORE(row_stride=r.row_stride, plane_stride=0, col_stride=r.pixel_stride, elem_bytes=n),
                  STORE(dram=result + maxima.row * r.row_stride + n0, space="spad", sram=out, planes=1,
                        rows=maxima.pooled, cols=window_pooled(s.out_width, pad))]
        return vector, stores

    def _config_requant(self, n0: int, bias: int) -> Op:
        r = self.requant
        per_channel = r.per_channel
        return CONFIG_REQUANT(
            multiplier=0 if per_channel else int(r.multipliers[0]), shift=0 if per_channel else int(r.shifts[0]),
            zero_point=r.zero, clamp_lo=-128, clamp_hi=127, per_channel=int(per_channel),
            table=self.spad_table + 8 * n0 if per_channel else 0, bias_row=1, bias=bias)


def merged_view(shape: ConvShape, source: Image, result: Image, epilogue: Sequence[EpilogueOp]
                ) -> tuple[ConvShape, Image, Image, tuple[EpilogueOp, ...]]:
    """The same 1 x 1 convolution (no padding) over views that make larger tiles: a stride only subsamples the
    input (the loads skip the pixels no output reads: a quarter of the bytes at stride 2), and images that lie
    one after another, the input's, the result's and each residual operand's, are one image of all their rows
    (tiles span images, and a weight block is loaded once for all of them, not once per image)."""
    if (shape.kh, shape.kw) != (1, 1) or any(shape.pads):
        return shape, source, result, tuple(epilogue)
    sh, sw = shape.stride
    source = Image(source.tensor, source.batch, source.batch_stride, source.row_stride * sh, source.pixel_stride * sw)
    shape = replace(shape, height=shape.out_height, width=shape.out_width, stride=(1, 1))
    adds = [op.operand for op in epilogue if isinstance(op, AddTensor)]
    if source.batch == 1 or any(image.batch_stride != shape.out_height * image.row_stride
                                for image in (source, result, *adds)):
        return shape, source, result, tuple(epilogue)
    def one(image: Image) -> Image:
        return Image(image.tensor, 1, 0, image.row_stride, image.pixel_stride)
    rows = source.batch * shape.out_height
    merged = tuple(replace(op, operand=one(op.operand)) if isinstance(op, AddTensor) else op for op in epilogue)
    return replace(shape, height=rows, out_height=rows), one(source), one(result), merged


def whole_image_pool(op: str, out: int, acc: int, divisor: int, pixels: int, n: int, dst: int | None = None
                     ) -> list[Op]:
    """A tile's `pixels` x `n` int8 result at `out` pooled over its pixels into n int8 values at `dst` (default
    `out`), through
    the tile's accumulator at `acc` (free once REQUANT has read it): REDUCE, then for an average VDIV by the pixel
    count (the row at `divisor`), rounding half to even as AveragePool does (globalpool.py), for a maximum VADDI 0
    back to int8."""
    dst = out if dst is None else dst
    fold = REDUCE(op="sum" if op == "avg" else "max", accumulate=0, dst=acc, src_space="spad", src=out, rows=pixels,
                  cols=n)
    if op == "avg":
        return [fold, VDIV(dst_space="spad", dst=dst, src1_space="acc", src1=acc, src2_space="acc", src2=divisor,
                           rows=1, cols=n, bcast=1, shift=0)]
    return [fold, VADDI(dst_space="spad", dst=dst, src_space="acc", src=acc, count=n, imm=0)]


def best_dataflow(pixels: int, k: int, n: int, config: ArchConfig) -> str:
    """Of the array's dataflows, the one with fewer stall-free cycles for a pixels x k by k x n product."""
    return min(config.dataflows, key=lambda flow: matmul_cycles(pixels, k, n, flow, config))
