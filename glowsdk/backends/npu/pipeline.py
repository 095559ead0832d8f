"""Double-buffered software pipelines: one layer's tiles, with exactly the semaphores they need.

A layer is a list of tiles; a tile is one or more steps (each: DMA loads into a scratchpad slot, then
the MATMULs that read them, after the vector work that prepares them if any, or for a reduction the
vector work that folds them into the accumulator), then vector work and the STOREs of its result. Slots alternate (step g
uses slot g % 2, tile t accumulator and output slot t % 2), so the load engine fills slot g + 1 while
the matrix engine computes on slot g, and the store engine drains tile t - 1 while tile t computes
(paper 3.5: the instruction schedule hides the memory latency). Every buffer reuse two steps later
waits for the "free" signal of its last reader; a signal is made only when a later wait consumes
it, so a layer leaves every semaphore at zero.

Engines signal once per instruction; where an engine must signal or wait twice, a one-cycle
configuration instruction of that engine carries the extra token (CONFIG_MATMUL re-stating the
layer's configuration, CONFIG_CLAMP with the reset bounds, which no generated code otherwise uses).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from isa.table import ACC_ADDR, ACC_ADDR19, BY_MNEMONIC, SPACE

from .emitter import DONE, Emitter, Sync
from .instructions import CONFIG_CLAMP, Op

LOADED, MFREE, ACCFREE, COMPUTED, READY, SFREE, VFREE = 1, 3, 5, 7, 9, 11, 13
"""The first of each pair of per-slot semaphores (slot 0 and slot 1)."""
TABLE = 15
"""Signalled by a layer's prologue loads (requantize tables), waited on once by the vector engine."""
TRANSFERS = ("LOAD", "GATHER")
"""The load engine's instructions that move data (each signals its step's semaphore once)."""
PRODUCTS = ("MATMUL", "GMATMUL")
"""The matrix engine's instructions that compute (a step's first waits for its loads, its last frees them)."""
OPERAND, OPFREE = 16, 18
"""Per-slot pairs: a tile's vector operands loaded; their buffers free again (the vector engine is done)."""
PREFETCH = 20
"""Signalled across a barrier (or two, across an element-wise layer): the loads the layer before made for a layer's
first step, its weight block and its input rows (prefetch.py), or the restated CONFIG_STORE after the last kept
result that step reads (kept_inputs.py); waited on, all at once, by that first step's matrix work."""
PREPARED = 22
"""Per-slot pair: a step's operands prepared by the vector engine (`Step.prepare`), waited on by its matrix work."""
IFREE = 24
"""Per-parity pair: a shared input buffer free again (`Step.shared`): its last reader's matrix work is done."""
STORED = 26
"""Signalled by a configuration op restated after the STORE of the last rows the next layer's first input reads,
waited on by the load of that input before the barrier (prefetch.py)."""
CLAMP_RESET = CONFIG_CLAMP(lo=-(1 << 31), hi=(1 << 31) - 1)
"""The clamp's reset bounds: a vector-engine instruction that changes nothing, to carry a wait or a signal."""


@dataclass
class Step:
    """Loads into one slot, then the matrix work on it (none for vector-only and copy layers), or the vector
    work folding it into the tile's accumulator (a reduction over more input than one slot holds)."""

    loads: list[Op] = field(default_factory=list)
    matmuls: list[Op] = field(default_factory=list)
    vector: list[Op] = field(default_factory=list)
    matrix_wait: tuple[int, int] | None = None
    """a wait for something loaded before the layer began (PREFETCH), on the matrix work's leading configuration"""
    prepare: list[Op] = field(default_factory=list)
    """vector work on the loaded operands before the matrix work reads them (a channel gate applied to the input
    tile in place): it waits for the step's loads, the matrix work waits for it"""
    shared: list[Op] = field(default_factory=list)
    """loads (led by a configuration op) of a buffer this step and the next ones read, until one `releases` it (a row
    tile's input that all its output-channel tiles read); the buffers alternate, so these wait for the release of
    the one two back rather than for the matrix work two steps back, and overlap every step in between"""
    releases: bool = False
    """the last step that reads the latest `shared` buffer"""
    parts: tuple[int, ...] = ()
    """when the matrix work is several products, each reading only what the loads before it brought (a layer's
    first step, streamed: the array starts on the first rows while the rest load), the transfers each product
    waits for, in order (their sum is the step's); empty: the first product waits for them all"""


@dataclass
class Tile:
    steps: list[Step]
    vector: list[Op] = field(default_factory=list)
    stores: list[Op] = field(default_factory=list)
    operands: list[Op] = field(default_factory=list)
    """loads only the vector work reads (an epilogue's residual tile): issued after the tile's steps, so the
    array starts without them and the load engine waits for their buffer's last reader only then; a tile whose
    operands the layer before loaded (operands_ahead.py) has none, and its slot is neither waited for nor freed"""
    packed: bool = False
    """the accumulator words it writes follow the tile before's, in that tile's slot (accpack.py: a layer's small
    last tile): it waits for no tile's epilogue, and the tile two back frees nothing"""


def _accumulator_read(vector: list[Op]) -> int:
    """How many of a tile's vector instructions lead up to the last that reads or writes the accumulator (its
    REQUANT: a residual addition after it reads the int8 result and the operand in the scratchpad), so that the
    tile's slot is free for the tile two later while the rest run; all of them where no computing one follows."""
    touching = [k for k, op in enumerate(vector) if any(
        field.kind in (ACC_ADDR, ACC_ADDR19) or field.kind is SPACE and op.fields[field.name] == "acc"
        for field in BY_MNEMONIC[op.mnemonic].fields)]
    cut = touching[-1] + 1 if touching else len(vector)
    computing = [not op.is_config for op in vector]
    return cut if any(computing[:cut]) and any(computing[cut:]) else len(vector)


def _is_dma(op: Op) -> bool:
    return op.mnemonic in ("LOAD", "STORE")


def _emit(em: Emitter, specs: list[Op], first_wait: tuple[int, int] | None = None,
          last_signal: tuple[int, int] | None = None, pick=None) -> tuple[int, int]:
    """Emit specs; put `first_wait` on the first and `last_signal` on the last instruction `pick` selects."""
    indices = [em.emit(op) for op in specs]
    chosen = [i for i, op in zip(indices, specs) if pick is None or pick(op)]
    if first_wait and first_wait[1]:
        em.set_sync(chosen[0], wait=first_wait)
    if last_signal and last_signal[1]:
        em.set_sync(chosen[-1], signal=last_signal)
    return chosen[0], chosen[-1]


def _signal_each(em: Emitter, specs: list[Op], sem: int, wait: tuple[int, int] | None,
                 acc_wait: tuple[int, int] | None = None) -> int:
    """Emit load specs, each transfer signalling `sem` once; the first transfer waits `wait`, a transfer
    into the accumulator waits `acc_wait` instead. Returns the number of transfers."""
    count = 0
    for op in specs:
        index = em.emit(op)
        if op.mnemonic not in TRANSFERS:
            continue
        if op.fields.get("space") == "acc" and acc_wait:
            em.set_sync(index, wait=acc_wait)
        elif count == 0 and wait:
            em.set_sync(index, wait=wait)
        em.set_sync(index, signal=(sem, 1))
        count += 1
    return count


def _matmuls(em: Emitter, specs: list[Op], loaded: tuple[int, int], free: tuple[int, int] | None,
             acc_free: tuple[int, int] | None = None, parts: tuple[int, ...] = ()) -> None:
    """Emit one step's matrix work: the first product waits for its loads (or each product for its `parts` of
    them: Step.parts), the last frees the slot. A step that loads nothing into the accumulator waits `acc_free` on
    its leading CONFIG_MATMUL instead (as the first step of a layer whose weights the layer before loaded waits
    PREFETCH: Step.matrix_wait)."""
    indices = [em.emit(op) for op in specs]
    products = [i for i, op in zip(indices, specs) if op.mnemonic in PRODUCTS]
    waits = parts or (loaded[1],)
    if len(waits) > len(products) or sum(waits) != loaded[1]:
        raise AssertionError("a step's parts wait for its loads, one count per product")
    for index, count in zip(products, waits):
        em.set_sync(index, wait=(loaded[0], count))
    em.set_sync(products[-1], signal=free)
    if acc_free:
        if specs[0].mnemonic != "CONFIG_MATMUL":
            raise AssertionError("a step with no accumulator load starts with CONFIG_MATMUL")
        em.set_sync(indices[0], wait=acc_free)


def emit_layer(em: Emitter, tiles: list[Tile], prologue: list[Op] = (), matmul_config: Op | None = None,
               late_prologue: bool = False, step_starts: list[int] | None = None) -> list[tuple[int, int]]:
    """Emit a layer's tiles as a double-buffered pipeline; its last STORE signals DONE. With `late_prologue` (only
    the vector engine reads what the prologue loads), its loads follow the first step's, so the array starts as
    soon as that step's operands are in. Returns where each tile's instructions start (the first tile's with the
    prologue's) and where its vector work and stores start: the points where another layer's tiles may be
    interleaved (overlap.py); appends to `step_starts` where each step's instructions start (its loads first)."""
    if not tiles or not tiles[-1].stores or any(not tile.stores and not tile.vector for tile in tiles):
        raise AssertionError("a layer's last tile stores its result, and a tile that stores nothing has vector work")
    starts, mids = [len(em.instructions)], []

    def emit_prologue() -> None:
        table = _signal_each(em, list(prologue), TABLE, None)
        if table:
            em.emit(CLAMP_RESET, Sync(wait=TABLE, wait_count=table))

    if not late_prologue:
        emit_prologue()
    total_steps = sum(len(t.steps) for t in tiles)
    # with vector work before the matrix work (Step.prepare), each tile's steps are emitted before the vector work
    # of the tile before: the vector engine runs in order, so it prepares the next tile's operands while the array
    # computes, not after the epilogue that waits for the array
    ahead = any(step.prepare for tile in tiles for step in tile.steps)
    g = 0
    buffers = sum(bool(step.shared) for tile in tiles for step in tile.steps)
    buffer = -1

    def emit_steps(t: int) -> int:
        """Tile t's steps (their loads, vector preparation, matrix work or reduction); the last step's load count."""
        nonlocal g, buffer
        tile, slot, loaded = tiles[t], t % 2, 0
        gemm = any(step.matmuls for step in tile.steps)
        for j, step in enumerate(tile.steps):
            s = g % 2
            if step_starts is not None:
                step_starts.append(len(em.instructions))
            if gemm:
                acc_wait = (ACCFREE + slot, 1) if t >= 2 and j == 0 and not tile.packed else None
                acc_load = any(op.mnemonic == "LOAD" and op.fields["space"] == "acc" for op in step.loads)
                slot_free = (MFREE + s, 1) if g >= 2 else None
                loaded = 0
                if step.shared:
                    buffer += 1
                    if step.shared[0].mnemonic in TRANSFERS:
                        raise AssertionError("a step's shared loads start with their configuration")
                    first = len(em.instructions)
                    loaded = _signal_each(em, step.shared, LOADED + s, None if step.loads else slot_free)
                    if buffer >= 2:
                        em.set_sync(first, wait=(IFREE + buffer % 2, 1))
                loaded += _signal_each(em, step.loads, LOADED + s, slot_free, acc_wait if acc_load else None)
                if g == 0 and late_prologue:
                    emit_prologue()
                ready = (LOADED + s, loaded)
                if step.prepare:
                    _emit(em, step.prepare, ready, (PREPARED + s, 1), pick=lambda op: not op.is_config)
                    ready = (PREPARED + s, 1)
                _matmuls(em, step.matmuls, ready, (MFREE + s, 1) if g + 2 < total_steps else None,
                         (None if acc_load else acc_wait) or step.matrix_wait, step.parts)
                if step.releases and buffer + 2 < buffers:  # the configuration again, carrying the release
                    em.emit(step.matmuls[0], Sync(signal=IFREE + buffer % 2, signal_count=1))
            elif step.vector:  # a reduction step: its vector work frees the slot for step g + 2
                loaded = _signal_each(em, step.loads, LOADED + s, (VFREE + s, 1) if g >= 2 else None)
                _emit(em, step.vector, (LOADED + s, loaded), (VFREE + s, 1) if g + 2 < total_steps else None,
                      pick=lambda op: not op.is_config)
            else:
                free = ((VFREE if tile.vector else SFREE) + s, 1) if g >= 2 else None
                loaded = _signal_each(em, step.loads, LOADED + s, free)
            g += 1
        return loaded

    loaded = emit_steps(0) if ahead else 0
    for t, tile in enumerate(tiles):
        if t:
            starts.append(len(em.instructions))
        slot, later = t % 2, t + 2 < len(tiles)
        gemm = any(step.matmuls for step in tile.steps)
        if not ahead:
            loaded = emit_steps(t)
        if gemm:
            em.emit(matmul_config, Sync(signal=COMPUTED + slot, signal_count=1))
        if ahead and t + 1 < len(tiles):
            emit_steps(t + 1)
        operands = _signal_each(em, tile.operands, OPERAND + slot,
                                (OPFREE + slot, 1) if t >= 2 and tiles[t - 2].operands else None)
        mids.append(len(em.instructions))
        reduced = any(step.vector for step in tile.steps)  # the vector engine has already waited for the loads
        if tile.vector:
            if t >= 2:
                em.emit(CLAMP_RESET, Sync(wait=SFREE + slot, wait_count=1))
            if operands:
                em.emit(CLAMP_RESET, Sync(wait=OPERAND + slot, wait_count=operands))
            ready_wait = (COMPUTED + slot, 1) if gemm else None if reduced else (LOADED + slot, loaded)
            done = (READY + slot, 1) if tile.stores else (SFREE + slot, 1) if later else None  # no store to wait
            cut = _accumulator_read(tile.vector) if gemm else len(tile.vector)
            _emit(em, tile.vector[:cut], ready_wait, None if tile.vector[cut:] else done,
                  pick=lambda op: not op.is_config)
            if later and not reduced and not tiles[t + 2].packed:
                em.emit(CLAMP_RESET, Sync(signal=(ACCFREE if gemm else VFREE) + slot, signal_count=1))
            if tile.vector[cut:]:
                _emit(em, tile.vector[cut:], None, done, pick=lambda op: not op.is_config)
            if later and operands and tiles[t + 2].operands:
                em.emit(CLAMP_RESET, Sync(signal=OPFREE + slot, signal_count=1))
            store_wait = (READY + slot, 1)
        else:
            store_wait = (LOADED + slot, loaded)
        final = (DONE, 1) if t == len(tiles) - 1 else (SFREE + slot, 1) if later else None
        if tile.stores:  # (a tile of a pooled convolution may only start the next window: gemm._window_pool)
            _emit(em, tile.stores, store_wait, final, pick=_is_dma)
    return list(zip(starts, mids))
