"""Prefetches cut into pieces that fill the load engine's idle time among the layer before's steps.

Where a layer's array work outlasts each step's loads, its load engine idles before each step's loads, which wait
for the slot the step two back frees. The next layer's first weight block rarely fits one such gap whole
(prefetch._room places it whole where it does); after the layer's last load, it delays the next layer's first product
(on the server preset, resnet50's conv__44 waited 3.9k cycles behind its 295 KB block and its input rows). So it
loads in pieces of rows, each in a gap it fits by the pipeline's static timing, and so do the first input's rows once
stored (their STORED wait has passed by then: a load that blocked there would stall the in-order engine and the
layer's own loads behind it). Only gaps: a piece that ate into the slack after a step's loads would leave the next
steps none, where the static timing misses the DRAM contention. What fits no gap still follows the layer's last load.

Only the last piece of each transfer signals PREFETCH: the engine runs its transfers in order, one after another, so
that signal also tells the next layer's first step that the pieces before it are in, and the count that step waits
for is the one of the transfers whole. Each piece restates the load registers, and the step after it does too.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from isa.config import ArchConfig

from .instructions import CONFIG_PAD, Op
from .pipeline import Tile
from .static_time import as_instrs, load_cycles, products_cycles, step_times, vector_cycles

MARGIN = 0.9
"""The share of a modeled gap its pieces may take: the static timing misses some of the DRAM contention."""
SMALLEST = 64
"""The fewest data cycles of a piece (but an item's last): one that moves less pays its request latency for little."""


class Timing:
    """The pipeline's static timing of a layer's steps: a step's loads start once the loads before them are done and
    the step two back has left the array, its matrix work once they are in and the step before is done; a tile's
    residual operands load after its last step's loads, its stores follow its vector work and share the bus with the
    loads of the step two after its last (their cycles added to those loads'). By step: when the load engine is done
    with what comes before the step's loads (`free`) and how long it then waits for their slot (`idle`); by tile:
    when its stores are done (`stored`)."""

    def __init__(self, tiles: list[Tile], config: ArchConfig) -> None:
        steps = [(t, step) for t, tile in enumerate(tiles) for step in tile.steps]
        loads = [load_cycles(as_instrs([*step.shared, *step.loads]), config) for _, step in steps]
        lasts = [g for g in range(len(steps)) if g + 1 == len(steps) or steps[g + 1][0] != steps[g][0]]
        for g in lasts:
            if g + 2 < len(steps):
                loads[g + 2] += load_cycles(as_instrs(tiles[steps[g][0]].stores), config, "STORE")
        after = {g: load_cycles(as_instrs(tiles[steps[g][0]].operands), config) for g in lasts}
        self.free, ends = step_times(loads, [products_cycles(step, config) for _, step in steps], after)
        self.idle = [max((ends[g - 2] if g >= 2 else 0.0) - free, 0.0) for g, free in enumerate(self.free)]
        self.stored = [ends[g] + vector_cycles(tiles[steps[g][0]].vector, config)
                       + load_cycles(as_instrs(tiles[steps[g][0]].stores), config, "STORE") for g in lasts]


@dataclass
class Transfer:
    """One LOAD to cut into pieces of rows, with the load configuration and the padding in effect for it; the first
    step before whose loads a piece of it may go; whether its first piece waits STORED."""

    configure: Op
    pad: Op | None
    load: Op
    earliest: int
    stored: bool = False
    ordered: bool = True
    """its pieces follow those of the transfers before it (else they may precede them: the weights, which wait for
    nothing, and which no other load waits for)"""
    pieces: list[tuple[int, int, int | None]] = field(default_factory=list)
    """(first row, end row, step before whose loads it goes; None: after the layer's last load), in order"""

    def ops(self, r0: int, r1: int) -> list[Op]:
        """Rows [r0, r1) of the transfer, the padding above only with the first, below only with the last, each
        piece with its own configuration (and its padding reset after it)."""
        f = self.load.fields
        dram = f["dram"] + r0 * self.configure.fields["row_stride"]
        if self.pad is None:
            return [self.configure, replace(self.load, fields={**f, "rows": r1 - r0, "dram": dram,
                                                               "sram": f["sram"] + r0 * self._pitch()})]
        p = self.pad.fields
        sram = f["sram"] + (p["pad_top"] + r0) * self._pitch() if r0 else f["sram"]
        return [self.configure, replace(self.pad, fields={**p, "pad_top": p["pad_top"] if r0 == 0 else 0,
                                                          "pad_bottom": p["pad_bottom"] if r1 == f["rows"] else 0}),
                replace(self.load, fields={**f, "rows": r1 - r0, "sram": sram, "dram": dram}),
                CONFIG_PAD(pad_top=0, pad_bottom=0, pad_left=0, pad_right=0, pad_value=0)]

    def row_cycles(self, config: ArchConfig) -> float:
        """The DRAM cycles of one row at full bandwidth."""
        f = self.load.fields
        return f["cols"] * f["planes"] * self.configure.fields["elem_bytes"] / config.dram_bytes_per_cycle

    def _pitch(self) -> int:
        """The scratchpad bytes of one row, with its padding at the sides."""
        f, p = self.load.fields, self.pad.fields if self.pad is not None else {}
        return (p.get("pad_left", 0) + f["cols"] * f["planes"] + p.get("pad_right", 0)) * \
            self.configure.fields["elem_bytes"]


def transfers(ops: list[Op]) -> list[tuple[Op, Op | None, Op]]:
    """Each LOAD of a list of loads with the CONFIG_LOAD and CONFIG_PAD in effect for it."""
    configure = pad = None
    found = []
    for op in ops:
        if op.mnemonic == "CONFIG_LOAD":
            configure = op
        elif op.mnemonic == "CONFIG_PAD":
            pad = op
        elif op.mnemonic == "LOAD":
            found.append((configure, pad, op))
    return found


def budget(timing: Timing, allowed: list[bool]) -> list[float]:
    """The cycles of pieces each step's gap may take (`MARGIN` of it, none where a piece may not go)."""
    return [idle * MARGIN if ok else 0.0 for idle, ok in zip(timing.idle, allowed)]


def fill(left: list[float], items: list[Transfer], config: ArchConfig) -> bool:
    """Cut `items` into pieces, each into the first gap it fits from its `earliest` step (and not before the last
    piece of an item before it, unless it is not `ordered`), several into one gap as long as they fit (`left`: the
    cycles each still has, taken as they are); the rest of each after the layer's last load. Whether any piece went
    into a gap."""
    latency = config.dram_latency_cycles
    placed, j = False, 0
    for item in items:
        row, rows, cycles = 0, item.load.fields["rows"], item.row_cycles(config)
        j = max(j, item.earliest) if item.ordered else item.earliest
        while row < rows and j < len(left):
            fits = min(rows - row, int((left[j] - latency) // cycles))
            if fits <= 0 or fits < rows - row and fits * cycles < SMALLEST:
                j += 1
                continue
            item.pieces.append((row, row + fits, j))
            left[j] -= latency + fits * cycles
            row, placed = row + fits, True
        if row < rows:
            item.pieces.append((row, rows, None))
    return placed
