"""The expected cycles of a chosen tiling (`tiling.Tiling.expected`): the layer as the generator emits it.

The same streams as the tiler's ranking estimate (`tiling.estimate`, with the same accounting of each tile and step:
step_cost.py), but as the generator emits the layer: its row tiles with halved ends, a streamed first step
(`stream_rows`, `first_step`), the prologue's loads after the first step's, a gated layer's pacing, the array's waits
for loads behind uneven steps (`_period`), and what the layer before loads for it (prefetch.py). It is the closer
model (issue 21: within 5% of the simulated cycles per layer), but ranking the tilings by it chose tiles that fill
the scratchpad and so lose the next layer's prefetches (resnet50 0.4% slower): the tiler ranks by `estimate`.
"""
from __future__ import annotations

import functools
import math

from isa.config import ArchConfig
from sim.timing import matmul_cycles

from .step_cost import (STEP_OVERHEAD_CYCLES, ConvShape, CostedLayer, Pitches, Streams, dram_runs, image_runs,
                        row_tile_sizes, split, transfer_cycles)


def expected(shape: ConvShape, rows: int, n: int, c: int, config: ArchConfig, extra: int = 0,
             vector_passes: int = 1, pitches: Pitches | None = None, input_passes: int = 0,
             packed: int = 1, images: int = 1, batch: int = 1, products: int = 1, pooled: bool = False,
             halve: bool = False, tables: tuple[int, ...] = (), first: int = 0) -> tuple[float, float, float]:
    """(cycles, cycles when the layer before loads the first weight block, and when it loads that block and the
    first step's input rows too: prefetch.py) per image of
    `batch` images' tiles of `rows` x `n` x `c`, `images` stacked to a tile (see the module docstring); the vector
    engine makes `input_passes` over each input tile loaded, between its load and the array. With `packed` groups,
    each step is a GMATMUL of that many groups (a group's K and N are those of the step over the groups). With
    `products`, each step is that many products of equal parts of its pixels; with `pooled`, a tile stores its rows
    3x3 stride-2 max pooled. The row tiles are `row_tile_sizes` (`halve`: the end tiles halved; a `first` tile
    of that many rows, rowplan.py's), the first step
    streamed where the generator streams it (`first_step`). The prologue loads the bias and `tables` (their bytes:
    the requantize table, the epilogue's lookup tables, a channel gate's row) after the first step's loads
    (pipeline.emit_layer's late prologue): the vector engine's first work waits for them."""
    s = shape
    pitches = pitches or Pitches(s.channels, s.out_channels)
    layer = CostedLayer(s, config, pitches, vector_passes, input_passes, packed, products, pooled)
    prologue_runs = [dram_runs(1, size, 0, config) for size in (4 * s.out_channels, *tables)]
    t = Streams.opened(s, n, c, prologue_runs, 4 * s.out_channels + sum(tables), config)
    latency = config.dram_latency_cycles
    array = 0.0
    first_mm = last_mm = tile_vector = last_tail = first_prepare = previous_tail = 0.0
    firsts: list[tuple[float, float]] = []
    """the first step's (matrix work done, loads done): as the layer loads them, its weight block prefetched, its
    weight block and input rows prefetched"""
    runs_after: list[tuple[int, float, float]] = []
    """each run of alike steps after the first: (how many, load engine cycles, array cycles), per step"""
    block = ahead = (0.0, 0.0, 0.0)
    """the first weight block's load, and the first step's prefetched input rows' (with the block): their
    latencies, their request-cycles in the window, their bus cycles"""
    sizes = row_tile_sizes(s, rows, n, config, packed, halve, first)
    uneven = len(split(s.out_channels, n)) > 1 or len(split(s.channels, c)) > 1
    stall = row_read = 0.0
    """the array's waits for loads in a row tile of steps of uneven sizes (`_period`), over every row tile"""
    for (row_count, row_size, _, _, transfers), outs in layer.walk(t, sizes, images, batch, n, c, extra):
        pattern: list[tuple[float, float, int]] = []
        """one row tile's steps in order, runs of alike ones: (load engine cycles, array cycles, how many)"""
        for out in outs:
            tile_vector, store = out.cost.vector, out.cost.store
            tile_steps: list[tuple[float, float, int]] = []
            for c_size, c_count, step in out.steps:
                alike = out.tiles * c_count
                # a step's loads wait for the products two steps back (their slot): gated, each step's loads, its
                # gate and its products take turns with the step before's products
                read, fetch = transfers * transfer_cycles(*step.image, config), transfer_cycles(*step.weights, config)
                step_loads = (step.reads * read + step.fetches * fetch) / alike
                paced = max(step.mm, (step_loads + step.prepare + step.mm) / 2) if input_passes else step.mm
                if uneven:  # (with one weight block for every step, the steps are even)
                    tile_steps.append((fetch + (0.0 if t.stationary else read), paced, c_count))
                    row_read = read if t.stationary else 0.0
                array += alike * paced
                runs_after.append((alike - (not firsts), step_loads + extra * store / c_count, paced))
                if not firsts:  # the layer's first step: its loads, then its products (streamed: as they load)
                    streamed = images == 1 and packed == 1 and products == 1 and not input_passes
                    firsts, first_mm, runs = first_step(s, row_size, c_size, out.n_size, pitches, config, fetch,
                                                        step.image, step.mm, streamed)
                    first_prepare = step.prepare
                    weights = step.weights
                    block = (latency, weights[0] * latency + weights[1], weights[1])
                    ahead = (block[0] + transfers * latency, block[1] + runs[0] * latency + runs[1],
                             block[2] + runs[1])
                    array += first_mm - step.mm
                last_mm = step.mm
            previous_tail = last_tail if out.tiles == 1 else tile_vector + store
            last_tail = tile_vector + store
            if tile_steps:  # a tile's residual operands load after its steps' loads
                load, work, count = tile_steps[-1]
                tile_steps[-1:] = [(load, work, count - 1)] * (count > 1) + [(load + extra * store, work, 1)]
                pattern += tile_steps * out.count
        if pattern and row_count > 1:
            load, work, count = pattern[0]  # the row tile's first step loads its input
            pattern[:1] = [(load + row_read, work, 1)] + [(load, work, count - 1)] * (count > 1)
            stall += row_count * max(0.0, _period(pattern) - sum(a * k for _, a, k in pattern))
    # the busiest stream, started by the first step's loads and ended by the last tile's vector work and store
    # an engine starts a transfer once its last one has completed, so each transfer's end drains the engine's part
    # of the window for about a latency, half of which the other engine takes up; the bias (REQUANT's) loads after
    # the first step's loads (pipeline.emit_layer's late prologue), and the first tile's vector work waits for it
    prologue = sum(transfer_cycles(*r, config) for r in prologue_runs)
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
        drained = (t.loads - latencies + t.store_transfers * latency) / 2
        dram = max(t.loads - latencies + t.bus - data, t.stores,
                   (t.held - requests) / config.dram_max_outstanding + drained)
        # the last step's products wait for its loads; of a single step, the bias loads after them
        streams = max(max(dram - (prologue if t.steps == 1 else 0.0) + last_mm, dram) + last_tail,
                      done - first_mm + array + stall + last_tail,
                      max(done, loaded + prologue) + t.vector - tile_vector + last_tail,
                      loaded + prologue + later + last_tail)
        return (streams + STEP_OVERHEAD_CYCLES * t.steps) / batch

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
        load = transfer_cycles(*image, config)
        return ([(load + weights + product, load + weights), (load + product, load), (product, 0.0)], product,
                image)
    runs, products = _chunks(shape, rows, c, n, pitches, config)
    firsts = []
    for block, ahead in ((weights, False), (0.0, False), (0.0, True)):
        loaded = done = 0.0
        for i, (run, mm) in enumerate(zip(runs, products)):
            loaded += (0.0 if ahead and i == 0 else transfer_cycles(*run, config)) + (block if i == 0 else 0.0)
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
            runs.append(dram_runs(*image_runs(max(count, 0), s.width, c, pitches.input, 0), config))
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


