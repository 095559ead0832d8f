"""One kernel per distinct step: steps that differ only in where their operands live share code.

A network repeats itself: resnet50's bottlenecks, regnet's stages, an RNN
unrolled over its time steps (a 50-step GRU has 405 steps but 27 distinct
kernels). A kernel's code depends on its instructions' kinds, attributes and
operand types, on which operands are the same bytes or overlap (element-wise
stacks and epilogues decide in-place updates from the plan), and on where its
operands are only through the pointers KernelContext hands out. So a kernel
takes one pointer argument per *group* of operands whose bytes overlap (a view
and its base, an update in place), and reaches each operand at a constant byte
offset from its group's pointer; the entry point computes the pointers per
call (so the time steps of an RNN, reading and writing other slices of the
same buffers, share too). Operands in different groups share no byte, so every
pointer argument is `noalias` truthfully. Steps with equal `signature` then
compile to the same function, built once: LLVM optimises and emits each
distinct kernel once, which is most of a compile.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, Sequence

import numpy as np

from ....compiler.ir.allocator import MemoryPlan
from ....compiler.ir.function import Instruction, Value, Weight, base_of


@dataclass(frozen=True)
class Anchor:
    """Where a group's pointer points: a byte offset in a region, inside base buffer `buffer`
    (placeholders are bound per run, and a constant weight nothing reads leaves the region)."""

    region: str
    offset: int
    buffer: str


class Operands:
    """The distinct operand values of a step (first appearance, instructions then epilogue),
    the anchor of each group, and each value's (group, byte offset from the group's anchor)."""

    def __init__(self, values: tuple[Value, ...], anchors: tuple[Anchor, ...],
                 places: tuple[tuple[int, int], ...]) -> None:
        self.values, self.anchors, self.places = values, anchors, places
        self._index = {id(v): i for i, v in enumerate(values)}

    def index(self, value: Value) -> int:
        """The position of `value` among `values` (KeyError for a value that is no operand)."""
        return self._index[id(value)]

    def place(self, value: Value) -> tuple[int, int]:
        """(group, byte offset from the group's anchor) of operand `value`."""
        return self.places[self.index(value)]


def distinct_operands(instrs: Sequence[Instruction]) -> tuple[Value, ...]:
    """Every operand of `instrs` once, in order of first appearance."""
    seen: dict[int, Value] = {}
    for instr in instrs:
        for value in instr.operands:
            if value is not None and id(value) not in seen:
                seen[id(value)] = value
    return tuple(seen.values())


Extent = tuple[str, str, int, int]
"""An operand's bytes: region, weight name ("" for activations), range [start, end)."""


def step_operands(plan: MemoryPlan, instrs: Sequence[Instruction]) -> Operands:
    """Group the operands of `instrs` (a step's instructions and epilogue) by overlapping bytes
    (a view is a contiguous window, and a kernel touches no byte of an operand outside it): within
    a region, operands whose byte ranges intersect (or start together, so an empty one goes with
    the one it sits on) join one group; operands of different weights never do (placeholders are
    bound to arrays of their own per run, a constant may leave the region, module.py). A group's
    anchor is its lowest byte."""
    values = distinct_operands(instrs)
    extents: list[Extent] = []
    for value in values:
        region, start = plan.address(value)
        name = base_of(value).name if region != "activations" else ""
        extents.append((region, name, start, start + value.type.nbytes))
    first_of = _merged(extents)
    numbers: dict[Extent, int] = {}
    buffers: list[str] = []
    places = []
    for value, extent in zip(values, extents):
        first = first_of[extent]
        if first not in numbers:
            numbers[first] = len(numbers)
            buffers.append(base_of(value).name)
        places.append((numbers[first], extent[2] - first[2]))
    anchors = tuple(Anchor(region, start, buffer) for (region, _, start, _), buffer in zip(numbers, buffers))
    return Operands(values, anchors, tuple(places))


def _merged(extents: list[Extent]) -> dict[Extent, Extent]:
    """Each extent's group, named by the group's first extent in address order."""
    regions: dict[tuple[str, str], list[Extent]] = {}
    for extent in dict.fromkeys(extents):
        regions.setdefault(extent[:2], []).append(extent)
    first_of: dict[Extent, Extent] = {}
    for members in regions.values():
        members.sort(key=lambda e: (e[2], e[3]))
        first, end = members[0], -1
        for extent in members:
            if not (extent[2] < end or extent[2] == first[2]):
                first = extent
            end = max(end, extent[3])
            first_of[extent] = first
    return first_of


def signature(instrs: Sequence[Instruction], epilogue: Sequence[Instruction] | None,
              unstored: frozenset[int], operands: Operands) -> Hashable:
    """What a step's kernel is built from, without names or addresses: equal signatures (with the
    same kernel builder) give the same code."""
    position = {id(v): i for i, v in enumerate(operands.values)}

    def instruction(instr: Instruction) -> tuple:
        return instr.kind, _frozen(instr.attrs), tuple(None if v is None else position[id(v)] for v in instr.operands)

    return (tuple(map(instruction, instrs)), None if epilogue is None else tuple(map(instruction, epilogue)),
            unstored, tuple(map(_structure, operands.values)), operands.places)


def _structure(value: Value) -> tuple:
    """A value as a kernel sees it, not its name: a constant (and whether its data is known, so it
    can be packed), or bytes reached through a pointer: an activation, an input, an output, or a
    view of any of these or of a constant (kernels pack only a weight that is itself an operand, and
    where a view lies in its base is the operand's place). So a convolution reading a view of a
    bigger buffer the allocator reused shares the kernel of one reading a buffer of its own:
    resnet50 built 6 of its 50 functions (18% of its LLVM module) twice for that alone."""
    if isinstance(value, Weight) and value.role == "constant":
        return "constant", value.type, value.value is not None
    return "buffer", value.type


def _frozen(attrs: dict[str, Any]) -> tuple:
    return tuple((name, (v.dtype.str, v.shape, v.tobytes()) if isinstance(v, np.ndarray) else v)
                 for name, v in attrs.items())
