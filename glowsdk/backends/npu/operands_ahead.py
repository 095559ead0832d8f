"""Residual operands across a barrier: a compute-bound convolution layer loads the next one's residual tiles.

A residual block's last 1 x 1 convolution adds the block's input to each tile of its result (an epilogue's
`AddTensor`): its tiles load that operand as well as their input, and on a big array the layer is DRAM-bound
(server preset, resnet50's 56 x 56 blocks: 800 KB of operands, 35k cycles against 24k of array work) while the
3 x 3 layer before it is compute-bound, its DRAM idle two thirds of the time. The operand was written before the
layer before began (by an earlier layer: the barrier orders it), so its loads wait for nothing: the layer before
issues them, tile by tile, where its load engine has room (`_placements`: where, by the pipeline's static timing,
a piece delays none of its own array work), into a region above both layers' buffers clear of every prefetched
region in use meanwhile (prefetch.py's weight blocks and input rows of the layer before, of this one and of the
one after). The tiles whose operands were loaded so load none (`GemmLayer.ahead_operands`); the others load theirs as
before.

Where the operand is the layer before's own result, tile for tile (a projection after the branch's last 1 x 1
convolution: resnet50's conv__4 adds conv__3's result), nothing need be loaded: the layer before requantizes each of
its first tiles' results into the region and stores it from there (`GemmLayer.kept_results`), whatever its DRAM
time; the barrier orders the next layer's reads after those writes.

No semaphore is needed: the load engine runs its transfers in order, one after another, so every piece is in
before the next layer's prologue loads (issued after the barrier) are, and its vector engine waits for those
(TABLE) before any of its work; checked mode sees that chain (tests/npu/test_npu_operands_ahead.py plants its
break).
"""
from __future__ import annotations

from typing import Callable

from isa.config import ArchConfig
from isa.encoding import Instr

from .emitter import Emitter
from .epilogue import AddTensor
from .gemm import GemmLayer
from .handoff import can_hand_off
from .instructions import Op
from .layers import Layer
from .pipeline import Tile
from .prefetch import memory_bound, place_region, tensors_overlap, weight_region
from .static_time import as_instrs, load_cycles, products_cycles, step_times
from .step_cost import dram_runs, image_runs, transfer_cycles
from .tensors import DramTensor


def plan_operand_prefetches(layers: list[Layer], config: ArchConfig, across: dict[int, GemmLayer]) -> None:
    """Give each DRAM-bound convolution layer whose residual operands the convolution layer before may load (written
    before that one began; it is not DRAM-bound) or keeps (`_keeps`) a region for as many tiles' operands as fit
    (`GemmLayer.ahead_operands`, and the layer before's `kept_results`; a layer before that loads them lowers the
    count to those its emission finds room for). After the other prefetches are planned (the layer after is the one
    whose weights it loads: `across` an element-wise layer, prefetch.plan_prefetches)."""
    bodies = [layer.body for layer in layers]
    for k, (prev, body) in enumerate(zip(bodies, bodies[1:])):
        if not isinstance(prev, GemmLayer) or not isinstance(body, GemmLayer) or body.pool or body.window \
                or not memory_bound(body, config):  # (a layer its array bounds gains little from fewer loads)
            continue
        adds = [op.operand for op in body.epilogue if isinstance(op, AddTensor)]
        kept = _keeps(prev, body)
        if not kept and (not adds or any(tensors_overlap(prev.result.tensor, x.tensor) for x in adds)
                         or memory_bound(prev, config)):
            continue
        after = across.get(k + 1, bodies[k + 2] if k + 2 < len(bodies) else None)
        busy = [weight_region(layer) for layer in (prev, body, after) if isinstance(layer, GemmLayer)]
        busy += [(layer.prefetched_input[0], layer.prefetched_input[0] + layer.first_input_bytes())
                 for layer in (prev, body, after) if isinstance(layer, GemmLayer) and layer.prefetched_input]
        busy += [operand_region(layer) for layer in (prev, body, after) if isinstance(layer, GemmLayer)]
        busy = [region for region in busy if region is not None]
        size, floor = len(adds) * body.operand_bytes(), max(prev.spad_end(), body.spad_end())
        count = next((count for count in range(len(body.tile_origins()), 0, -1)
                      if place_region(count * size, busy, floor, config) is not None), 0)
        if count:
            body.ahead_operands = (place_region(count * size, busy, floor, config), count)
            if kept:
                prev.kept_results = body.ahead_operands


def _keeps(prev: GemmLayer, body: GemmLayer) -> bool:
    """Whether `body`'s one residual operand is `prev`'s result, each of its tiles' the result of `prev`'s tile of
    the same index, laid out alike (the same rows and channels of one image), so that `prev` may keep its results
    in the scratchpad for `body` (`GemmLayer.kept_results`) rather than `body` loading them back."""
    adds = [op.operand for op in body.epilogue if isinstance(op, AddTensor)]
    if len(adds) != 1 or prev.pool or prev.window or prev.tiling.images != 1 or body.tiling.images != 1:
        return False
    x, r = adds[0], prev.result
    return (x.tensor, x.batch_stride, x.row_stride, x.pixel_stride) == (r.tensor, r.batch_stride, r.row_stride,
                                                                        r.pixel_stride) \
        and prev.tile_origins() == body.tile_origins() and prev.operand_bytes() == body.operand_bytes()


def operand_region(layer: GemmLayer) -> tuple[int, int] | None:
    """The scratchpad region of the residual operands a layer's tiles read where the layer before loaded them."""
    if layer.ahead_operands is None:
        return None
    address, count = layer.ahead_operands
    adds = sum(isinstance(op, AddTensor) for op in layer.epilogue)
    return address, address + count * adds * layer.operand_bytes()


def emit_operands_ahead(em: Emitter, layer: GemmLayer, tiles: list[Tile], step_starts: list[int],
                        before: dict[int, float], after: GemmLayer, base: Callable[[DramTensor], int],
                        config: ArchConfig) -> list[tuple[int, int]]:
    """Insert into `layer`'s instructions the loads of `after`'s first tiles' residual operands that its load engine
    has room for, each before a step's loads (`step_starts`: where each step's own instructions start; `before`:
    the load cycles already inserted before a step's, by step); set `after.ahead_operands` to the tiles loaded
    (None: none). Returns each insertion, (index, count), in order."""
    pieces = after.operands_ahead(base, after.ahead_operands[1])
    at = _placements(layer, tiles, [_piece_cycles(piece, config) for piece in pieces], before, config)
    after.ahead_operands = (after.ahead_operands[0], len(at)) if at else None
    inserted: list[tuple[int, int]] = []
    for piece, step in reversed(list(zip(pieces, at))):  # (from the last: each index holds until its insertion)
        loads = Emitter()
        for op in piece:
            loads.emit(op)
        em.instructions[step_starts[step]:step_starts[step]] = loads.instructions
        inserted.append((step_starts[step], len(loads.instructions)))
    return _in_order(inserted)


def _piece_cycles(piece: list[Op], config: ArchConfig) -> float:
    """The DRAM cycles of a tile's operand loads (`GemmLayer.operands_ahead`), each a channel block of a wider
    tensor (one run per pixel), by the tiler's transfer model (step_cost.py: bursts, the request window)."""
    total, pitch, width = 0.0, 1, 1
    for op in piece:
        if op.mnemonic == "CONFIG_LOAD":
            pitch, width = op.fields["col_stride"], op.fields["elem_bytes"]
        elif op.mnemonic == "LOAD":
            runs, length, grain = image_runs(op.fields["rows"], op.fields["cols"], width, pitch,
                                             op.fields["dram"] % pitch if pitch else 0)
            total += transfer_cycles(*dram_runs(runs, length, grain, config), config)
    return total


def _in_order(reversed_insertions: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Insertions made from the last to the first, (index, count) each, as if made from the first to the last."""
    ordered, shift = [], 0
    for where, count in reversed(reversed_insertions):
        ordered.append((where + shift, count))
        shift += count
    return ordered


def _placements(layer: GemmLayer, tiles: list[Tile], pieces: list[float], before: dict[int, float],
                config: ArchConfig) -> list[int]:
    """For the first pieces in order, the step before whose loads each goes (never an earlier step than the piece
    before's), such that together they delay no step's array work by the pipeline's static timing (prefetch._room's:
    a step's loads start once the loads before them are done and the step two back has left the array; its matrix
    work once they are in and the step before is done; a first product handed off runs before it all); only steps
    after the first whose loads restate the load registers first. Stops at the first piece with no such step."""
    steps = [step for tile in tiles for step in tile.steps]
    after_tile, g = {}, -1
    for tile in tiles:
        g += len(tile.steps)
        after_tile[g] = load_cycles(as_instrs(tile.operands), config)
    loads = [load_cycles(as_instrs([*step.shared, *step.loads]), config) for step in steps]
    arrays = [products_cycles(step, config) for step in steps]
    if can_hand_off(layer, config):  # its first product runs before the barrier: the step is that much shorter
        arrays[0] = max(arrays[0] - layer.first_product_cycles(), 0)

    def ends(extra: dict[int, float]) -> list[float]:
        return step_times(loads, arrays, after_tile, extra)[1]

    alone = ends(before)
    extra, placed, g = dict(before), [], 1
    for piece in pieces:
        while g < len(steps):
            ops = [*steps[g].shared, *steps[g].loads]
            if ops and ops[0].mnemonic == "CONFIG_LOAD":
                trial = extra | {g: extra.get(g, 0.0) + piece}
                if all(new <= old for new, old in zip(ends(trial), alone)):
                    extra = trial
                    placed.append(g)
                    break
            g += 1
        else:
            break
    return placed


def inserted_before_steps(program: list[Instr], inserted: list[tuple[int, int]], step_starts: list[int],
                          config: ArchConfig) -> dict[int, float]:
    """The load cycles of the insertions (index, count; in order) made at a step's start (`step_starts`: as before
    them) into `program` (after them all), by step."""
    starts, placed = list(step_starts), []
    for where, count in inserted:
        placed = [(i + count if i >= where else i, n, g) for i, n, g in placed]
        if where in starts:
            placed.append((where, count, starts.index(where)))
        starts = [i + count if i >= where else i for i in starts]
    cycles: dict[int, float] = {}
    for where, count, g in placed:
        cycles[g] = cycles.get(g, 0.0) + load_cycles(program[where:where + count], config)
    return cycles
