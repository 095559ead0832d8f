"""Weights across a barrier: a convolution layer (a depthwise one too) loads the next one's first weight block.

Layers run one after another (emitter.py): the next layer's first step waits for the barrier, then for its input
rows and its weight block, before the array starts. The weights are constants, which no layer writes, so their load
need not wait: the layer before issues it where its load engine has room, else after its own last load (or before
its last tile's residual operand, where the next layer's first product hides the drain that delays), while its
array, vector engine and stores finish, into the top of the scratchpad, above both layers' buffers. The load
signals PREFETCH; the next layer's first step waits for it before its matrix work instead of loading the block. On
big arrays the layers are short and this load is a large part of each (server preset, resnet50: about 80k of 1.9M
cycles).

A fully connected layer whose input an element-wise layer makes (resnet50's classifier: the pooled row rescaled)
has its first weight block loaded by the convolution before that one, across both barriers, above the element-wise
layer's buffers too (`plan_prefetches`), so that only its input load, no longer the weights', follows the barrier.

The region is free while the layer before runs: its buffers end below it, and the block it read from there itself
(if the layer before it prefetched one) was read by its first step's matrix work, which its third step's loads wait
for; so a layer that was prefetched prefetches for the next only if it has three steps.

The next layer's first input rows are the layer before's result, but where it writes them in a row tile before its
last, they are in DRAM while its last row tile computes: the layer before loads them too (`plan_input_prefetches`),
after a restated CONFIG_STORE behind the STORE of the last of those rows signals STORED, into a region of their
own, and the next layer's first step waits PREFETCH for them as for its weights (where the row tile's later steps
read its rows in their own slot, the second step loads a prefetched first chunk there again: only where the layer
before is not DRAM-bound, since its rows cross the bus twice). Where they begin in rows it stores before its last
row tile and end in it (a strided 3 x 3 layer of one row tile after a 1 x 1 one of two), they load in two
(`split_row`): the rows stored before once the last of them is, the rest after its last STORE, each LOAD behind its
own STORED; so do rows straddling two earlier row tiles where the later one stores late (storetime.py). Rows an
earlier layer wrote (a residual block's projection reads the block's input) are in DRAM before the layer before
begins: their load waits for nothing. So once the barrier passes the array starts at once (or before it: handoff.py).
Where the next layer's first weight block and rows fit no gap of the load engine whole, they load in pieces in its
idle time among the layer's steps (pieces.py; not in a window-pooled layer, whose vector work holds up the loads'
dispatch). The region lies above both layers' buffers and clear of every other region in use while it
is loaded or read: the weight blocks prefetched for the layer before, for this layer and for the one after, and the
input region of the layer before.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from isa.config import ArchConfig
from isa.encoding import Instr
from isa.program import extents, with_registers

from .emitter import Emitter, Sync
from .depthwise import DepthwiseLayer
from .gemm import GemmLayer
from .instructions import Op
from .layers import Layer
from .pieces import Timing, Transfer, budget, fill, transfers
from .pipeline import OPERAND, PREFETCH, STORED, Tile
from .scratchpad import align, align_down
from .static_time import as_instrs, load_cycles, products_cycles, step_times, vector_cycles
from .storetime import stored_late
from .tensors import DramTensor
from .tile_loads import config_load, load
from .tiling import array_cycles
from .vector import ElementwiseLayer


def plan_prefetches(layers: list[Layer], config: ArchConfig) -> dict[int, GemmLayer]:
    """Mark each convolution layer whose first weight block the convolution layer before can load
    (`GemmLayer.prefetched`: where that block goes); a depthwise layer before is never prefetched itself. Across an
    element-wise layer (a fully connected layer's input rescaled after the pool before it) the layer before that
    loads it, above the element-wise layer's buffers too: returns those layers' indices, each with the layer it
    loads for (the others load for the layer right after them)."""
    across: dict[int, GemmLayer] = {}
    if config.semaphores <= PREFETCH:
        return across
    for k, layer in enumerate(layers[1:], 1):
        j, body, floor = k - 1, layer.body, 0
        if not isinstance(body, GemmLayer) or not _whole_steps(body):
            continue
        if k >= 2 and isinstance(layers[j].body, ElementwiseLayer):  # (it neither loads weights nor waits PREFETCH)
            j, floor = k - 2, layers[j].body.spad_end(config)
        prev = layers[j].body
        if isinstance(prev, GemmLayer):
            # (a pooled convolution loads weights across an element-wise layer only: resnet50's last, fused with the
            # global pool, for the classifier)
            if not _whole_steps(prev) or prev.pool and j == k - 1 or prev.prefetched is not None and prev.steps() < 3:
                continue
        elif not isinstance(prev, DepthwiseLayer) or j < k - 1:
            continue
        _, rows, width = body.first_weights()
        address = align_down(config.scratchpad_bytes - align(rows * width))
        if max(prev.spad_end(), body.spad_end(), floor) <= address:
            body.prefetched = address
            body.tiling = replace(body.tiling, expected=body.tiling.prefetched_cycles)
            if j < k - 1:
                across[j] = body
    return across


def _whole_steps(layer: GemmLayer) -> bool:
    """A layer whose every weight block is a step (not a block diagonal's, whose blocks off it are none): one of
    a single group, or of groups side by side (GMATMUL)."""
    return layer.groups == 1 or layer.packing is not None


def emit_prefetch(em: Emitter, body: GemmLayer, constants: int) -> None:
    """The load of `body`'s first weight block into its prefetch region, signalling PREFETCH (the layer before
    emits it after its own last load)."""
    offset, rows, width = body.first_weights()
    em.emit(config_load(width, 0, width))
    em.emit(load(constants + offset, "spad", body.prefetched, rows, 1), Sync(signal=PREFETCH, signal_count=1))


def plan_input_prefetches(layers: list[Layer], config: ArchConfig, across: dict[int, GemmLayer]) -> None:
    """Mark each prefetched convolution layer whose first input rows the convolution layer before writes before its
    last row tile, or does not write at all (`GemmLayer.prefetched_input`: where they go, in how many transfers),
    where a region fits (`input_region`: clear of the weights it loads for the layer after it, or `across` an
    element-wise one)."""
    bodies = [layer.body for layer in layers]
    for k, (prev, body) in enumerate(zip(bodies, bodies[1:])):
        region = input_region(prev, body, across.get(k + 1, bodies[k + 2] if k + 2 < len(bodies) else None), config)
        if region is not None:
            body.prefetched_input = region
            body.tiling = replace(body.tiling, expected=body.tiling.ahead_cycles)


def input_region(prev: object, body: object, after: object, config: ArchConfig) -> tuple[int, int] | None:
    """(scratchpad address, transfers) of `body`'s first input rows where the convolution layer `prev` before it can
    load them (`_stored_early`), clear of the weight blocks prefetched for `prev`, `body` and the layer `after` and of
    `prev`'s own prefetched input; None where it cannot. Pure: rowplan.py asks it of row tilings it weighs."""
    if config.semaphores <= STORED or not isinstance(prev, GemmLayer) or not isinstance(body, GemmLayer) \
            or not _stored_early(prev, body):
        return None
    if body.rereads_first_chunk() and memory_bound(prev, config):
        return None  # (its rows are loaded twice: the layer before has no DRAM time to spare for the first load)
    busy = [weight_region(layer) for layer in (prev, body, after) if isinstance(layer, GemmLayer)]
    if prev.prefetched_input is not None:
        busy.append((prev.prefetched_input[0], prev.prefetched_input[0] + prev.first_input_bytes()))
    size = body.first_input_bytes()
    address = place_region(size, [r for r in busy if r is not None], max(prev.spad_end(), body.spad_end()), config)
    if address is None:
        return None
    return address, sum(op.mnemonic == "LOAD" for op in first_input(prev, body, lambda tensor: 0, address))


def memory_bound(layer: GemmLayer, config: ArchConfig) -> bool:
    """Whether a layer's DRAM traffic takes longer than its array's work (a prefetch it makes delays it)."""
    return layer.workload().memory_cycles(config) > layer.source.batch * array_cycles(layer.shape, layer.tiling,
                                                                                         config)


def _stored_early(prev: GemmLayer, body: GemmLayer) -> bool:
    """Whether every input byte of `body`'s first step is one `prev` stores before its last row tile (of its last
    image) or none of its result's, and `body` reads its first input as a plain row tile (one image, no gate, one
    group)."""
    if body.prefetched is None or body.gate or body.packing or body.groups != 1 or body.pool or body.window \
            or body.tiling.images != 1:
        return False
    earlier = not tensors_overlap(prev.result.tensor, body.source.tensor)  # written before the layer before began
    if not earlier and (prev.pool or prev.tiling.images != 1 or len(prev.row_tiles()) < 2
                        or prev.result.tensor is not body.source.tensor):
        return False
    s, src, r, t = body.shape, body.source, prev.result, body.tiling
    oy0, oy1 = body.row_tiles()[0]
    first = oy0 * s.stride[0] - s.pads[0]
    chunks = body.first_chunks()
    if len(chunks) > 1:  # only the first chunk is prefetched (the row tile's other readers load it again)
        if first + chunks[1][0] * s.stride[0] > s.height - 1 or body.rereads_first_chunk() and first + chunks[1][0] \
                * s.stride[0] <= 0:  # (a chunk loaded again has an image row: `GemmLayer._first_chunk_again`)
            return False
        oy1 = oy0 + chunks[0][1]
    if earlier:
        return True
    last_row = min(first + s.in_rows(oy1 - oy0) - 1, s.height - 1)
    end = last_row * src.row_stride + (s.width - 1) * src.pixel_stride + min(t.c, s.channels)
    return end <= (prev.source.batch - 1) * r.batch_stride + prev.stored_early() * r.row_stride or \
        split_row(prev, body) is not None


def split_row(prev: GemmLayer, body: GemmLayer) -> int | None:
    """The image row from which `prev` stores the rest of `body`'s first input in the row tile that stores its last
    row, where that input (a whole first step's, one image's) begins in rows `prev` stores before it: those load once
    stored, the rest after that tile's STORE (`emit_ahead`), and the first product still runs before the barrier; None
    where the input lies in one row tile, or ends in one before the last that stores before the load engine reaches
    the rows anyway (storetime.py)."""
    s, src, r = body.shape, body.source, prev.result
    if body.prefetched is None or body.gate or body.packing or body.groups != 1 or body.pool or body.window \
            or body.tiling.images != 1 or src.batch != 1 or len(body.first_chunks()) > 1 or prev.pool \
            or prev.tiling.images != 1 or prev.source.batch != 1 or len(prev.row_tiles()) < 2 \
            or r.tensor is not src.tensor or (r.row_stride, r.pixel_stride) != (src.row_stride, src.pixel_stride):
        return None
    oy0, oy1 = body.row_tiles()[0]
    first = oy0 * s.stride[0] - s.pads[0]
    last = min(first + s.in_rows(oy1 - oy0) - 1, s.height - 1)
    row = prev.stored_early() if prev.window else \
        next((start for start, end in prev.row_tiles() if last < end), None)
    if row is None or not max(first, 0) < row <= last:
        return None
    return row if row == prev.stored_early() or stored_late(prev, row) else None


def _split(ops: list[Op], rows: int) -> list[Op]:
    """A tile's input loads (`tile_loads.input_loads`: configuration, padding, one LOAD, padding reset) as two LOADs,
    the first of `rows` image rows with the padding above, the second of the rest with the padding below."""
    configure, pad, whole, reset = ops
    if [op.mnemonic for op in ops] != ["CONFIG_LOAD", "CONFIG_PAD", "LOAD", "CONFIG_PAD"] or \
            not 0 < rows < whole.fields["rows"]:
        raise AssertionError("a plain row tile's input splits between two of its image rows")
    f, p = whole.fields, pad.fields
    pitch = (p["pad_left"] + f["cols"] + p["pad_right"]) * configure.fields["elem_bytes"]
    return [configure, replace(pad, fields={**p, "pad_bottom": 0}), replace(whole, fields={**f, "rows": rows}),
            replace(pad, fields={**p, "pad_top": 0}),
            replace(whole, fields={**f, "rows": f["rows"] - rows,
                                   "dram": f["dram"] + rows * configure.fields["row_stride"],
                                   "sram": f["sram"] + (p["pad_top"] + rows) * pitch}), reset]


def first_input(prev: GemmLayer, body: GemmLayer, base: Callable[[DramTensor], int], sram: int) -> list[Op]:
    """The loads `prev` makes of `body`'s first input rows at `sram` (`GemmLayer.first_input`), in two where they
    straddle its last row tile (`split_row`)."""
    ops = body.first_input(base, sram)
    row = split_row(prev, body)
    if row is None:
        return ops
    s = body.shape
    oy0 = body.row_tiles()[0][0]
    return _split(ops, row - max(oy0 * s.stride[0] - s.pads[0], 0))


def tensors_overlap(a: DramTensor, b: DramTensor) -> bool:
    """Whether two tensors' bytes may share DRAM (the same region, overlapping extents)."""
    return a.region == b.region and a.offset < b.offset + b.extent and b.offset < a.offset + a.extent


def weight_region(layer: GemmLayer) -> tuple[int, int] | None:
    """The scratchpad region of a layer's prefetched weight block, if it has one."""
    if layer.prefetched is None:
        return None
    _, rows, width = layer.first_weights()
    return layer.prefetched, layer.prefetched + align(rows * width)


def place_region(size: int, busy: list[tuple[int, int]], floor: int, config: ArchConfig) -> int | None:
    """The highest aligned address of `size` bytes at or above `floor` clear of every `busy` region, or None."""
    for top in sorted({config.scratchpad_bytes, *(start for start, _ in busy)}, reverse=True):
        address = align_down(top - size)
        if address >= floor and all(address + size <= start or stop <= address for start, stop in busy):
            return address
    return None


def emit_ahead(em: Emitter, layer: GemmLayer, tiles: list[Tile], step_starts: list[int], after: GemmLayer,
               base: Callable[[DramTensor], int], constants: int, config: ArchConfig, far: GemmLayer | None = None,
               preloaded: set[int] | None = None) -> list[tuple[int, int]]:
    """The prefetches a convolution layer makes for the next one, `after`: the first weight block where the load
    engine has room for it (`_room`), else in pieces with the first input's where they fit (`_in_pieces`), else
    after the layer's own last load; then, after that load, the first input
    rows, whose first load (each of the two `split_row` makes) waits for the STORE of the layer (from
    `em.layer_start`) that writes the last of its rows (a CONFIG_STORE restated after it signals STORED). Returns
    each insertion into the layer's instructions, in order, as (index, count), so positions taken before (the
    layer's tile marks) can be moved past them. With `far` (far.py), the layer loads that one's first operands too
    where they all fit its gaps, and adds it to `preloaded`; for an `after` in `preloaded`, it makes only the
    signals."""
    if preloaded is not None and id(after) in preloaded:
        return _signals(em, after)
    inserted: list[tuple[int, int]] = []
    tail = _before_operands(em, layer, tiles, after, config)
    if after.prefetched is not None:
        weights = Emitter()
        emit_prefetch(weights, after, constants)
        at = _room(layer, tiles, load_cycles(weights.instructions, config), config)
        if at is None and not layer.window:  # (a pooled layer's vector work holds up the loads' dispatch)
            pieces = _in_pieces(em, layer, tiles, step_starts, after, base, constants, tail, config, far, preloaded)
            if pieces is not None:
                return pieces
        where = tail if at is None else step_starts[at]
        em.instructions[where:where] = weights.instructions
        inserted.append((where, len(weights.instructions)))
    if after.prefetched_input is None:
        return inserted
    ops = first_input(layer, after, base, after.prefetched_input[0])
    writers = _writers(em, layer, after, ops, config)
    found = [w for w, _ in writers]
    writer = max(found) if None not in found else None
    stores = sorted({w: restated for w, restated in writers if w is not None}.items(), reverse=True)
    for at, restated in stores:  # (from the last: each index holds)
        em.instructions.insert(at + 1, restated.replace(wait_sem=0, wait_count=0, signal_sem=STORED, signal_count=1))
        inserted.append((at + 1, 1))
    last = writer + len(stores) if stores else None  # (the last signal, behind the ones before it)
    loads = Emitter()
    waited = None  # (an input written before this layer began is in DRAM already: nothing to wait for)
    for op in ops:
        if op.mnemonic != "LOAD":
            loads.emit(op)
            continue
        mine = writers.pop(0)[0]
        fresh = mine is not None and mine != waited
        loads.emit(op, Sync(wait=STORED if fresh else 0, wait_count=int(fresh), signal=PREFETCH, signal_count=1))
        waited = mine
    where = _moved(tail, inserted)  # (after the weights, where they went there too; and after the STOREs it waits for)
    where = where if last is None or where > last else len(em.instructions)
    em.instructions[where:where] = loads.instructions
    inserted.append((where, len(loads.instructions)))
    return inserted


def _writers(em: Emitter, layer: GemmLayer, after: GemmLayer, ops: list[Op], config: ArchConfig
             ) -> list[tuple[int | None, Instr | None]]:
    """Each LOAD's writer among the prefetched input's loads `ops`: the last STORE of the layer writing a byte it
    reads (two where the rows straddle the last row tile), with the CONFIG_STORE in effect for it (`_writer`)."""
    written = tensors_overlap(layer.result.tensor, after.source.tensor)
    writers = [_writer(em.instructions, em.layer_start, _reads(ops[:k + 1], config)[-1:], config)
               for k, op in enumerate(ops) if op.mnemonic == "LOAD"]
    found = [w for w, _ in writers]
    writer = max(found) if written and None not in found else None
    if (writer is None) == written or len(writers) != after.prefetched_input[1] or written and found != sorted(found):
        raise AssertionError("a prefetched input the layer before writes is stored by it (and only such a one), "
                             "in as many transfers as planned, in store order")
    return writers


def _before_operands(em: Emitter, layer: GemmLayer, tiles: list[Tile], after: GemmLayer, config: ArchConfig) -> int:
    """Where a prefetch that finds no room among the layer's steps goes: after the layer's last load, or before its
    last tile's operands (a residual's tile, which only its last vector work reads) where the next layer's first
    product runs before the barrier (handoff.py) and outlasts that tile's operand load, vector work and stores: the
    product waits for the prefetch, and hides the drain the operand's later load delays."""
    operands = [i for i in range(em.layer_start, len(em.instructions)) if em.instructions[i].mnemonic == "LOAD"
                and em.instructions[i].signal_count and em.instructions[i].signal_sem in (OPERAND, OPERAND + 1)]
    last = tiles[-1]
    if not last.operands or not operands or after.prefetched_input is None:
        return len(em.instructions)
    # (and its next step's loads, after the barrier: about as long as its first input's, which the prefetch loads)
    drain = load_cycles(as_instrs(last.operands), config) + vector_cycles(last.vector, config) + \
        load_cycles(as_instrs(last.stores), config, "STORE") + \
        load_cycles(as_instrs(after.first_input(lambda tensor: 0, after.prefetched_input[0])), config)
    if after.first_product_cycles() < drain:
        return len(em.instructions)
    return operands[-1] - (len(last.operands) - 1)  # (they end with the last tile's last operand load)


def _moved(index: int, inserted: list[tuple[int, int]]) -> int:
    """Where the instruction at `index` lies after the insertions made since, (index, count) in order."""
    for where, count in inserted:
        if index >= where:
            index += count
    return index


def _room(layer: GemmLayer, tiles: list[Tile], moved: float, config: ArchConfig) -> int | None:
    """The first step before whose loads `moved` cycles of loading delay none of the layer's array work, by the
    pipeline's static timing (a step's loads start once the loads before them are done and the step two back has
    left the array; its matrix work once they are in and the step before is done), among the steps whose loads come
    after the array is done with the layer's own prefetched regions (the step before's first load waits for the step
    two back from it, past the last reader) and restate the load registers first; None if there is none."""
    readers = _readers(layer)
    steps = [step for tile in tiles for step in tile.steps]
    lasts = [len([x for tile in tiles[:k + 1] for x in tile.steps]) - 1 for k in range(len(tiles))]
    after_tile = {g: load_cycles(as_instrs(tile.operands), config) for g, tile in zip(lasts, tiles)}
    loads = [load_cycles(as_instrs([*step.shared, *step.loads]), config) for step in steps]
    arrays = [products_cycles(step, config) for step in steps]

    def finish(insert: int | None) -> float:
        return step_times(loads, arrays, after_tile, {insert: moved} if insert is not None else None)[1][-1]
    alone = finish(None)
    return next((j for j in range(readers + 2, len(steps)) if steps[j - 1].loads and steps[j].loads
                 and [*steps[j].shared, *steps[j].loads][0].mnemonic == "CONFIG_LOAD" and finish(j) <= alone), None)


def _readers(layer: GemmLayer) -> int:
    """The steps that read the layer's own prefetched regions (its first, or every step of its first row tile where
    they share its prefetched input): a load into the next layer's weight region waits until two steps after."""
    s, t = layer.shape, layer.tiling
    return -(-s.out_channels // t.n) if layer.prefetched_input is not None and t.c >= s.channels else 1


def _in_pieces(em: Emitter, layer: GemmLayer, tiles: list[Tile], step_starts: list[int], after: GemmLayer,
               base: Callable[[DramTensor], int], constants: int, tail: int, config: ArchConfig,
               far: GemmLayer | None, preloaded: set[int] | None) -> list[tuple[int, int]] | None:
    """`emit_ahead` where the weight block fits no step whole: it and the first input's transfers in pieces
    (pieces.py), those that fit the load engine's gaps there, the rest where `emit_ahead` puts them whole (then
    `far`'s, signalling nothing, where all fit the gaps left); the insertions as `emit_ahead` returns them, or None
    (and nothing emitted) where no piece fits a gap."""
    steps = [step for tile in tiles for step in tile.steps]
    timing = Timing(tiles, config)
    allowed = [j > 0 and bool(steps[j - 1].loads) and bool([*steps[j].shared, *steps[j].loads])
               and [*steps[j].shared, *steps[j].loads][0].mnemonic == "CONFIG_LOAD" for j in range(len(steps))]
    offset, rows, width = after.first_weights()
    items = [Transfer(config_load(width, 0, width), None, load(constants + offset, "spad", after.prefetched, rows, 1),
                      _readers(layer) + 2, ordered=False)]
    writers: list[tuple[int | None, Instr | None]] = []
    if after.prefetched_input is not None:
        ops = first_input(layer, after, base, after.prefetched_input[0])
        writers = _writers(em, layer, after, ops, config)
        tile_stores = [sum(op.mnemonic == "STORE" for op in tile.stores) for tile in tiles]
        waited = None
        for (configure, pad, op), (mine, _) in zip(transfers(ops), writers):
            earliest = 1
            if mine is not None:  # (after its STORE in the program, and once the static timing has it done)
                stored = sum(i.mnemonic == "STORE" for i in em.instructions[em.layer_start:mine + 1])
                tile = next(t for t in range(len(tiles)) if sum(tile_stores[:t + 1]) >= stored)
                earliest = next((j for j in range(len(steps)) if step_starts[j] > mine
                                 and timing.free[j] >= timing.stored[tile]), len(steps))
            items.append(Transfer(configure, pad, op, earliest, mine is not None and mine != waited))
            waited = mine
    left = budget(timing, allowed)
    placed = fill(left, [*items[1:], items[0]], config)  # (the inputs first: the weights fit anywhere)
    early = _far_items(far, base, constants) if far is not None and preloaded is not None else []
    if not fill(left, early, config) or any(j is None for item in early for _, _, j in item.pieces):
        early = []
    if not placed and not early:
        return None
    if early:
        preloaded.add(id(far))
    found = [w for w, _ in writers if w is not None]
    late = bool(found) and tail <= max(found)  # (the rest follows the last STORE it waits for)
    insertions = [(w + 1, 0, [restated.replace(wait_sem=0, wait_count=0, signal_sem=STORED, signal_count=1)])
                  for w, restated in sorted({w: r for w, r in writers if w is not None}.items())]
    for k, item in enumerate([*items, *early]):
        for n, (r0, r1, j) in enumerate(item.pieces):
            piece = Emitter()
            for op in item.ops(r0, r1):
                last = n == len(item.pieces) - 1 and k < len(items)
                piece.emit(op, Sync(wait=STORED, wait_count=int(item.stored and n == 0), signal=PREFETCH,
                                    signal_count=int(last)) if op.mnemonic == "LOAD" else None)
            where = step_starts[j] if j is not None else len(em.instructions) if k and late else tail
            insertions.append((where, 1 + (k > 0), piece.instructions))
    inserted, shift = [], 0
    for where, _, instrs in sorted(insertions, key=lambda x: (x[0], x[1])):
        em.instructions[where + shift:where + shift] = instrs
        inserted.append((where + shift, len(instrs)))
        shift += len(instrs)
    return inserted


def _far_items(far: GemmLayer, base: Callable[[DramTensor], int], constants: int) -> list[Transfer]:
    """`far`'s first weight block and input transfers (in DRAM before the layer loading them began) as pieces'
    items: its regions are clear of every one in use meanwhile (far.py), so any step may take them."""
    offset, rows, width = far.first_weights()
    items = [Transfer(config_load(width, 0, width), None, load(constants + offset, "spad", far.prefetched, rows, 1),
                      1, ordered=False)]
    if far.prefetched_input is not None:
        items += [Transfer(configure, pad, op, 1)
                  for configure, pad, op in transfers(far.first_input(base, far.prefetched_input[0]))]
    return items


def _signals(em: Emitter, after: GemmLayer) -> list[tuple[int, int]]:
    """The PREFETCH signals `after`'s first step waits for where the layer three back loaded its operands (far.py):
    each the CONFIG_LOAD in effect restated, at the layer's end. Returns the insertion, (index, count)."""
    restated = next(i for i in reversed(em.instructions) if i.mnemonic == "CONFIG_LOAD")
    count = 1 + (after.prefetched_input[1] if after.prefetched_input else 0)
    at = len(em.instructions)
    em.instructions += [restated.replace(wait_sem=0, wait_count=0, signal_sem=PREFETCH, signal_count=1)] * count
    return [(at, count)]


def _reads(ops: list[Op], config: ArchConfig) -> list[tuple[int, int]]:
    """The DRAM byte ranges a list of loads (led by their configuration) reads."""
    return [(e.start, e.stop) for instr, registers in with_registers(as_instrs(ops), config)
            if instr.mnemonic == "LOAD" for e in extents(instr, registers) if e.memory == "dram"]


def _writer(program: list[Instr], start: int, reads: list[tuple[int, int]], config: ArchConfig
            ) -> tuple[int | None, Instr | None]:
    """The last STORE of `program` from `start` that writes a byte of `reads`, and the CONFIG_STORE in effect for it
    (every tile's stores start with theirs)."""
    writer = restated = latest = None
    for index, (instr, registers) in enumerate(with_registers(program[start:], config), start):
        if instr.mnemonic == "CONFIG_STORE":
            latest = instr
        elif instr.mnemonic == "STORE" and any(e.memory == "dram" and e.write and a < e.stop and e.start < b
                                               for e in extents(instr, registers) for a, b in reads):
            writer, restated = index, latest
    return writer, restated
