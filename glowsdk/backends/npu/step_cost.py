"""What a GEMM-like layer's tiles and steps load, store and compute: the accounting both cost models share.

The tiler ranks its candidate tilings by `tiling.estimate` and gives the chosen one the closer `expected.expected`;
both walk the same row tiles (`row_runs`), output-channel tiles (`TileCost`) and steps (`StepCost`) and sum what
they move over DRAM and keep the engines busy (`Streams`), so the two cannot count a step apart. A transfer is
timed against the datasheet's DRAM: the request latency once, then the bus or the request window (`transfer_cycles`).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass

from isa.config import ArchConfig
from sim.timing import grouped_matmul_cycles, matmul_cycles, vector_cycles

STEP_OVERHEAD_CYCLES = 32
"""The cost of one more pipeline step (synchronisation and instruction overhead), in cycles."""


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
class Pitches:
    """Bytes between neighbouring pixels of the input and of the result (and a residual operand) in DRAM:
    their channels, unless the layer reads or writes a channel slice of a wider tensor."""

    input: int
    output: int


def stacked_rows(shape: ConvShape, rows: int, images: int) -> int:
    """Output rows the array computes for `images` stacked images of `rows` (every) output rows each, or for one
    tile of `rows` rows: the images' own and, between each two, the rows whose windows span both (discarded)."""
    return (images - 1) * (shape.stack_period() // shape.stride[0]) + rows


def split(total: int, size: int) -> list[tuple[int, int]]:
    """`total` cut into pieces of `size`: (piece size, how many) for the full pieces and the remainder."""
    return [(p, k) for p, k in ((size, total // size), (total % size, 1)) if p and k]


def dram_runs(count: int, length: int, grain: int, config: ArchConfig) -> tuple[float, float]:
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
    (`dram_runs`): cached, since every candidate tiling of a layer moves runs of a few lengths."""
    step = math.gcd(grain, burst) or burst
    requests = data = 0
    for offset in range(0, burst, step):
        first = min(length, burst - offset)
        full, last = divmod(length - first, burst)
        requests += 1 + full + (last > 0)
        data += -(-first // bw) + full * -(-burst // bw) + -(-last // bw)
    return requests, data, burst // step


def transfer_cycles(requests: float, data: float, config: ArchConfig) -> float:
    """Cycles of one LOAD or STORE on an otherwise idle DRAM: the latency of its first request, then the bus
    or the request window (at most `dram_max_outstanding` in flight, each for the latency and its data
    phase), whichever is the tighter (Little's law). An engine runs its transfers one after another."""
    if not requests:
        return 0.0
    window = requests * (config.dram_latency_cycles + data / requests) / config.dram_max_outstanding
    return config.dram_latency_cycles + max(data, window, requests)


def shared_loads(loads: list[tuple[float, tuple[float, float]]], alongside: tuple[float, float],
                 config: ArchConfig) -> float:
    """Load engine cycles of `loads` ((transfers, their runs: requests, bus cycles) each) while the store engine's
    requests `alongside` (requests, bus cycles) share the bus and the request window: each load's latency, then
    the bus or the window, whichever is the tighter (an engine runs its transfers one after another)."""
    latency = config.dram_latency_cycles
    requests = sum(k * r[0] for k, r in loads)
    data = sum(k * r[1] for k, r in loads)
    held = (requests + alongside[0]) * latency + data + alongside[1]
    return (latency * sum(k for k, _ in loads)
            + max(data + alongside[1], held / config.dram_max_outstanding, requests))


def image_runs(rows: int, width: int, c: int, pitch: int, offset: int) -> tuple[int, int, int]:
    """(runs, bytes per run, grain) of `rows` x `width` pixels of `c` channels at `pitch` bytes per pixel, the
    first at byte `offset` of a pixel (a channel block's start)."""
    return (rows, width * c, width * c) if c == pitch else (rows * width, c, math.gcd(pitch, offset))


def row_tile_sizes(shape: ConvShape, rows: int, n: int, config: ArchConfig, packed: int = 1,
                   halve: bool = False, first: int = 0) -> list[int]:
    """Output rows of each row tile in order: `rows` each, the last the remainder; with `halve`, the first and the
    last tile cut in two where the halves take the array no more cycles than the whole: the array starts after a
    smaller load, and less vector work and store follow its last step (pipeline fill and drain). A `first` tile of
    that many rows (at most `rows`; 0: none) comes before the others, and is not halved (rowplan.py plans it)."""
    sizes = [first] if first else []
    sizes += [min(rows, shape.out_height - oy0) for oy0 in range(first, shape.out_height, rows)]
    if halve and len(sizes) > 1:
        for at in (-1,) if first else (0, -1):
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


def row_runs(shape: ConvShape, sizes: list[int], images: int, batch: int) -> list[tuple[int, int, int, int, int]]:
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
             last if k > 1 else 1) for k, count in split(batch, images)]


@dataclass(frozen=True)
class TileCost:
    """One output tile's result: its store and the vector engine's passes over it."""

    out: tuple[float, float]
    """(requests, bus cycles) of its stored rows"""
    store: float
    """the store's cycles"""
    vector: int
    """the vector engine's cycles over the tile"""
    bytes: int
    """the stored bytes"""


@dataclass(frozen=True)
class StepCost:
    """One run of alike steps (an output tile's input-channel block over a run of row tiles): what each loads and
    computes, and what the run adds to the layer's DRAM streams."""

    image: tuple[float, float]
    """(requests, bus cycles) of a step's input rows"""
    weights: tuple[float, float]
    """(requests, bus cycles) of a step's weight block"""
    reads: int
    """the run's input loads (a stationary row tile loads its input once, for its first output tile's steps)"""
    fetches: int
    """the run's weight block loads"""
    mm: int
    """a step's array cycles, in the better dataflow"""
    prepare: int
    """the vector engine's cycles over one input tile before the array reads it (a channel gate)"""
    latencies: int
    """the load engine's cycles of request latency over the run's loads"""
    traffic: int
    """the run's DRAM bytes"""
    bus: float
    """the run's data-bus cycles"""
    held: float
    """the run's request-cycles in the DRAM's window"""


@dataclass(frozen=True)
class OutputTiles:
    """A run of alike output tiles: one output-channel tile of every row tile of a run, with its steps."""

    n_size: int
    """output channels"""
    count: int
    """output-channel tiles of this size in a row tile"""
    tiles: int
    """tiles in the run"""
    cost: TileCost
    steps: tuple[tuple[int, int, StepCost], ...]
    """each run of alike steps of a tile: (input channels, steps of this size in a tile, their cost)"""


@dataclass(frozen=True)
class CostedLayer:
    """A layer as the cost models see it: its shape and what each of its tiles and steps does besides the array's
    products."""

    shape: ConvShape
    config: ArchConfig
    pitches: Pitches
    vector_passes: int = 1
    """the vector engine's passes over each output tile"""
    input_passes: int = 0
    """the vector engine's passes over each input tile, between its load and the array (a channel gate)"""
    packed: int = 1
    """groups per step, each a GMATMUL's (a group's K and N are those of the step over the groups)"""
    products: int = 1
    """products of equal parts of a step's pixels, each filling and draining the array"""
    pooled: bool = False
    """a tile stores its rows 3x3 stride-2 max pooled"""

    def tile(self, row_size: int, n_size: int, n: int) -> TileCost:
        """An output tile of `row_size` rows of `n_size` of the tiles' `n` channels."""
        s = self.shape
        stored = (row_size // 2, (s.out_width - 1) // 2) if self.pooled else (row_size, s.out_width)
        out = dram_runs(*image_runs(*stored, n_size, self.pitches.output, n), self.config)
        return TileCost(out, transfer_cycles(*out, self.config),
                        self.vector_passes * vector_cycles(row_size * s.out_width * n_size, self.config),
                        stored[0] * stored[1] * n_size)

    def step(self, c_size: int, c: int, n_size: int, in_rows: int, transfers: int, computed: int, reads: int,
             fetches: int) -> StepCost:
        """A run of steps over `c_size` of the tiles' `c` input channels and `n_size` output channels, whose input
        is `in_rows` rows in `transfers` loads, the array computing `computed` pixels: `reads` input loads and
        `fetches` weight block loads in all."""
        s, config = self.shape, self.config
        latency = config.dram_latency_cycles
        k = s.kh * s.kw * c_size // self.packed
        image = dram_runs(*image_runs(in_rows, s.width, c_size, self.pitches.input, c), config)
        weights = dram_runs(1, k * n_size, 0, config)
        part = computed // self.products
        mm = self.products * min(matmul_cycles(part, k, n_size, flow, config) if self.packed == 1 else
                                 grouped_matmul_cycles(part, k, n_size // self.packed, self.packed, flow, config)
                                 for flow in ("ws", "os"))
        return StepCost(image, weights, reads, fetches, mm,
                        self.input_passes * vector_cycles(in_rows * s.width * c_size, config),
                        (reads * transfers + fetches) * latency,
                        reads * in_rows * s.width * c_size + fetches * k * n_size,
                        reads * image[1] + fetches * weights[1],
                        reads * (image[0] * latency + image[1]) + fetches * (weights[0] * latency + weights[1]))

    def walk(self, streams: Streams, sizes: list[int], images: int, batch: int, n: int, c: int, extra: int
             ) -> Iterator[tuple[tuple[int, int, int, int, int], list[OutputTiles]]]:
        """Each run of alike row tiles of `sizes` (`row_runs`) with its `n` x `c` output tiles and their steps, in
        the order the layer runs them, each added to `streams` as it is yielded; `extra` residual operands load for
        each output tile."""
        s = self.shape
        for run in row_runs(s, sizes, images, batch):
            row_count, row_size, computed, in_rows, transfers = run
            outs = []
            for j, (n_size, n_count) in enumerate(split(s.out_channels, n)):
                tiles = row_count * n_count
                tile = self.tile(row_size, n_size, n)
                streams.add_tiles(tile, tiles, extra)
                steps = []
                for c_size, c_count in split(s.channels, c):
                    step = self.step(c_size, c, n_size, in_rows, transfers, computed,
                                     *streams.loaded(tiles * c_count, row_count, j == 0))
                    streams.add_steps(step, tiles * c_count)
                    steps.append((c_size, c_count, step))
                outs.append(OutputTiles(n_size, n_count, tiles, tile, tuple(steps)))
            yield run, outs


@dataclass
class Streams:
    """A layer's DRAM and engine work summed over its tiles and steps so far, from its prologue's loads on."""

    latency: int
    """the DRAM's request latency, in cycles"""
    traffic: int
    """DRAM bytes"""
    loads: int
    """the load engine's transfers' latencies (their data shares the bus)"""
    bus: float
    """the data bus's cycles"""
    held: float
    """request-cycles in the window both engines share"""
    stationary: bool
    """every input channel in one step: a row tile loads its input once for all its output-channel tiles"""
    fetches_left: int | None
    """one weight block for every step: loaded once into each of the two weight slots (gemm.GemmLayer.tiles)"""
    stores: float = 0.0
    """the store engine's transfers"""
    store_transfers: int = 0
    vector: float = 0.0
    """the vector engine's cycles"""
    steps: int = 0

    @classmethod
    def opened(cls, shape: ConvShape, n: int, c: int, prologue: list[tuple[float, float]], traffic: int,
               config: ArchConfig) -> Streams:
        """A layer of `n` x `c` tiles after its prologue's loads (`prologue`'s runs, `traffic` bytes)."""
        latency = config.dram_latency_cycles
        stationary = c >= shape.channels
        return cls(latency, traffic, latency * len(prologue), sum(r[1] for r in prologue),
                   sum(r[0] * latency + r[1] for r in prologue), stationary,
                   2 if stationary and n >= shape.out_channels else None)

    def add_tiles(self, tile: TileCost, tiles: int, extra: int) -> None:
        """`tiles` alike output tiles' stores, with `extra` residual operands loaded for each."""
        self.traffic += tiles * (1 + extra) * tile.bytes
        self.loads += tiles * extra * self.latency
        self.stores += tiles * tile.store
        self.store_transfers += tiles
        self.bus += tiles * (1 + extra) * tile.out[1]
        self.held += tiles * (1 + extra) * (tile.out[0] * self.latency + tile.out[1])
        self.vector += tiles * tile.vector

    def loaded(self, steps: int, row_tiles: int, first_tile: bool) -> tuple[int, int]:
        """(input loads, weight block loads) of `steps` alike steps over `row_tiles` row tiles, of their row tiles'
        `first_tile` output tile or a later one; the weight slots' fetches are spent."""
        reads = (row_tiles if first_tile else 0) if self.stationary else steps
        fetches = steps if self.fetches_left is None else min(steps, self.fetches_left)
        if self.fetches_left is not None:
            self.fetches_left -= fetches
        return reads, fetches

    def add_steps(self, step: StepCost, steps: int) -> None:
        """`steps` alike steps' loads and vector work."""
        self.loads += step.latencies
        self.vector += step.reads * step.prepare
        self.traffic += step.traffic
        self.bus += step.bus
        self.held += step.held
        self.steps += steps
