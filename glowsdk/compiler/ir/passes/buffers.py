"""What the IR passes need to know about buffers, and the one rewrite most of them share.

Every legality question the memory passes ask is about a *base buffer* (a weight
or an activation), never about a view: a write through a view writes its base,
and a base is live while any view of it is used. `BufferUses` indexes, for each
base, which instructions read or write it and where, reading only the operand
directions (@in/@out/@inout) of the instruction records; allocs, deallocs and
tensorviews move no data, so they are not accesses.

`merge_into` is the rewrite behind peeling views, copy elimination, in-place
computation and buffer sharing: an activation disappears and its users name
another value instead, whose base then lives as long as both did.
"""
from __future__ import annotations

from typing import NamedTuple

from ..function import Instruction, IRFunction, Value, Weight, base_of, view_offset
from ..instructions import OperandKind

STRUCTURAL = ("AllocActivation", "DeallocActivation", "TensorView")
"""Instruction kinds that only mark lifetimes or name memory: they move no data."""


def is_activation(value: Value | None) -> bool:
    return isinstance(value, Instruction) and value.kind == "AllocActivation"


def covers_base(value: Value) -> bool:
    """Whether `value` names all the bytes of its base buffer (the base itself, or a full-size view)."""
    return view_offset(value) == 0 and value.type.nbytes == base_of(value).type.nbytes


class Access(NamedTuple):
    """One data access: instruction `instr` (at `index`) reads or writes `value`'s base."""

    index: int
    instr: Instruction
    value: Value
    direction: OperandKind


class BufferUses:
    """Positions, data accesses, views and deallocs of the buffers of one function.

    A snapshot: rebuild it after changing the function.
    """

    def __init__(self, function: IRFunction) -> None:
        self.function = function
        self.position: dict[int, int] = {}
        self.accesses: dict[int, list[Access]] = {}
        self.views: dict[int, list[Instruction]] = {}
        self.dealloc: dict[int, Instruction] = {}
        self.named_first: dict[int, int] = {}
        for index, instr in enumerate(function.instructions):
            self.position[id(instr)] = index
            for value in instr.operands:
                self.named_first.setdefault(id(value), index)
            kind = instr.kind
            if kind == "TensorView":
                self.views.setdefault(id(base_of(instr)), []).append(instr)
            elif kind == "DeallocActivation":
                self.dealloc[id(instr.operands[0])] = instr
            elif kind != "AllocActivation":
                for value, direction in instr.operand_pairs():
                    access = Access(index, instr, value, direction)
                    self.accesses.setdefault(id(base_of(value)), []).append(access)

    def of(self, value: Value) -> list[Access]:
        """The data accesses of `value`'s base, in program order."""
        return self.accesses.get(id(base_of(value)), [])

    def writes(self, value: Value) -> list[Access]:
        return [a for a in self.of(value) if a.direction.writes]

    def defined_at(self, value: Value) -> int:
        """Where `value` comes into being: -1 for a weight, else its instruction's position."""
        return -1 if isinstance(value, Weight) else self.position[id(value)]

    def first_user(self, value: Value) -> int:
        """The position of the first instruction naming `value` (a view of it comes later still)."""
        return self.named_first.get(id(value), len(self.function.instructions))

    def touched_between(self, value: Value, after: int, before: int, besides: Instruction | None = None) -> bool:
        """Whether an instruction (other than `besides`) accesses bytes of `value` strictly between
        two positions."""
        return any(after < a.index < before and a.instr is not besides and overlap(a.value, value)
                   for a in self.of(value))


def overlap(a: Value, b: Value) -> bool:
    """Whether two values (of one base buffer) share a byte."""
    start_a, start_b = view_offset(a), view_offset(b)
    return start_a < start_b + b.type.nbytes and start_b < start_a + a.type.nbytes


def only_written_by(uses: BufferUses, alloc: Instruction, instr: Instruction) -> bool:
    """Whether `instr` is the single data access writing `alloc`, and writes it whole (not via a view)."""
    writes = uses.writes(alloc)
    return len(writes) == 1 and writes[0].instr is instr and writes[0].value is alloc \
        and writes[0].direction is OperandKind.OUT


def can_merge(uses: BufferUses, drop: Instruction, keep: Value) -> bool:
    """Whether every user of activation `drop` comes after `keep` (and its base) exist."""
    defined = max(uses.defined_at(keep), uses.defined_at(base_of(keep)))
    return uses.first_user(drop) > defined


def merge_into(function: IRFunction, drop: Instruction, keep: Value, uses: BufferUses) -> None:
    """Make the users of activation `drop` use `keep` instead, and remove `drop`.

    `uses` describes `function` as it is. The caller has checked that the data flow
    allows the merge, and `can_merge`. `keep`'s base, if an activation, then lives
    at least as long as `drop` did; a `keep` of another type becomes a view with
    `drop`'s type and name, just before `drop`'s first user.
    """
    first_user = function.instructions[uses.first_user(drop)]
    dropped_end = uses.dealloc.get(id(drop))
    kept_end = uses.dealloc.get(id(base_of(keep)))
    if kept_end is not None:
        if dropped_end is None:
            function.remove(kept_end)
        elif uses.position[id(kept_end)] < uses.position[id(dropped_end)]:
            move_before(function, kept_end, dropped_end)
    if dropped_end is not None:
        function.remove(dropped_end)
    function.remove(drop)
    if keep.type != drop.type:
        keep = function.create("TensorView", [keep], name=drop.name, at=function.instructions.index(first_user),
                               type=drop.type, offset=0)
    function.replace_operand(drop, keep)


def move_before(function: IRFunction, instr: Instruction, anchor: Instruction) -> None:
    """Move `instr` to just before `anchor`, keeping its name."""
    function.instructions.remove(instr)
    function.instructions.insert(function.instructions.index(anchor), instr)


def remove_unused_views(function: IRFunction) -> bool:
    """Drop tensorviews nothing uses (innermost first); return whether any went."""
    changed = False
    for instr in reversed(list(function.instructions)):
        if instr.kind == "TensorView" and not function.users(instr):
            function.remove(instr)
            changed = True
    return changed
