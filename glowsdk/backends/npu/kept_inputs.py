"""Inputs across a barrier: a convolution layer keeps its result in the scratchpad where the next layer reads it.

A 1 x 1 convolution reads its input a row tile at a time, every channel at once, as a dense rows x width x channels
image (tile_loads.input_loads); the layer before writes that image a row tile at a time too, and where its tiles hold
every channel, each is the same dense image of its own rows. On a big array both layers' loads and stores are a large
part of their time (server preset, resnet50's 56 x 56 blocks: conv__5 reads 800 KB that conv__4 has just stored,
258 KB per row tile). So the layer before requantizes its first tiles' results into one region, one after another
(`GemmLayer.kept_results`: image row y at region + y * width * channels), and stores them from there; the next
layer's first row tiles, those whose rows lie in whole tiles kept there (`GemmLayer.kept_input`), read them there
and load none: their 258 KB never cross the bus again. The rest load from DRAM as before. A layer whose tiles max
pool their result (`GemmLayer.window`: resnet50's stem) keeps it too: its POOL writes each tile's pooled rows where
they lie in the image kept in the region (`_reads_pooled`).

Ordering. The region's writes are the layer before's REQUANTs of its first tiles; its readers are the next layer's
first row tiles. All but the first read after the barrier, which orders them. The first step's product may run
before it (handoff.py): a configuration op restated after the STORE of the last tile it reads (which waits for that
tile's vector work) signals PREFETCH (`emit_kept_signal`), and the product waits for it beside its weight block's,
as it would for input rows the layer before loaded (prefetch.py), which it no longer needs. The region lies above both
layers' buffers and clear of every other region in use from the layer before's first tile to the next layer's last
read: the weight blocks, input rows and residual operands loaded for the layer before, for the next one and for the one
after it (prefetch.py, operands_ahead.py: planned before, so this region avoids theirs), and the region the layer
before reads its own input from, if it was kept for it.
"""
from __future__ import annotations

from isa.config import ArchConfig

from .emitter import Emitter
from .epilogue import AddTensor
from .gemm import GemmLayer
from .layers import Layer
from .operands_ahead import operand_region
from .pipeline import PREFETCH
from .prefetch import weight_region
from .scratchpad import align_down
from .window import tile_maxima, window_pooled


def plan_kept_inputs(layers: list[Layer], config: ArchConfig, across: dict[int, GemmLayer]) -> None:
    """Give each 1 x 1 convolution layer that reads the convolution layer before's result as its whole input
    (`_reads_result`) as many first row tiles read where the layer before keeps them (`GemmLayer.kept_input`, and
    the layer before's `kept_results`) as a region fits for; they replace its prefetched input rows. After the
    other prefetches are planned (the layer after is the one whose weights it loads: `across` an element-wise layer,
    prefetch.plan_prefetches)."""
    if config.semaphores <= PREFETCH:
        return
    bodies = [layer.body for layer in layers]
    for k, (prev, body) in enumerate(zip(bodies, bodies[1:])):
        if not isinstance(prev, GemmLayer) or not isinstance(body, GemmLayer) \
                or not (_reads_result(prev, body) or _reads_pooled(prev, body)):
            continue
        after = across.get(k + 1, bodies[k + 2] if k + 2 < len(bodies) else None)
        gemms = [layer for layer in (prev, body, after) if isinstance(layer, GemmLayer)]
        busy = [weight_region(layer) for layer in gemms]
        busy += [operand_region(layer) for layer in gemms if layer is not prev]
        busy += [(layer.prefetched_input[0], layer.prefetched_input[0] + layer.first_input_bytes())
                 for layer in gemms if layer.prefetched_input and layer is not body]  # (body's: replaced)
        busy = [region for region in busy if region is not None] + ([kept_region(prev)] if prev.kept_input else [])
        floor = max(prev.spad_end(), body.spad_end())
        for count in range(len(body.row_tiles()), 0, -1):
            tiles, size = _covering_pooled(prev, body, count) if prev.window else \
                (_covering(prev, body, count), prev.operand_bytes())
            address = _place_kept(prev, tiles, tiles * size if not prev.window else size, busy, floor, config) \
                if tiles else None
            if address is not None:
                prev.kept_results, body.kept_input, body.prefetched_input = (address, tiles), (address, count), None
                break


def _reads_result(prev: GemmLayer, body: GemmLayer) -> bool:
    """Whether `body` is a 1 x 1 convolution (no stride, no padding, every input channel in one step, one image,
    nothing applied to its input) whose input is `prev`'s whole result, which `prev` writes densely a row tile at a
    time (every output channel in one tile), and `prev` keeps no result for anything else nor loads `body`'s residual
    operands; `body`'s weight block is prefetched (its first step waits PREFETCH)."""
    p, r = prev.shape, prev.result
    return prev.kept_results is None and body.ahead_operands is None and not prev.pool and not prev.window \
        and prev.groups == 1 \
        and prev.tiling.images == 1 and prev.source.batch == 1 and prev.tiling.n >= p.out_channels \
        and (r.pixel_stride, r.row_stride) == (p.out_channels, p.out_width * p.out_channels) \
        and prev.operand_bytes() == prev.tiling.rows * p.out_width * p.out_channels \
        and _plain_reader(prev, body, (p.out_height, p.out_width, p.out_channels))


def _reads_pooled(prev: GemmLayer, body: GemmLayer) -> bool:
    """Whether `body` reads as `_reads_result` says the pooled image `prev` writes with a `window` pool (unsplit, every
    output channel in one tile, a row of pooled pixels after another): its POOL writes each tile's pooled rows where
    they lie in the image (gemm.GemmLayer._window_pool), so kept they are one dense image. On the server preset
    resnet50's stem stores them as conv__1, DRAM-bound, would load them back (200 KB, a third of its traffic)."""
    p, r, pad = prev.shape, prev.result, prev.window_pad
    width = window_pooled(p.out_width, pad)
    return prev.window and not prev.split and prev.kept_results is None and body.ahead_operands is None \
        and not prev.pool and prev.groups == 1 and prev.packing is None and prev.tiling.images == 1 \
        and prev.source.batch == 1 and prev.tiling.n >= p.out_channels \
        and (r.pixel_stride, r.row_stride) == (p.out_channels, width * p.out_channels) \
        and _plain_reader(prev, body, (window_pooled(p.out_height, pad), width, p.out_channels))


def _plain_reader(prev: GemmLayer, body: GemmLayer, image: tuple[int, int, int]) -> bool:
    """Whether `body` is a 1 x 1 convolution (no stride, no padding, every input channel in one step, one image,
    nothing applied to its input) whose input is `prev`'s whole result, of `image`'s (height, width, channels),
    laid out as `prev` writes it; its weight block prefetched (its first step waits PREFETCH)."""
    s, r, src = body.shape, prev.result, body.source
    return body.prefetched is not None and body.gate is None and body.packing is None and body.groups == 1 \
        and not body.pool and not body.window and body.tiling.images == 1 and src.batch == 1 \
        and (s.kh, s.kw, s.stride, tuple(s.pads)) == (1, 1, (1, 1), (0, 0, 0, 0)) and body.tiling.c >= s.channels \
        and src.tensor is r.tensor and (src.row_stride, src.pixel_stride) == (r.row_stride, r.pixel_stride) \
        and (s.height, s.width, s.channels) == image


def _pooled_rows(prev: GemmLayer) -> list[tuple[int, int]]:
    """[first, end) pooled rows each of a `window` layer's tiles stores (window.tile_maxima; none: first == end)."""
    s = prev.tiled_shape()
    rows = []
    for oy0, oy1 in prev.row_tiles():
        maxima = tile_maxima(s, prev.split, oy0, oy1, s.out_channels, 0, 0, prev.window_pad)
        rows.append((maxima.row, maxima.row + maxima.pooled))
    return rows


def _covering_pooled(prev: GemmLayer, body: GemmLayer, count: int) -> tuple[int, int]:
    """(tiles, bytes): how many of a `window` layer `prev`'s first tiles store every row of `body`'s first `count`
    row tiles, and the bytes of the pooled rows they store, kept one after another from the first."""
    end, stored = body.row_tiles()[count - 1][1], _pooled_rows(prev)
    tiles = next((j + 1 for j, (_, stop) in enumerate(stored) if stop >= end), 0)
    s = body.shape
    return tiles, (stored[tiles - 1][1] * s.width * s.channels if tiles else 0)


def _covering(prev: GemmLayer, body: GemmLayer, count: int) -> int:
    """How many of `prev`'s first tiles hold every row of `body`'s first `count` row tiles, each of `prev`'s tiling's
    rows starting where the one before ends (so that kept one after another they are one dense image); 0 if they do
    not."""
    rows, ends, end = prev.tiling.rows, prev.row_tiles(), body.row_tiles()[count - 1][1]
    tiles = -(-end // rows)
    if tiles > len(ends) or any(ends[i][0] != i * rows for i in range(tiles)) or ends[tiles - 1][1] < end:
        return 0
    return tiles


def _place_kept(prev: GemmLayer, tiles: int, total: int, busy: list[tuple[int, int]], floor: int, config: ArchConfig
                ) -> int | None:
    """The highest aligned address at or above `floor` for `tiles` of `prev`'s results, `total` bytes one after
    another, clear of every `busy` region and of each residual operand of `prev`'s own tiles that the layer before put
    in the scratchpad (`ahead_operands`) but those of earlier tiles: the vector engine runs in order, so tile j's
    REQUANT writes its result after the epilogues of the tiles before it have read theirs. None if there is no such
    address."""
    size = prev.operand_bytes()
    operands = operand_region(prev)
    tops = [config.scratchpad_bytes, *(start for start, _ in busy)]
    candidates = {align_down(top - total) for top in tops}
    if operands is not None:  # (the region's tile j on the operands of tile j - 1 on, or wholly below them)
        candidates |= {align_down(operands[0] - total), align_down(operands[0] - size)}
    for address in sorted(candidates, reverse=True):
        if address >= floor and address + total <= config.scratchpad_bytes \
                and all(address + total <= start or stop <= address for start, stop in busy) \
                and _after_their_readers(prev, address, tiles, operands):
            return address
    return None


def _after_their_readers(prev: GemmLayer, address: int, tiles: int, operands: tuple[int, int] | None) -> bool:
    """Whether each of `tiles` results of `prev` kept one after another from `address` overlaps only the residual
    operands `prev`'s earlier tiles read (`operands`: their region, tile i's `adds` operands at its start + i * adds *
    `operand_bytes`)."""
    if operands is None:
        return True
    size = prev.operand_bytes()
    stride = sum(isinstance(op, AddTensor) for op in prev.epilogue) * size
    for j in range(tiles):
        lo, hi = max(address + j * size, operands[0]), min(address + (j + 1) * size, operands[1])
        if lo < hi and (hi - 1 - operands[0]) // stride >= j:
            return False
    return True


def kept_region(layer: GemmLayer) -> tuple[int, int] | None:
    """The scratchpad region a layer's first row tiles read their input from where the layer before kept it."""
    if layer.kept_input is None:
        return None
    s, (address, count) = layer.shape, layer.kept_input
    return address, address + layer.row_tiles()[count - 1][1] * s.width * s.channels


def emit_kept_signal(em: Emitter, layer: GemmLayer, after: GemmLayer) -> tuple[int, int]:
    """After the STORE of the last of `layer`'s kept tiles that `after`'s first step reads (it stores from the
    region once its vector work has written it there), the CONFIG_STORE in effect restated, signalling PREFETCH:
    what that step's product waits for before it reads them (it may run before the barrier: handoff.py). Returns the
    insertion, (index, 1)."""
    address, _ = layer.kept_results
    if layer.window:  # (the first of the pooled rows the tile storing the step's last row stores)
        end, s = after.row_tiles()[0][1], after.shape
        last = address + next(first for first, stop in _pooled_rows(layer) if stop >= end) * s.width * s.channels
    else:
        last = address + (-(-after.row_tiles()[0][1] // layer.tiling.rows) - 1) * layer.operand_bytes()
    program = em.instructions
    [store] = [i for i in range(em.layer_start, len(program)) if program[i].mnemonic == "STORE"
               and program[i].space == "spad" and program[i].sram == last]
    restated = next(program[i] for i in range(store, em.layer_start - 1, -1) if program[i].mnemonic == "CONFIG_STORE")
    program.insert(store + 1, restated.replace(wait_sem=0, wait_count=0, signal_sem=PREFETCH, signal_count=1))
    return store + 1, 1
