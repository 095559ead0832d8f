"""Where a handed-off layer's accumulator lies: its first product clear of what the layer before reads last.

A handed-off first product (handoff.py) runs before the barrier, behind the last instruction of the layer before
that touches the accumulator words it writes. Every REQUANT of a convolution reads the layer's bias row, so a
product over the layer before's bias row waits for its very last vector work; over the slot of its second-to-last
tile, only for that tile's, and over words it never touches, for nothing. The layer's own prologue (its bias row,
tables) runs after the barrier, so the layout may overlap the layer before's anywhere else: it may start at any
base where it fits (`GemmLayer.acc_base`), its bias row before or after its two tile slots (`bias_last`: a product
as large as a slot fits in the layer before's other slot only with no bias row below it) and its tiles start in
either slot (`swapped`). Of the layouts at base 0 and those whose first product starts or ends right where one of
the layer before's accumulator extents ends (a product slid down until it meets one is no worse off; slid up until
it ends at one, it may leave room below), the layer takes the one that waits for the earliest instruction, today's
(base 0, bias first) where none waits for less; where it waits only for the vector work of a tile before the layer
before's last (done about when the array is), any such wait counts as one, and where the next layer hands off its
first product too, the layout that lets that product wait least late is taken: a layer whose vector work outlasts
its products (resnet50's expansions with a residual addition) lays its last tile next to its bias row, so that the
next product fits over its other slot and waits for that tile's vector work, not for the last tile's.
"""
from __future__ import annotations

from dataclasses import dataclass

from isa.config import ArchConfig
from isa.program import extents, with_registers
from isa.schema import Engine

from .accpack import packed_offset, tile_words
from .emitter import Emitter
from .epilogue import AddTensor
from .gemm import GemmLayer
from .pipeline import COMPUTED

BIAS_WORDS = 1 << 19
"""REQUANT addresses its bias row in 19 bits: a moved layout stays below (every row of it, a gate's too)."""


@dataclass(frozen=True)
class Touches:
    """The accumulator extents the layer before touches: for each [start, stop), its last vector instruction and
    its last instruction of an engine but the array's and the vector engine's (-1: none)."""

    extents: dict[tuple[int, int], tuple[int, int]]
    last_vector: int
    """the last vector instruction of the layer before (-1: none)"""
    epilogues: tuple[int, ...] = ()
    """where the vector work of the layer before's last two tiles starts (what waits for their products)"""

    def late(self, index: int) -> tuple[int, ...]:
        """How late a wait for instruction `index` (-1: none) comes: in the layer before's last tile's vector work
        (by index), its second-to-last's, or earlier, when the array has long moved on; by index alone where the
        layer before has no such tiles."""
        if index < 0:
            return (-1,)
        if len(self.epilogues) < 2:
            return 2, index
        return (2, index) if index >= self.epilogues[1] else (1,) if index >= self.epilogues[0] else (0,)

    def waited(self, lo: int, hi: int) -> int | None:
        """The last vector instruction of the layer before reading or writing one of the words [lo, hi) (None:
        none does); its last vector instruction of all if another engine's but the array's touches one after it
        (the array's run in order: the moved product follows them all)."""
        vector = other = -1
        for (start, stop), (v, o) in self.extents.items():
            if start < hi and lo < stop:
                vector, other = max(vector, v), max(other, o)
        if other > vector:
            return self.last_vector
        return vector if vector >= 0 else None


def touches(program: list, first: int, stop: int, config: ArchConfig) -> Touches:
    """One scan of program[first:stop] (the layer before): `Touches`."""
    found: dict[tuple[int, int], tuple[int, int]] = {}
    last_vector, epilogues = -1, []
    for index, (instr, registers) in enumerate(with_registers(program[first:stop], config), first):
        vector = instr.spec.engine is Engine.VECTOR
        if vector:
            last_vector = index
            if instr.wait_count and instr.wait_sem in (COMPUTED, COMPUTED + 1):
                epilogues.append(index)
        elif getattr(instr, "space", None) != "acc":
            continue
        for e in extents(instr, registers):
            if e.memory == "acc":
                v, o = found.get((e.start, e.stop), (-1, -1))
                found[(e.start, e.stop)] = (index, o) if vector else (v, index)
    return Touches(found, last_vector, tuple(epilogues[-2:]))


Option = tuple[int, tuple[bool, bool]]
"""A layout: its base, (bias_last, swapped)."""


def _options(body: GemmLayer, stops: list[int], limit: int) -> tuple[list[Option], dict, int]:
    """The layouts of `body` that fit below `limit`: at base 0, or with its first product starting or ending where
    one of the layer before's extents ends (`stops`); where each puts the first product from its base, and its
    words."""
    span, slot, bias = body.acc_span(), body.acc_slot(), body.tiled_shape().out_channels
    lo, hi = body.first_product()
    layouts = [(last, swapped) for last in (False, True) for swapped in (False, True)]
    offsets = {layout: (0 if layout[0] else bias) + (slot if layout[1] else 0) for layout in layouts}
    """where the first product starts from the layout's base"""
    options = [(0, layout) for layout in layouts] + [
        (stop - offsets[layout] - size, layout) for size in (0, hi - lo) for layout in layouts for stop in stops]
    fitting = [(base, layout) for base, layout in options
               if base == 0 and not layout[0] or 0 <= base and base + span <= limit]
    return fitting, offsets, hi - lo


def _drained(body: GemmLayer, option: Option) -> dict[tuple[int, int], int]:
    """The accumulator extents of `body`'s layout `option` by how late its vector work touches them last: 2 its
    last tile's words and its bias row (every REQUANT reads it), 1 its second-to-last tile's slot, 0 the slot of
    a tile before that (its last two share one: accpack.py); its whole layout 2 where it holds more rows."""
    base, (last, swapped) = option
    bias, slot = body.tiled_shape().out_channels, body.acc_slot()
    if body.pool or body.gate or body.window:
        return {(base, base + body.acc_span()): 2}
    row = base + (2 * slot if last else 0)
    first = base + (0 if last else bias)
    slots = [first, first + slot][::-1 if swapped else 1]
    tiles, packed = len(tile_words(body)), packed_offset(body)
    final = slots[(tiles - (2 if packed is not None else 1)) % 2]
    drained = {(row, row + bias): 2, (final, final + slot): 2}
    if tiles > 1:
        other = slots[0] if final == slots[1] else slots[1]
        drained[(other, other + slot)] = 0 if packed is not None else 1
    return drained


def _next_waits(after: GemmLayer, drained: dict[tuple[int, int], int], limit: int) -> int:
    """How late (`_drained`) the latest vector work of the layer before is that the first product of `after`
    waits for in its best layout (-1: none)."""
    fitting, offsets, size = _options(after, sorted({stop for _, stop in drained}), limit)

    def late(option: Option) -> int:
        start = option[0] + offsets[option[1]]
        return max((v for (a, b), v in drained.items() if a < start + size and start < b), default=-1)
    return min(late(option) for option in fitting)


def place(em: Emitter, body: GemmLayer, config: ArchConfig, after: GemmLayer | None = None) -> int | None:
    """Before the layer of `body` is emitted (the layer before is `em`'s last): set its `acc_base`, `bias_last`
    and `swapped` (module doc), and return the instruction its moved product waits for (`handoff.hand_off`;
    None: none). Where the layer `after` it hands off its first product too, of the layouts whose product waits
    as late, the one that lets that product wait least late (`_drained`); with a residual addition, that first."""
    seen = touches(em.instructions, em.debug[-1].start, len(em.instructions) - 1, config)
    limit = min(config.accumulator_bytes // 4, BIAS_WORDS)
    fitting, offsets, size = _options(body, sorted({stop for _, stop in seen.extents}), limit)

    def waited(option: Option) -> int:
        start = option[0] + offsets[option[1]]
        found = seen.waited(start, start + size)
        return -1 if found is None else found

    # a residual addition makes each tile's vector work two passes: the next product waiting for the last tile's
    # outlasts this one's waiting for the layer before's, so the next layer's wait comes first
    heavy = any(isinstance(op, AddTensor) for op in body.epilogue)

    def key(option: Option) -> tuple:
        index = waited(option)
        own, following = seen.late(index), _next_waits(after, _drained(body, option), limit) if after else 0
        return (following, own, index) if heavy else (own, following, index)
    best = min(fitting, key=key)  # (the first of equals: today's layout, its first slot)
    body.acc_base, (body.bias_last, body.swapped) = best
    return None if waited(best) < 0 else waited(best)
