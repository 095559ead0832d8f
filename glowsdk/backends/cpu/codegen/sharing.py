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
    the anchor of each group, and each value's (group, byte offset from the group's anchor);
    `registers`: the epilogue's values held in vectors only, never in memory (`epilogue_registers`),
    by id, each the number of the vector holding it (these are no operands)."""

    def __init__(self, values: tuple[Value, ...], anchors: tuple[Anchor, ...],
                 places: tuple[tuple[int, int], ...], registers: dict[int, int] | None = None) -> None:
        self.values, self.anchors, self.places = values, anchors, places
        self.registers = registers or {}
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


def same_bytes(plan: MemoryPlan, a: Value, b: Value) -> bool:
    """Whether two values are the same elements in the same order: same region, offset, element
    kind and count (a reshaping view of a result, such as a MatMul's rows seen as N x H x W x C
    by the GELU after it, holds the same elements at the same flat indices)."""
    return plan.address(a) == plan.address(b) and a.type.elem is b.type.elem and a.type.size == b.type.size


def epilogue_registers(plan: MemoryPlan, result: Value, epilogue: Sequence[Instruction]) -> list[Value]:
    """The tensors an epilogue on `result` holds in vectors: the result, then each other tensor it
    writes (one per distinct bytes). A kernel stores only the result (epilogue.py): the others
    exist in vectors alone, wherever the allocator placed them."""
    registers = [result]
    for instr in epilogue:
        if not any(same_bytes(plan, instr.operands[0], v) for v in registers):
            registers.append(instr.operands[0])
    return registers


def held_in(plan: MemoryPlan, registers: Sequence[Value], value: Value) -> int | None:
    """The number of the vector among `registers` holding `value`'s elements, or None (read from memory)."""
    return next((i for i, v in enumerate(registers) if same_bytes(plan, value, v)), None)


def step_operands(plan: MemoryPlan, instrs: Sequence[Instruction],
                  epilogue: Sequence[Instruction] | None = None) -> Operands:
    """Group the operands of `instrs` and `epilogue` (a step's instructions and the element-wise ones
    stacked onto its store) by overlapping bytes, but for the epilogue's values held in vectors only
    (those are left out: where the allocator put them changes no code, and an efficientnet_b0
    SiLU's -x, placed on the convolution's input in one block and apart in the next, kept 8 pairs
    of alike convolutions from sharing a kernel)
    (a view is a contiguous window, and a kernel touches no byte of an operand outside it): within
    a region, operands whose byte ranges intersect (or start together, so an empty one goes with
    the one it sits on) join one group; operands of different weights never do (placeholders are
    bound to arrays of their own per run, a constant may leave the region, module.py). A group's
    anchor is its lowest byte."""
    epilogue = tuple(epilogue or ())
    registers: dict[int, int] = {}
    if epilogue:
        held = epilogue_registers(plan, instrs[0].operands[0], epilogue)
        for instr in epilogue:
            for value in instr.operands:
                index = held_in(plan, held, value) if value is not None else None
                if index:
                    registers[id(value)] = index
        for value in distinct_operands(instrs):
            registers.pop(id(value), None)
    values = tuple(v for v in distinct_operands((*instrs, *epilogue)) if id(v) not in registers)
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
    return Operands(values, anchors, tuple(places), registers)


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
    position: dict[int, Hashable] = {id(v): i for i, v in enumerate(operands.values)}
    position.update((key, ("vector", index)) for key, index in operands.registers.items())

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
