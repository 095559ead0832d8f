"""Where a handed-off layer's accumulator lies: its first product clear of what the layer before reads last.

A handed-off first product (handoff.py) runs before the barrier, behind the last instruction of the layer before
that touches the accumulator words it writes. Every REQUANT of a convolution reads the layer's bias row, so a
product over the layer before's bias row waits for its very last vector work; over the slot of its second-to-last
tile, only for that tile's, and over words it never touches, for nothing. The layer's own prologue (its bias row,
tables) runs after the barrier, so the layout may overlap the layer before's anywhere else: it may start at any
base where it fits (`GemmLayer.acc_base`), its bias row before or after its two tile slots (`bias_last`: a product
as large as a slot fits in the layer before's other slot only with no bias row below it) and its tiles start in
either slot (`swapped`). Of the layouts at base 0 and those whose first product starts right where one of the
layer before's accumulator extents ends (a product slid down until it meets one is no worse off), the layer takes
the one that waits for the earliest instruction, today's (base 0, bias first) where none waits for less.
"""
from __future__ import annotations

from dataclasses import dataclass

from isa.config import ArchConfig
from isa.program import extents, with_registers
from isa.schema import Engine

from .emitter import Emitter
from .gemm import GemmLayer

BIAS_WORDS = 1 << 19
"""REQUANT addresses its bias row in 19 bits: a moved layout stays below (every row of it, a gate's too)."""


@dataclass(frozen=True)
class Touches:
    """The accumulator extents the layer before touches: for each [start, stop), its last vector instruction and
    its last instruction of an engine but the array's and the vector engine's (-1: none)."""

    extents: dict[tuple[int, int], tuple[int, int]]
    last_vector: int
    """the last vector instruction of the layer before (-1: none)"""

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
    last_vector = -1
    for index, (instr, registers) in enumerate(with_registers(program[first:stop], config), first):
        vector = instr.spec.engine is Engine.VECTOR
        if vector:
            last_vector = index
        elif getattr(instr, "space", None) != "acc":
            continue
        for e in extents(instr, registers):
            if e.memory == "acc":
                v, o = found.get((e.start, e.stop), (-1, -1))
                found[(e.start, e.stop)] = (index, o) if vector else (v, index)
    return Touches(found, last_vector)


def place(em: Emitter, body: GemmLayer, config: ArchConfig) -> int | None:
    """Before the layer of `body` is emitted (the layer before is `em`'s last): set its `acc_base`, `bias_last`
    and `swapped` (module doc), and return the instruction its moved product waits for (`handoff.hand_off`;
    None: none)."""
    seen = touches(em.instructions, em.debug[-1].start, len(em.instructions) - 1, config)
    limit = min(config.accumulator_bytes // 4, BIAS_WORDS)
    span, slot, bias = body.acc_span(), body.acc_slot(), body.tiled_shape().out_channels
    lo, hi = body.first_product()
    layouts = [(last, swapped) for last in (False, True) for swapped in (False, True)]
    offsets = {layout: (0 if layout[0] else bias) + (slot if layout[1] else 0) for layout in layouts}
    """where the first product starts from the layout's base"""
    stops = sorted({stop for _, stop in seen.extents})
    options = [(0, layout) for layout in layouts] + [
        (stop - offsets[layout], layout) for layout in layouts for stop in stops]
    fitting = [(base, layout) for base, layout in options
               if base == 0 and not layout[0] or 0 <= base and base + span <= limit]

    def waited(option: tuple[int, tuple[bool, bool]]) -> int:
        start = option[0] + offsets[option[1]]
        found = seen.waited(start, start + hi - lo)
        return -1 if found is None else found
    best = min(fitting, key=waited)  # (the first of equals: today's layout, its first slot)
    body.acc_base, (body.bias_last, body.swapped) = best
    return None if waited(best) < 0 else waited(best)
