"""Tile shapes for convolutions and matrix products: fit the SRAMs, then the fewest estimated cycles.

A GEMM-like layer (a convolution, or a MatMul seen as a 1 x 1 convolution over an M x 1 image of K
channels) is tiled over output rows (`rows`), output channels (`n`) and input channels (`c`, the
reduction, accumulated in place); when `c` is every input channel, a row tile's input is loaded once
and every output-channel tile of that row tile reads it. Every candidate keeps two of each scratchpad buffer (input image
rows with their halo, weight block, int8 result, residual operands) and two accumulator tiles, for
double buffering, next to the bias of every output channel. Small images of a batch may be stacked, whole,
several to a tile (`Tiling.images`): the array computes them as one tall image, so their pixels fill its folds,
and discards the output rows whose windows span two images.

The cost model (`estimate`) follows the pipeline the layer runs (pipeline.py) and the datasheet's
timing: the array's cycles (each step's MATMUL by the closed form, in the better dataflow), the
vector engine's (its passes over each tile), and the DRAM's: each LOAD and STORE pays the request
latency once (an engine runs its transfers one after another), the bus carries every byte (cut
into requests at burst boundaries and at every gap between contiguous runs: a channel block of a
wider tensor moves as one run per pixel), and at most `dram_max_outstanding` requests are in
flight for both engines, less what each transfer's end leaves idle (an engine drains its requests
before its next transfer). The busiest of these streams, started by the first step's loads and
ended by the last tile's vector work and store, plus a fixed cost per step, is the estimate; a
stationary tiling's array also waits for each next row tile's input rows where its row tile's loads
leave them no room on the load engine (`shared_loads`: they share the window with the stores'
requests, and a store of one short request per pixel slows the loads beside it). So it trades
DRAM traffic and request counts against array utilisation (large pixel counts amortise the array's
fill and drain) and pipeline fill.

The chosen tiling carries its expected cycles (`Tiling.expected`: expected.py), the closer model of the layer as the
generator emits it; both models count each tile and step alike (step_cost.py).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from isa.config import ArchConfig
from sim.timing import matmul_cycles, vector_cycles

from ...errors import UnsupportedError
from .expected import expected
from .scratchpad import align
from .step_cost import (STEP_OVERHEAD_CYCLES, ConvShape, CostedLayer, Pitches, Streams, dram_runs, row_runs,
                        row_tile_sizes, shared_loads, split, stacked_rows, transfer_cycles)

MAX_K = 8191
MAX_N = 4095
MAX_ROWS = 65535


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
    packed: int = 1
    """the groups of a GMATMUL step, whose weight block holds each group's input channels only"""
    images: int = 1
    """batch images per tile, stacked one above another (`rows` is then every output row): the array computes
    them as one tall image, so a small image's pixels fill the array's folds, and discards the output rows
    between images"""
    expected: float = 0.0
    """cycles per batch image of the layer as the generator emits it (`expected`); `cycles` ranks the tilings"""
    prefetched_cycles: float = 0.0
    """`expected` when the layer before loads the first weight block (prefetch.py)"""
    ahead_cycles: float = 0.0
    """`expected` when the layer before loads the first weight block and the first step's input rows (prefetch.py)"""

    def spad_bytes(self, shape: ConvShape) -> int:
        out = align(self.images * self.rows * shape.out_width * self.n)
        return 2 * (self.input_bytes(shape) + self.weight_bytes(shape)) + 2 * (1 + self.extra) * out

    def input_rows(self, shape: ConvShape) -> int:
        """Rows of a tile's input image: its output rows' window, or the stacked images' periods."""
        if self.images == 1:
            return shape.in_rows(self.rows)
        period = shape.stack_period()
        return (self.images - 1) * period + max(period, shape.in_rows(shape.out_height))

    def array_rows(self, shape: ConvShape) -> int:
        """Output rows the array computes per tile: stacked images' rows and the discarded rows between them."""
        return stacked_rows(shape, self.rows, self.images)

    def input_bytes(self, shape: ConvShape) -> int:
        return align(self.input_rows(shape) * shape.padded_width * self.c)

    def weight_bytes(self, shape: ConvShape) -> int:
        return align(shape.kh * shape.kw * self.c * self.n // self.packed)

    def describe(self, shape: ConvShape) -> str:
        stacked = f"{self.images} images x " if self.images > 1 else ""
        return (f"tile {stacked}{self.rows}x{shape.out_width} px x {self.n} out-ch x {self.c} in-ch, "
                f"{-(-shape.out_height // self.rows)}x{-(-shape.out_channels // self.n)}x"
                f"{-(-shape.channels // self.c)} tiles, {self.traffic} DRAM bytes, ~{self.cycles:.0f} cycles")


def _candidates(total: int, unit: int) -> list[int]:
    """Whole, then multiples of `unit` and halvings below it."""
    values = {total}
    v = total
    while v > 1:
        v = -(-v // 2)
        values.add(v)
    values |= {m for m in range(unit, total, unit)}
    return sorted(values, reverse=True)


@functools.lru_cache(maxsize=4096)  # a layer is costed again by every way of placing it (its tiling is pure)
def choose_tiling(shape: ConvShape, config: ArchConfig, reserved_spad: int, extra_buffers: int = 0,
                  vector_passes: int = 1, pitches: Pitches | None = None, whole_image: bool = False,
                  reserved_acc: int = 0, input_passes: int = 0, batch: int = 1, row_multiple: int = 1,
                  products: int = 1, pooled: bool = False, fewer: bool = True, tables: tuple[int, ...] = ()
                  ) -> Tiling:
    """The cheapest tiling that fits (the most rows, or with `fewer` `_fewer_rows`); UnsupportedError if none does.
    `extra_buffers` int8 tiles of the result's size sit next to it (twice over), and the vector engine makes
    `vector_passes` over each, and
    `input_passes` over each input tile before the array reads it (a channel gate); `reserved_acc` accumulator
    words are the layer's own (the gate's rows). With `whole_image`, every tile holds all the output rows (a
    global pool reduces each tile to one row), and one more accumulator row of the tile's channels is kept (the
    pool's divisor). With `batch` > 1 the layer's images may also be stacked, several to a tile
    (`Tiling.images`), and every candidate is costed over the whole batch. With `row_multiple`, every tile but
    the last has a multiple of that many output rows (a fused 3x3 stride-2 max pool's pairs of rows). With
    `products`, each step computes its pixels in that many products of equal parts (a fused pool's even and odd
    columns apart), each filling and draining the array; with `pooled`, the tiles store their rows 3x3 stride-2 max
    pooled (a quarter of the pixels). The tiling chosen by `estimate` carries its `expected` cycles, `tables` the
    bytes of each load of the layer's prologue besides the bias."""
    spad = config.scratchpad_bytes - reserved_spad
    acc_words = config.accumulator_bytes // 4 - reserved_acc

    def costed(tiling: Tiling) -> Tiling:
        traffic, cycles = estimate(shape, tiling.rows, tiling.n, tiling.c, config, extra_buffers, vector_passes,
                                   pitches, input_passes, images=tiling.images, batch=batch, products=products,
                                   pooled=pooled)
        return replace(tiling, traffic=traffic, cycles=cycles)
    fullest: list[tuple[Tiling, int]] = []
    """each (n, c)'s cheapest tiling of the most rows that fit, with those rows"""
    for n in _candidates(min(shape.out_channels, MAX_N), config.array_cols):
        for c in _candidates(shape.channels, config.array_rows):
            if shape.kh * shape.kw * c > MAX_K:
                continue
            words = acc_words - (n if whole_image else 0)
            rows = _largest_rows(shape, n, c, spad, words, extra_buffers)
            rows = rows if rows >= shape.out_height else rows - rows % row_multiple
            if rows == 0 or whole_image and rows < shape.out_height:
                continue
            options = []
            for images in range(1, (batch if rows == shape.out_height else 1) + 1):
                tiling = Tiling(shape.out_height if images > 1 else rows, n, c, 0, 0.0, extra_buffers,
                                images=images)
                if images > 1 and not fits(shape, tiling, spad, words):
                    break
                options.append(costed(tiling))
            fullest.append((min(options, key=lambda t: t.cycles), rows))
    fullest.sort(key=lambda pair: pair[0].cycles)  # (stable: the first of equals, as the loop order found it)
    best = fullest[0][0] if fullest else None
    for tiling, rows in fullest[:FEWER_ROWS_COSTED if fewer and not whole_image else 0]:
        for shorter in _fewer_rows(shape.out_height, rows, row_multiple):
            candidate = costed(Tiling(shorter, tiling.n, tiling.c, 0, 0.0, extra_buffers))
            if candidate.cycles < best.cycles:
                best = candidate
    if best is None:
        raise UnsupportedError(f"a {shape.kh}x{shape.kw} convolution of {shape.channels} channels on "
                               f"{shape.width}-pixel rows does not fit the scratchpad ({config.scratchpad_bytes} B)")
    return _expected(best, shape, config, extra_buffers, vector_passes, pitches, input_passes, batch=batch,
                     products=products, pooled=pooled, halve=row_multiple == 1, tables=tables)


FEWER_ROWS_COSTED = 8
"""How many of the cheapest channel tilings (each with the most rows that fit) are costed with fewer rows too."""
ROW_OPTIONS = 2
"""Fewer rows costed: the image shared evenly by one and by two tiles more than the fewest that fit."""


def _fewer_rows(height: int, largest: int, multiple: int) -> list[int]:
    """Rows per tile below the most that fit worth costing (multiples of `multiple`): `ROW_OPTIONS` even shares of
    the image. Where the loads are the busiest stream, the last tile's array work follows them, so smaller tiles
    can finish sooner than the fewest, for the fills and drains they add."""
    options = set()
    fewest = -(-height // largest)
    for parts in range(fewest + 1, fewest + 1 + ROW_OPTIONS):
        rows = -(-height // parts)
        rows -= rows % multiple
        if 0 < rows < largest:
            options.add(rows)
    return sorted(options, reverse=True)


def choose_grouped_tiling(shape: ConvShape, groups: int, config: ArchConfig, reserved_spad: int,
                          extra_buffers: int = 0, vector_passes: int = 1, pitches: Pitches | None = None,
                          tables: tuple[int, ...] = ()) -> Tiling:
    """The cheapest tiling of a block-diagonal layer of `groups` groups whose output-channel tiles are whole groups
    (k of them, k dividing `groups`, with their k groups' input channels as one step) or parts of one group (its
    input channels in steps that divide them), so that every step of a tile reads only its own groups' channels:
    the blocks off the diagonal are no step at all (`block_touches`). UnsupportedError if none fits."""
    spad = config.scratchpad_bytes - reserved_spad
    acc_words = config.accumulator_bytes // 4
    cg, og = shape.channels // groups, shape.out_channels // groups
    pairs = [(k * og, k * cg) for k in range(1, groups + 1) if groups % k == 0]
    pairs += [(n, c) for n in _candidates(og, config.array_cols) if og % n == 0 and n < og
              for c in _candidates(cg, config.array_rows) if cg % c == 0]
    pairs += [(og, c) for c in _candidates(cg, config.array_rows) if cg % c == 0 and c < cg]
    best: tuple[ConvShape, Tiling] | None = None
    """(the input channels one output tile reads, the tiling)"""
    for n, c in pairs:
        if n > MAX_N or shape.kh * shape.kw * c > MAX_K:
            continue
        rows = _largest_rows(shape, n, c, spad, acc_words, extra_buffers)
        if rows == 0:
            continue
        reads = replace(shape, channels=max(c, cg))  # the input channels one output tile reads
        traffic, cycles = estimate(reads, rows, n, c, config, extra_buffers, vector_passes,
                                   pitches or Pitches(shape.channels, shape.out_channels))
        if best is None or cycles < best[1].cycles:
            best = reads, Tiling(rows, n, c, traffic, cycles, extra_buffers)
    if best is None:
        raise UnsupportedError(f"a {shape.kh}x{shape.kw} convolution of {groups} groups of {cg} channels on "
                               f"{shape.width}-pixel rows does not fit the scratchpad ({config.scratchpad_bytes} B)")
    return _expected(best[1], best[0], config, extra_buffers, vector_passes,
                     pitches or Pitches(shape.channels, shape.out_channels),
                     halve=halves(shape, best[1].n, best[1].c, extra_buffers), tables=tables)


MAX_PACKED_ROWS = 4095
"""GMATMUL counts its rows, and each group's k and n, in 12 bits."""
MAX_PACKED_GROUPS = 8


def packable(shape: ConvShape, groups: int, config: ArchConfig) -> bool:
    """Whether GMATMUL can run this grouped convolution: at most 8 groups, each on a column block of the array,
    and a group's K and N within its 12-bit fields."""
    return (1 < groups <= min(MAX_PACKED_GROUPS, config.array_cols)
            and shape.kh * shape.kw * shape.channels // groups <= MAX_PACKED_ROWS
            and shape.out_channels // groups <= MAX_PACKED_ROWS)


def choose_packed_tiling(shape: ConvShape, groups: int, interleave: bool, config: ArchConfig, reserved_spad: int,
                         extra_buffers: int = 0, vector_passes: int = 1, pitches: Pitches | None = None,
                         tables: tuple[int, ...] = ()) -> Tiling:
    """The cheapest tiling of a grouped convolution run by GMATMUL (`packable`): every step reads all the input
    channels; an output tile is the same nt output channels of every group, groups x nt result channels that lie
    together only when the result interleaves the groups (a channel shuffle), else it is every output channel; the
    last tile of a row tile at least half the others. UnsupportedError if none fits."""
    spad = config.scratchpad_bytes - reserved_spad
    acc_words = config.accumulator_bytes // 4
    og = shape.out_channels // groups
    # output tiles of even size: a step's loads hide behind the step before it, and a short last tile of a row
    # tile hides little of the next row tile's input and weights (the cost model sees no such stall)
    widths = [groups * nt for nt in _candidates(og, max(1, config.array_cols // groups))
              if 2 * (og % nt) >= nt or og % nt == 0] if interleave else [shape.out_channels]
    best: Tiling | None = None
    for n in widths:
        rows = min(_largest_rows(shape, n, shape.channels, spad, acc_words, extra_buffers, groups),
                   MAX_PACKED_ROWS // shape.out_width)
        if rows == 0:
            continue
        traffic, cycles = estimate(shape, rows, n, shape.channels, config, extra_buffers, vector_passes, pitches,
                                   packed=groups)
        if best is None or cycles < best.cycles:
            best = Tiling(rows, n, shape.channels, traffic, cycles, extra_buffers, groups)
    if best is None:
        raise UnsupportedError(f"a {shape.kh}x{shape.kw} convolution of {groups} groups of "
                               f"{shape.channels // groups} channels on {shape.width}-pixel rows does not fit the "
                               f"scratchpad ({config.scratchpad_bytes} B)")
    return _expected(best, shape, config, extra_buffers, vector_passes, pitches, tables=tables)


def block_touches(n0: int, n: int, c0: int, c: int, out_per_group: int, in_per_group: int) -> bool:
    """Whether output channels [n0, n0 + n) and input channels [c0, c0 + c) share a group of a block diagonal."""
    return n0 // out_per_group <= (c0 + c - 1) // in_per_group and c0 // in_per_group <= (n0 + n - 1) // out_per_group


def estimate(shape: ConvShape, rows: int, n: int, c: int, config: ArchConfig, extra: int = 0,
             vector_passes: int = 1, pitches: Pitches | None = None, input_passes: int = 0,
             packed: int = 1, images: int = 1, batch: int = 1, products: int = 1, pooled: bool = False
             ) -> tuple[int, float]:
    """(DRAM bytes, cycles) per image of `batch` images' tiles of `rows` x `n` x `c`, `images` stacked to a tile
    (see the module docstring); the vector engine makes `input_passes` over each input tile loaded, between its
    load and the array. With `packed` groups, each step is a GMATMUL of that many groups (a group's K and N are
    those of the step over the groups). With `products`, each step is that many products of equal parts of its
    pixels; with `pooled`, a tile stores its rows 3x3 stride-2 max pooled."""
    s = shape
    pitches = pitches or Pitches(s.channels, s.out_channels)
    layer = CostedLayer(s, config, pitches, vector_passes, input_passes, packed, products, pooled)
    t = Streams.opened(s, n, c, [dram_runs(1, 4 * s.out_channels, 0, config)], 4 * s.out_channels, config)
    array = stall = paced = 0.0
    first_load = first_mm = last_mm = tile_vector = last_tail = 0.0
    rows_in: tuple[float, tuple[float, float]] = (0.0, (0.0, 0.0))
    """the first step's input transfers and their runs: what each later row tile loads besides its own steps"""
    sizes = row_tile_sizes(s, rows, n, config)
    runs = len(row_runs(s, sizes, images, batch))
    for at, ((row_count, _, _, _, transfers), outs) in enumerate(layer.walk(t, sizes, images, batch, n, c, extra)):
        work = 0.0
        loads: list[tuple[float, tuple[float, float]]] = []  # one row tile's: (transfers, their runs)
        stored = (0.0, 0.0)
        for out in outs:
            for _, c_count, step in out.steps:
                alike = out.tiles * c_count
                array += alike * step.mm
                work += out.count * c_count * step.mm
                reads = 0.0 if t.stationary else transfers * step.reads / alike
                paced += (step.reads * transfers * transfer_cycles(*step.image, config)
                          + step.fetches * transfer_cycles(*step.weights, config))
                loads += [(out.count * c_count * step.fetches / alike, step.weights),
                          (out.count * c_count * reads, step.image)]
                if not first_load:
                    first_load = (transfer_cycles(*step.image, config) + transfer_cycles(*step.weights, config)
                                  + step.prepare)
                    first_mm = step.mm
                    rows_in = (transfers, step.image)
                last_mm = step.mm
            loads.append((out.count * extra, out.cost.out))
            paced += out.tiles * extra * out.cost.store
            stored = (stored[0] + out.count * out.cost.out[0], stored[1] + out.count * out.cost.out[1])
            tile_vector, last_tail = out.cost.vector, out.cost.vector + out.cost.store
        if t.stationary and not keeps_input(s, pitches):
            # a stationary tiling loads the next row tile's input rows where the load engine has room beside the
            # row tile's own loads (the stores sharing the window): where they do not fit, the array waits for them
            room = max(0.0, work - shared_loads(loads, stored, config))
            later = row_count - (at == runs - 1)
            stall += later * max(0.0, shared_loads([rows_in], (0.0, 0.0), config) - room)
    # the busiest stream, started by the first step's loads and ended by the last tile's vector work and store
    # an engine starts a transfer once its last one has completed, so each transfer's end drains the engine's part
    # of the window for about a latency, half of which the other engine takes up; each load takes at least what it
    # takes alone (`paced`: a load of short requests is paced by the window, not the bus)
    drained = (t.loads + t.store_transfers * config.dram_latency_cycles) / 2
    dram = max(t.loads + t.bus, t.stores, t.held / config.dram_max_outstanding + drained, paced)
    streams = max(dram + last_mm + last_tail, first_load + array + stall + last_tail,
                  first_load + first_mm + t.vector - tile_vector + last_tail)
    return t.traffic // batch, (streams + STEP_OVERHEAD_CYCLES * t.steps) / batch


def keeps_input(shape: ConvShape, pitches: Pitches) -> bool:
    """Whether the layer before may keep this layer's input rows in the scratchpad, so that it loads none of them
    (kept_inputs.py: a dense 1 x 1 convolution without stride or padding)."""
    return (shape.kh, shape.kw, shape.stride, shape.pads, pitches.input) == (1, 1, (1, 1), (0, 0, 0, 0),
                                                                             shape.channels)


def _expected(tiling: Tiling, shape: ConvShape, config: ArchConfig, extra: int, vector_passes: int,
              pitches: Pitches | None, input_passes: int = 0, batch: int = 1, products: int = 1, pooled: bool = False,
              halve: bool = True, tables: tuple[int, ...] = ()) -> Tiling:
    """`tiling` with its `expected` cycles (`halve`: its end row tiles may be halved, `halves`)."""
    cycles, early, ahead = expected(shape, tiling.rows, tiling.n, tiling.c, config, extra, vector_passes, pitches,
                                    input_passes, tiling.packed, tiling.images, batch, products, pooled,
                                    halve and halves(shape, tiling.n, tiling.c, extra), tables)
    return replace(tiling, expected=cycles, prefetched_cycles=early, ahead_cycles=ahead)


def halves(shape: ConvShape, n: int, c: int, extra: int) -> bool:
    """Whether a layer's end row tiles may be halved (`row_tile_sizes`): one weight block (no reload between row
    tiles) and no residual operand (whose loads the smaller tiles would multiply)."""
    return n >= shape.out_channels and c >= shape.channels and not extra


def array_cycles(shape: ConvShape, tiling: Tiling, config: ArchConfig) -> int:
    """The array's cycles for one image's tiles: its busiest engine when the layer is compute-bound."""
    return _engine_cycles(shape, tiling.rows, tiling.n, tiling.c, config)[0]


def _engine_cycles(shape: ConvShape, rows: int, n: int, c: int, config: ArchConfig) -> tuple[int, int]:
    """(array, vector) cycles of one image's tiles."""
    array = vector = 0
    for row_size, row_count in split(shape.out_height, rows):
        pixels = row_size * shape.out_width
        for n_size, n_count in split(shape.out_channels, n):
            vector += row_count * n_count * vector_cycles(pixels * n_size, config)
            for c_size, c_count in split(shape.channels, c):
                k = shape.kh * shape.kw * c_size
                best = min(matmul_cycles(pixels, k, n_size, flow, config) for flow in config.dataflows)
                array += row_count * n_count * c_count * best
    return array, vector


@functools.lru_cache(maxsize=16384)  # (the window pool's tilings and the plain one's share most of their candidates)
def _largest_rows(shape: ConvShape, n: int, c: int, spad: int, acc_words: int, extra: int, packed: int = 1) -> int:
    """The most output rows per tile that fit both SRAMs twice over, next to the bias row of every output
    channel in the accumulator (0 if not even one does); `packed`: the groups of a GMATMUL step. Found from the
    SRAMs' linear bounds (alignment aside), then row by row (fitting is monotone in the rows)."""
    s = shape
    per_row = 2 * s.stride[0] * s.padded_width * c + 2 * (1 + extra) * s.out_width * n
    fixed = 2 * ((s.kh - 1) * s.dilation[0] + 1 - s.stride[0]) * s.padded_width * c + \
        2 * align(s.kh * s.kw * c * n // packed)
    rows = min(s.out_height, max(0, (spad - fixed) // per_row),
               max(0, acc_words - s.out_channels) // (2 * s.out_width * n))
    while rows > 0 and not fits(s, Tiling(rows, n, c, 0, 0.0, extra, packed), spad, acc_words):
        rows -= 1
    while rows < s.out_height and fits(s, Tiling(rows + 1, n, c, 0, 0.0, extra, packed), spad, acc_words):
        rows += 1
    return rows


def fits(shape: ConvShape, tiling: Tiling, spad: int, acc_words: int) -> bool:
    """Whether a tiling's buffers fit both SRAMs twice over, next to the bias row of every output channel."""
    pixels = tiling.array_rows(shape) * shape.out_width
    return (tiling.spad_bytes(shape) <= spad and 2 * pixels * tiling.n + shape.out_channels <= acc_words
            and pixels <= MAX_ROWS and tiling.input_rows(shape) <= 65535)
