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
before its next transfer). The busiest of these streams, started by the first step's loads and ended
by the last tile's vector work and store, plus a fixed cost per step, is the estimate; so it trades
DRAM traffic and request counts against array utilisation (large pixel counts amortise the array's
fill and drain) and pipeline fill.

The chosen tiling carries its expected cycles (`expected`, `Tiling.expected`): the same streams as the generator
emits the layer (its row tiles with halved ends, a streamed first step, the prologue's loads after the first step's,
a gated layer's pacing, the array's waits for loads behind uneven steps), and what the layer before loads for it
(prefetch.py). It is the closer model (issue 21: within 5% of the simulated cycles per layer), but ranking the tilings
by it chose tiles that fill the scratchpad and so lose the next layer's prefetches (resnet50 0.4% slower): the tiler
ranks by `estimate`.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

from isa.config import ArchConfig
from sim.timing import grouped_matmul_cycles, matmul_cycles, vector_cycles

from ...errors import UnsupportedError
from .scratchpad import align

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

    def stack_period(self) -> int:
        """Input rows per image when a tile stacks whole images one above another (`Tiling.images`): the image
        with its top padding, and below it padding enough that no output row's window reaches the next image's
        rows, rounded up to the stride so that each image's output rows start on a whole output row."""
        rows = max(self.pads[0] + self.height, self.in_rows(self.out_height) - self.pads[0])
        return -(-rows // self.stride[0]) * self.stride[0]


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


def stacked_rows(shape: ConvShape, rows: int, images: int) -> int:
    """Output rows the array computes for `images` stacked images of `rows` (every) output rows each, or for one
    tile of `rows` rows: the images' own and, between each two, the rows whose windows span both (discarded)."""
    return (images - 1) * (shape.stack_period() // shape.stride[0]) + rows


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
                if images > 1 and not _fits(shape, tiling, spad, words):
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


@dataclass(frozen=True)
class Pitches:
    """Bytes between neighbouring pixels of the input and of the result (and a residual operand) in DRAM:
    their channels, unless the layer reads or writes a channel slice of a wider tensor."""

    input: int
    output: int


def _runs(count: int, length: int, grain: int, config: ArchConfig) -> tuple[float, float]:
    """(requests, data-bus cycles) of `count` contiguous runs of `length` bytes each. A run is cut at every
    burst boundary, and each request holds the bus for ceil(bytes / bandwidth) cycles. Tensors start on a
    burst (tensors.DramPlanner), so runs start at multiples of `grain` bytes within a burst (the gcd of
    the pitches and offsets between them: 0 for one that starts on a burst); both are averaged over
    those starts."""
    requests, data, offsets = _run(length, grain, config.dma_burst_bytes, config.dram_bytes_per_cycle)
    return count * requests / offsets, count * data / offsets


@functools.lru_cache(maxsize=65536)
def _run(length: int, grain: int, burst: int, bw: int) -> tuple[int, int, int]:
    """(requests, data-bus cycles, starts) of one run of `length` bytes summed over its starts within a burst
    (`_runs`): cached, since every candidate tiling of a layer moves runs of a few lengths."""
    step = math.gcd(grain, burst) or burst
    requests = data = 0
    for offset in range(0, burst, step):
        first = min(length, burst - offset)
        full, last = divmod(length - first, burst)
        requests += 1 + full + (last > 0)
        data += -(-first // bw) + full * -(-burst // bw) + -(-last // bw)
    return requests, data, burst // step


def _transfer_cycles(requests: float, data: float, config: ArchConfig) -> float:
    """Cycles of one LOAD or STORE on an otherwise idle DRAM: the latency of its first request, then the bus
    or the request window (at most `dram_max_outstanding` in flight, each for the latency and its data
    phase), whichever is the tighter (Little's law). An engine runs its transfers one after another."""
    if not requests:
        return 0.0
    window = requests * (config.dram_latency_cycles + data / requests) / config.dram_max_outstanding
    return config.dram_latency_cycles + max(data, window, requests)


def _image_runs(rows: int, width: int, c: int, pitch: int, offset: int) -> tuple[int, int, int]:
    """(runs, bytes per run, grain) of `rows` x `width` pixels of `c` channels at `pitch` bytes per pixel, the
    first at byte `offset` of a pixel (a channel block's start)."""
    return (rows, width * c, width * c) if c == pitch else (rows * width, c, math.gcd(pitch, offset))


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
    bias = _runs(1, 4 * s.out_channels, 0, config)
    traffic = 4 * s.out_channels
    latency = config.dram_latency_cycles
    loads, stores, bus = latency, 0.0, bias[1]
    """the load engine's transfers' latencies (their data shares the bus), the store engine's transfers, the bus"""
    held = bias[0] * config.dram_latency_cycles + bias[1]
    """request-cycles in the window both engines share"""
    store_transfers = 0
    array = vector = 0.0
    first_load = first_mm = last_mm = tile_vector = last_tail = 0.0
    steps = 0
    stationary = c >= s.channels
    """every input channel in one step: a row tile loads its input once for all its output-channel tiles"""
    fetches_left = 2 if stationary and n >= s.out_channels else None
    """one weight block for every step: loaded once into each of the two weight slots (gemm.GemmLayer.tiles)"""
    for row_count, row_size, computed, in_rows, transfers in _row_runs(s, row_tile_sizes(s, rows, n, config), images,
                                                                       batch):
        pixels = row_size * s.out_width
        stored = (row_size // 2, (s.out_width - 1) // 2) if pooled else (row_size, s.out_width)
        for j, (n_size, n_count) in enumerate(_split(s.out_channels, n)):
            tiles = row_count * n_count
            out = _runs(*_image_runs(*stored, n_size, pitches.output, n), config)
            store = _transfer_cycles(*out, config)
            tile_vector = vector_passes * vector_cycles(pixels * n_size, config)
            traffic += tiles * (1 + extra) * stored[0] * stored[1] * n_size
            loads += tiles * extra * latency
            stores += tiles * store
            store_transfers += tiles
            bus += tiles * (1 + extra) * out[1]
            held += tiles * (1 + extra) * (out[0] * config.dram_latency_cycles + out[1])
            vector += tiles * tile_vector
            for c_size, c_count in _split(s.channels, c):
                k = s.kh * s.kw * c_size // packed
                image, weights = (_runs(*_image_runs(in_rows, s.width, c_size, pitches.input, c), config),
                                  _runs(1, k * n_size, 0, config))
                step_loads = _transfer_cycles(*image, config) + _transfer_cycles(*weights, config)
                reads = (row_count if j == 0 else 0) if stationary else tiles * c_count
                fetches = tiles * c_count if fetches_left is None else min(tiles * c_count, fetches_left)
                if fetches_left is not None:
                    fetches_left -= fetches
                loads += (reads * transfers + fetches) * latency
                part = computed // products
                mm = products * min(matmul_cycles(part, k, n_size, flow, config) if packed == 1 else
                                    grouped_matmul_cycles(part, k, n_size // packed, packed, flow, config)
                                    for flow in ("ws", "os"))
                prepare = input_passes * vector_cycles(in_rows * s.width * c_size, config)
                vector += reads * prepare
                traffic += reads * in_rows * s.width * c_size + fetches * k * n_size
                bus += reads * image[1] + fetches * weights[1]
                held += sum(count * (r[0] * config.dram_latency_cycles + r[1])
                            for count, r in ((reads, image), (fetches, weights)))
                array += tiles * c_count * mm
                steps += tiles * c_count
                if not first_load:
                    first_load, first_mm = step_loads + prepare, mm
                last_mm = mm
            last_tail = tile_vector + store
    # the busiest stream, started by the first step's loads and ended by the last tile's vector work and store
    # an engine starts a transfer once its last one has completed, so each transfer's end drains the engine's part
    # of the window for about a latency, half of which the other engine takes up
    drained = (loads + store_transfers * latency) / 2
    dram = max(loads + bus, stores, held / config.dram_max_outstanding + drained)
    streams = max(dram + last_mm + last_tail, first_load + array + last_tail,
                  first_load + first_mm + vector - tile_vector + last_tail)
    return traffic // batch, (streams + STEP_OVERHEAD_CYCLES * steps) / batch


def _expected(tiling: Tiling, shape: ConvShape, config: ArchConfig, extra: int, vector_passes: int,
              pitches: Pitches | None, input_passes: int = 0, batch: int = 1, products: int = 1, pooled: bool = False,
              halve: bool = True, tables: tuple[int, ...] = ()) -> Tiling:
    """`tiling` with its `expected` cycles (`halve`: its end row tiles may be halved, `halves`)."""
    cycles, early, ahead = expected(shape, tiling.rows, tiling.n, tiling.c, config, extra, vector_passes, pitches,
                                    input_passes, tiling.packed, tiling.images, batch, products, pooled,
                                    halve and halves(shape, tiling.n, tiling.c, extra), tables)
    return replace(tiling, expected=cycles, prefetched_cycles=early, ahead_cycles=ahead)


def _row_runs(shape: ConvShape, sizes: list[int], images: int, batch: int) -> list[tuple[int, int, int, int, int]]:
    """Each run of equal row tiles (`sizes`, in order) over `batch` images: (how many, output rows stored, pixels
    the array computes, input rows loaded, input transfers). Stacked images are loaded by one transfer, the last
    one by a second when its window reaches below the period."""
    s = shape
    if images == 1:
        runs: list[list[int]] = []
        for size in sizes:
            if runs and runs[-1][0] == size:
                runs[-1][1] += 1
            else:
                runs.append([size, 1])
        return [(count * batch, size, size * s.out_width, min(s.in_rows(size), s.height), 1)
                for size, count in runs]
    last = 1 + (s.in_rows(s.out_height) > s.stack_period())
    return [(count, k * s.out_height, stacked_rows(s, s.out_height, k) * s.out_width, k * s.height,
             last if k > 1 else 1) for k, count in _split(batch, images)]


def expected(shape: ConvShape, rows: int, n: int, c: int, config: ArchConfig, extra: int = 0,
             vector_passes: int = 1, pitches: Pitches | None = None, input_passes: int = 0,
             packed: int = 1, images: int = 1, batch: int = 1, products: int = 1, pooled: bool = False,
             halve: bool = False, tables: tuple[int, ...] = ()) -> tuple[float, float, float]:
    """(cycles, cycles when the layer before loads the first weight block, and when it loads that block and the
    first step's input rows too: prefetch.py) per image of
    `batch` images' tiles of `rows` x `n` x `c`, `images` stacked to a tile (see the module docstring); the vector
    engine makes `input_passes` over each input tile loaded, between its load and the array. With `packed` groups,
    each step is a GMATMUL of that many groups (a group's K and N are those of the step over the groups). With
    `products`, each step is that many products of equal parts of its pixels; with `pooled`, a tile stores its rows
    3x3 stride-2 max pooled. The row tiles are `row_tile_sizes` (`halve`: the end tiles halved), the first step
    streamed where the generator streams it (`first_step`). The prologue loads the bias and `tables` (their bytes:
    the requantize table, the epilogue's lookup tables, a channel gate's row) after the first step's loads
    (pipeline.emit_layer's late prologue): the vector engine's first work waits for them."""
    s = shape
    pitches = pitches or Pitches(s.channels, s.out_channels)
    prologue_runs = [_runs(1, size, 0, config) for size in (4 * s.out_channels, *tables)]
    traffic = 4 * s.out_channels + sum(tables)
    latency = config.dram_latency_cycles
    loads, stores, bus = latency * len(prologue_runs), 0.0, sum(r[1] for r in prologue_runs)
    """the load engine's transfers' latencies (their data shares the bus), the store engine's transfers, the bus"""
    held = sum(r[0] * latency + r[1] for r in prologue_runs)
    """request-cycles in the window both engines share"""
    store_transfers = 0
    array = vector = 0.0
    first_mm = last_mm = tile_vector = last_tail = first_prepare = previous_tail = 0.0
    firsts: list[tuple[float, float]] = []
    """the first step's (matrix work done, loads done): as the layer loads them, its weight block prefetched, its
    weight block and input rows prefetched"""
    runs_after: list[tuple[int, float, float]] = []
    """each run of alike steps after the first: (how many, load engine cycles, array cycles), per step"""
    block = ahead = (0.0, 0.0, 0.0)
    """the first weight block's load, and the first step's prefetched input rows' (with the block): their
    latencies, their request-cycles in the window, their bus cycles"""
    steps = 0
    stationary = c >= s.channels
    """every input channel in one step: a row tile loads its input once for all its output-channel tiles"""
    fetches_left = 2 if stationary and n >= s.out_channels else None
    """one weight block for every step: loaded once into each of the two weight slots (gemm.GemmLayer.tiles)"""
    sizes = row_tile_sizes(s, rows, n, config, packed, halve)
    uneven = len(_split(s.out_channels, n)) > 1 or len(_split(s.channels, c)) > 1
    stall = row_read = 0.0
    """the array's waits for loads in a row tile of steps of uneven sizes (`_period`), over every row tile"""
    for row_count, row_size, computed, in_rows, transfers in _row_runs(s, sizes, images, batch):
        pixels = row_size * s.out_width
        stored = (row_size // 2, (s.out_width - 1) // 2) if pooled else (row_size, s.out_width)
        pattern: list[tuple[float, float, int]] = []
        """one row tile's steps in order, runs of alike ones: (load engine cycles, array cycles, how many)"""
        for j, (n_size, n_count) in enumerate(_split(s.out_channels, n)):
            tiles = row_count * n_count
            out = _runs(*_image_runs(*stored, n_size, pitches.output, n), config)
            store = _transfer_cycles(*out, config)
            tile_vector = vector_passes * vector_cycles(pixels * n_size, config)
            traffic += tiles * (1 + extra) * stored[0] * stored[1] * n_size
            loads += tiles * extra * latency
            stores += tiles * store
            store_transfers += tiles
            bus += tiles * (1 + extra) * out[1]
            held += tiles * (1 + extra) * (out[0] * latency + out[1])
            vector += tiles * tile_vector
            tile_steps: list[tuple[float, float, int]] = []
            for c_size, c_count in _split(s.channels, c):
                k = s.kh * s.kw * c_size // packed
                image, weights = (_runs(*_image_runs(in_rows, s.width, c_size, pitches.input, c), config),
                                  _runs(1, k * n_size, 0, config))
                reads = (row_count if j == 0 else 0) if stationary else tiles * c_count
                fetches = tiles * c_count if fetches_left is None else min(tiles * c_count, fetches_left)
                if fetches_left is not None:
                    fetches_left -= fetches
                loads += (reads * transfers + fetches) * latency
                part = computed // products
                mm = products * min(matmul_cycles(part, k, n_size, flow, config) if packed == 1 else
                                    grouped_matmul_cycles(part, k, n_size // packed, packed, flow, config)
                                    for flow in ("ws", "os"))
                prepare = input_passes * vector_cycles(in_rows * s.width * c_size, config)
                vector += reads * prepare
                traffic += reads * in_rows * s.width * c_size + fetches * k * n_size
                bus += reads * image[1] + fetches * weights[1]
                held += reads * (image[0] * latency + image[1]) + fetches * (weights[0] * latency + weights[1])
                # a step's loads wait for the products two steps back (their slot): gated, each step's loads, its
                # gate and its products take turns with the step before's products
                read, fetch = transfers * _transfer_cycles(*image, config), _transfer_cycles(*weights, config)
                step_loads = (reads * read + fetches * fetch) / (tiles * c_count)
                paced = max(mm, (step_loads + prepare + mm) / 2) if input_passes else mm
                if uneven:  # (with one weight block for every step, the steps are even)
                    tile_steps.append((fetch + (0.0 if stationary else read), paced, c_count))
                    row_read = read if stationary else 0.0
                array += tiles * c_count * paced
                steps += tiles * c_count
                runs_after.append((tiles * c_count - (not firsts), step_loads + extra * store / c_count, paced))
                if not firsts:  # the layer's first step: its loads, then its products (streamed: as they load)
                    streamed = images == 1 and packed == 1 and products == 1 and not input_passes
                    firsts, first_mm, runs = first_step(s, row_size, c_size, n_size, pitches, config, fetch, image,
                                                        mm, streamed)
                    first_prepare = prepare
                    block = (latency, weights[0] * latency + weights[1], weights[1])
                    ahead = (block[0] + transfers * latency, block[1] + runs[0] * latency + runs[1],
                             block[2] + runs[1])
                    array += first_mm - mm
                last_mm = mm
            previous_tail = last_tail if tiles == 1 else tile_vector + store
            last_tail = tile_vector + store
            if tile_steps:  # a tile's residual operands load after its steps' loads
                load, work, count = tile_steps[-1]
                tile_steps[-1:] = [(load, work, count - 1)] * (count > 1) + [(load + extra * store, work, 1)]
                pattern += tile_steps * n_count
        if pattern and row_count > 1:
            load, work, count = pattern[0]  # the row tile's first step loads its input
            pattern[:1] = [(load + row_read, work, 1)] + [(load, work, count - 1)] * (count > 1)
            stall += row_count * max(0.0, _period(pattern) - sum(a * k for _, a, k in pattern))
    # the busiest stream, started by the first step's loads and ended by the last tile's vector work and store
    # an engine starts a transfer once its last one has completed, so each transfer's end drains the engine's part
    # of the window for about a latency, half of which the other engine takes up; the bias (REQUANT's) loads after
    # the first step's loads (pipeline.emit_layer's late prologue), and the first tile's vector work waits for it
    prologue = sum(_transfer_cycles(*r, config) for r in prologue_runs)
    if input_passes:  # the vector engine gates the next tile's inputs before the tile before's epilogue
        last_tail = max(previous_tail - last_mm, tile_vector) + last_tail - tile_vector
    # a step's products wait for its loads, which follow every load before them on the load engine: after the first
    # step's loads and the prologue's, the longest of the loads up to a later step and the products from it on (a
    # run of alike steps has its longest at its first or its last); where loads and products take about as long,
    # the array waits for the loads of the steps before
    later, loaded_before, array_before = -math.inf, 0.0, 0.0
    for count, step_load, step_array in runs_after:
        for i in {0, count - 1} if count else ():
            later = max(later, loaded_before + (i + 1) * step_load + array - first_mm - array_before - i * step_array)
        loaded_before += count * step_load
        array_before += count * step_array

    def total(first: tuple[float, float], latencies: float, requests: float, data: float) -> float:
        done, loaded = first
        done += (prologue if input_passes else 0.0) + first_prepare  # the gate's rows are the prologue's
        drained = (loads - latencies + store_transfers * latency) / 2
        dram = max(loads - latencies + bus - data, stores, (held - requests) / config.dram_max_outstanding + drained)
        # the last step's products wait for its loads; of a single step, the bias loads after them
        streams = max(max(dram - (prologue if steps == 1 else 0.0) + last_mm, dram) + last_tail,
                      done - first_mm + array + stall + last_tail,
                      max(done, loaded + prologue) + vector - tile_vector + last_tail,
                      loaded + prologue + later + last_tail)
        return (streams + STEP_OVERHEAD_CYCLES * steps) / batch

    return total(firsts[0], 0.0, 0.0, 0.0), total(firsts[1], *block), total(firsts[2], *ahead)


def _period(steps: list[tuple[float, float, int]]) -> float:
    """The cycles a row tile of `steps` (runs of alike steps: load engine cycles, array cycles, how many) takes in
    the double-buffered pipeline (pipeline.py) once it repeats: a step's loads start once the loads before them are
    done and the step two back has left the array (their slot), its products once its loads are in and the step
    before is done. A short step between long ones hides little of the next one's loads, so a row tile of uneven
    steps can take longer than its products or its loads. A run's steps past its third each take the longer of
    their loads and their products (the pipeline's steady state)."""
    load_free = before = last = 0.0
    """when the load engine is free, when the step two back and the step before leave the array"""
    first = 0.0
    for repeat in range(2):
        for load, work, count in steps:
            for _ in range(min(count, 3)):
                load_free = max(load_free, before) + load
                before, last = last, max(load_free, last) + work
            skipped = max(0, count - 3) * max(load, work)
            load_free, before, last = load_free + skipped, before + skipped, last + skipped
        first = last if repeat == 0 else first
    return last - first


def _split(total: int, size: int) -> list[tuple[int, int]]:
    """`total` cut into pieces of `size`: (piece size, how many) for the full pieces and the remainder."""
    return [(p, k) for p, k in ((size, total // size), (total % size, 1)) if p and k]


def first_step(shape: ConvShape, rows: int, c: int, n: int, pitches: Pitches, config: ArchConfig, weights: float,
               image: tuple[float, float], product: float, streamed: bool
               ) -> tuple[list[tuple[float, float]], float, tuple[float, float]]:
    """([(cycles from the layer's start until its first step's matrix work is done, cycles until its loads are
    done)] as the layer loads them, with its weight block prefetched, and with its input rows prefetched too; that
    work's cycles; the (requests, bus cycles) of the input rows the layer before loads) for a first tile of `rows`
    output rows, `c` input and `n` output channels, whose input rows are the runs `image` and whose weight block
    takes `weights` cycles to load, its product `product` on the array. Its input loads, then its weights, then the
    array computes; `streamed`, as tile_loads.streamed_step cuts it: the rows in `stream_rows` chunks, the weights
    after the first, each chunk's product once the loads up to it are in (a chunk of padding only joins the one
    before). The layer before loads the first chunk's rows, or unstreamed the tile's
    (prefetch.plan_input_prefetches)."""
    if not streamed:
        load = _transfer_cycles(*image, config)
        return ([(load + weights + product, load + weights), (load + product, load), (product, 0.0)], product,
                image)
    runs, products = _chunks(shape, rows, c, n, pitches, config)
    firsts = []
    for block, ahead in ((weights, False), (0.0, False), (0.0, True)):
        loaded = done = 0.0
        for i, (run, mm) in enumerate(zip(runs, products)):
            loaded += (0.0 if ahead and i == 0 else _transfer_cycles(*run, config)) + (block if i == 0 else 0.0)
            done = max(done, loaded) + mm
        firsts.append((done, loaded))
    return firsts, sum(products), runs[0]


@functools.lru_cache(maxsize=4096)
def _chunks(s: ConvShape, rows: int, c: int, n: int, pitches: Pitches, config: ArchConfig
            ) -> tuple[tuple[tuple[float, float], ...], tuple[int, ...]]:
    """A streamed first step's (each chunk's input runs: requests, bus cycles; each chunk's array cycles)
    (`first_step`): cached, since every candidate tiling of a layer with the same first tile streams it alike."""
    k = s.kh * s.kw * c
    flow = min(config.dataflows, key=lambda f: matmul_cycles(rows * s.out_width, k, n, f, config))
    products: list[int] = []
    runs: list[tuple[float, float]] = []
    top = 0
    for a, b in stream_rows(s, rows, c, n, flow, config):
        bottom = s.in_rows(b)
        lo, hi = top - s.pads[0], bottom - 1 - s.pads[0]
        count = min(hi, s.height - 1) - max(lo, 0) + 1
        if count <= 0 and products:
            products[-1] += b - a
        else:
            runs.append(_runs(*_image_runs(max(count, 0), s.width, c, pitches.input, 0), config))
            products.append(b - a)
        top = bottom
    return tuple(runs), tuple(matmul_cycles(p * s.out_width, k, n, flow, config) for p in products)


def stream_rows(s: ConvShape, rows: int, c: int, n: int, dataflow: str, config: ArchConfig) -> list[tuple[int, int]]:
    """Output rows [a, b) of a tile of `rows` rows (`c` input and `n` output channels) cut into chunks for a
    streamed first step (Step.parts). Output-stationary: each the fewest whole rows from where the last ended that
    fill at least one fold (the array's rows of pixels), so long as the tile's folds stay as many as the uncut
    tile's; the rest is the last chunk. Weight-stationary, every chunk streams its pixels through every fold
    again, a fold's fill and drain more per chunk: as many equal chunks as the wait they save (the input load but
    the first chunk's) exceeds that cost by most, one (no cut) when no count pays."""
    if dataflow == "ws":
        r, cols = config.array_rows, config.array_cols
        fill = -(-s.kh * s.kw * c // r) * -(-n // cols) * (2 * r + cols - 2)
        load = s.in_rows(rows) * s.padded_width * c / config.dram_bytes_per_cycle
        parts = max(range(1, min(rows, 8) + 1), key=lambda m: load * (1 - 1 / m) - (m - 1) * fill)
        return [(rows * i // parts, rows * (i + 1) // parts) for i in range(parts)]
    fold = config.array_rows
    chunks, a = [], 0
    while a < rows:
        folds = -(-(rows - a) * s.out_width // fold)
        b = next((b for b in range(a + 1, rows) if (b - a) * s.out_width >= fold and
                  -(-(b - a) * s.out_width // fold) + -(-(rows - b) * s.out_width // fold) == folds), rows)
        chunks.append((a, b))
        a = b
    return chunks


def halves(shape: ConvShape, n: int, c: int, extra: int) -> bool:
    """Whether a layer's end row tiles may be halved (`row_tile_sizes`): one weight block (no reload between row
    tiles) and no residual operand (whose loads the smaller tiles would multiply)."""
    return n >= shape.out_channels and c >= shape.channels and not extra


def row_tile_sizes(shape: ConvShape, rows: int, n: int, config: ArchConfig, packed: int = 1,
                   halve: bool = False) -> list[int]:
    """Output rows of each row tile in order: `rows` each, the last the remainder; with `halve`, the first and the
    last tile cut in two where the halves take the array no more cycles than the whole: the array starts after a
    smaller load, and less vector work and store follow its last step (pipeline fill and drain)."""
    sizes = [min(rows, shape.out_height - oy0) for oy0 in range(0, shape.out_height, rows)]
    if halve and len(sizes) > 1:
        for at in (0, -1):
            whole = sizes[at]
            half = [whole // 2, whole - whole // 2]
            if half[0] and sum(step_array_cycles(shape, h, n, config, packed) for h in half) <= \
                    step_array_cycles(shape, whole, n, config, packed):
                sizes[at:len(sizes) + at + 1 if at else 1] = half
    return sizes


def step_array_cycles(shape: ConvShape, rows: int, n: int, config: ArchConfig, packed: int = 1) -> int:
    """The array's cycles for one step of `rows` output rows over every input channel (one weight block), in the
    better dataflow; `packed` groups side by side (GMATMUL)."""
    pixels, k, n = rows * shape.out_width, shape.kh * shape.kw * shape.channels, min(n, shape.out_channels)
    if packed > 1:
        return min(grouped_matmul_cycles(pixels, k // packed, n // packed, packed, flow, config)
                   for flow in config.dataflows)
    return min(matmul_cycles(pixels, k, n, flow, config) for flow in config.dataflows)


def array_cycles(shape: ConvShape, tiling: Tiling, config: ArchConfig) -> int:
    """The array's cycles for one image's tiles: its busiest engine when the layer is compute-bound."""
    return _engine_cycles(shape, tiling.rows, tiling.n, tiling.c, config)[0]


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
    while rows > 0 and not _fits(s, Tiling(rows, n, c, 0, 0.0, extra, packed), spad, acc_words):
        rows -= 1
    while rows < s.out_height and _fits(s, Tiling(rows + 1, n, c, 0, 0.0, extra, packed), spad, acc_words):
        rows += 1
    return rows


def _fits(shape: ConvShape, tiling: Tiling, spad: int, acc_words: int) -> bool:
    """Whether a tiling's buffers fit both SRAMs twice over, next to the bias row of every output channel."""
    pixels = tiling.array_rows(shape) * shape.out_width
    return (tiling.spad_bytes(shape) <= spad and 2 * pixels * tiling.n + shape.out_channels <= acc_words
            and pixels <= MAX_ROWS and tiling.input_rows(shape) <= 65535)
