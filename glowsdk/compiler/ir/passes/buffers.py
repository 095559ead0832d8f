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

from ....graph.types import Type
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
    """One data access: instruction `instr` (at order key `index`) reads or writes `value`'s base."""

    index: int
    instr: Instruction
    value: Value
    direction: OperandKind


SPACING = 1 << 32
"""Order keys of a fresh index are multiples of this, so a view inserted between two instructions
gets a key of its own; a gap used up (32 views in one place) renumbers the whole index."""


class BufferUses:
    """Order keys, data accesses, views, deallocs and users of the buffers of one function.

    Kept accurate through the edits below (`remove`, `replace_with_view`, `insert_view`,
    `replace_all`, `move_before`, and `merge_into` built on them), so a pass builds it once and
    sweeps the function once: rebuilding it after every change made the passes quadratic (a
    50-step GRU spent minutes here). An order key says where an instruction stands: keys grow
    along the program, but are not list indices (a removal leaves the others' keys alone).
    `builds` counts full indexings, process-wide, for the compile-complexity tests.
    """

    builds = 0
    indexed = 0
    """Instructions visited by all full indexings (each build visits the whole function)."""

    def __init__(self, function: IRFunction) -> None:
        self.function = function
        self._index()

    def _index(self) -> None:
        BufferUses.builds += 1
        BufferUses.indexed += len(self.function.instructions)
        self.position: dict[int, int] = {}
        self.accesses: dict[int, list[Access]] = {}
        self.views: dict[int, list[Instruction]] = {}
        self.dealloc: dict[int, Instruction] = {}
        self.named: dict[int, list[Instruction]] = {}
        for index, instr in enumerate(self.function.instructions):
            self._add(instr, index * SPACING)

    def _add(self, instr: Instruction, key: int) -> None:
        """Index a new instruction standing at `key` (its users' lists stay in program order)."""
        self.position[id(instr)] = key
        for value in dict.fromkeys(v for v in instr.operands if v is not None):
            _insert_sorted(self.named.setdefault(id(value), []), instr, self.position)
        kind = instr.kind
        if kind == "TensorView":
            _insert_sorted(self.views.setdefault(id(base_of(instr)), []), instr, self.position)
        elif kind == "DeallocActivation":
            self.dealloc[id(instr.operands[0])] = instr
        elif kind != "AllocActivation":
            for value, direction in instr.operand_pairs():
                found = self.accesses.setdefault(id(base_of(value)), [])
                found.append(Access(key, instr, value, direction))
                if len(found) > 1 and found[-2].index > key:
                    found.sort(key=lambda a: a.index)

    # -- questions ---------------------------------------------------------------------------
    def of(self, value: Value) -> list[Access]:
        """The data accesses of `value`'s base, in program order."""
        return self.accesses.get(id(base_of(value)), [])

    def writes(self, value: Value) -> list[Access]:
        return [a for a in self.of(value) if a.direction.writes]

    def last_access(self, value: Value) -> int:
        """The order key of the last data access of `value`'s base (-1 if none)."""
        found = self.of(value)
        return found[-1].index if found else -1

    def users(self, value: Value) -> list[Instruction]:
        """The instructions naming `value` itself as an operand, in program order."""
        return self.named.get(id(value), [])

    def defined_at(self, value: Value) -> int:
        """Where `value` comes into being: -1 for a weight, else its instruction's order key."""
        return -1 if isinstance(value, Weight) else self.position[id(value)]

    def first_user(self, value: Value) -> float:
        """The order key of the first instruction naming `value` (a view of it comes later still);
        past the end when nothing does."""
        named = self.named.get(id(value))
        return self.position[id(named[0])] if named else float("inf")

    def touched_between(self, value: Value, after: int, before: int, besides: Instruction | None = None) -> bool:
        """Whether an instruction (other than `besides`) accesses bytes of `value` strictly between
        two order keys."""
        return any(after < a.index < before and a.instr is not besides and overlap(a.value, value)
                   for a in self.of(value))

    # -- edits: the function and the index together --------------------------------------------
    def remove(self, instr: Instruction) -> None:
        """Take `instr` out of the function and of the index."""
        self.function.remove(instr)
        for value in dict.fromkeys(v for v in instr.operands if v is not None):
            self.named[id(value)].remove(instr)
        if instr.kind == "TensorView":
            self.views[id(base_of(instr))].remove(instr)
        elif instr.kind == "DeallocActivation":
            del self.dealloc[id(instr.operands[0])]
        elif instr.kind != "AllocActivation":
            base_ids = {id(base_of(v)) for v, _ in instr.operand_pairs()}
            for base in base_ids:
                self.accesses[base] = [a for a in self.accesses[base] if a.instr is not instr]
        del self.position[id(instr)]

    def replace_with_view(self, instr: Instruction, source: Value, type_: Type, offset: int) -> Instruction:
        """Put a tensorview of `source` where `instr` stands, with its name and order key."""
        at, key, name = self.function.instructions.index(instr), self.position[id(instr)], instr.name
        self.remove(instr)
        view = self.function.create("TensorView", [source], name=name, at=at, type=type_, offset=offset)
        self._add(view, key)
        return view

    def insert_view(self, source: Value, before: Instruction, name: str, type_: Type, offset: int) -> Instruction:
        """A new tensorview of `source`, just before `before`."""
        at = self.function.instructions.index(before)
        after = self.position[id(self.function.instructions[at - 1])] if at else -SPACING
        view = self.function.create("TensorView", [source], name=name, at=at, type=type_, offset=offset)
        key = (after + self.position[id(before)]) // 2
        if key == after:
            self._index()  # this gap is used up: number the function afresh
        else:
            self._add(view, key)
        return view

    def replace_all(self, old: Value, new: Value) -> None:
        """Make every operand naming `old` name `new`; the accesses of `old`'s base (when `old` is
        a buffer) become accesses of `new`'s."""
        users = self.named.pop(id(old), [])
        named = self.named.setdefault(id(new), [])
        for instr in users:
            instr.operands = [new if v is old else v for v in instr.operands]
            if not any(u is instr for u in named):
                _insert_sorted(named, instr, self.position)
        if base_of(old) is not old:
            return
        base = id(base_of(new))
        moved = self.accesses.pop(id(old), [])
        if moved:
            moved = [a._replace(value=new) if a.value is old else a for a in moved]
            self.accesses[base] = sorted(self.accesses.get(base, []) + moved, key=lambda a: a.index)
        views = self.views.pop(id(old), [])
        if views:
            self.views[base] = sorted(self.views.get(base, []) + views, key=lambda v: self.position[id(v)])

    def move_before(self, instr: Instruction, anchor: Instruction) -> None:
        """Move structural `instr` to just before `anchor`, which the caller then removes: `instr`
        takes over its order key."""
        self.function.instructions.remove(instr)
        self.function.instructions.insert(self.function.instructions.index(anchor), instr)
        self.position[id(instr)] = self.position[id(anchor)]
        for value in dict.fromkeys(v for v in instr.operands if v is not None):
            named = self.named[id(value)]
            named.remove(instr)
            _insert_sorted(named, instr, self.position)


def _insert_sorted(instrs: list[Instruction], instr: Instruction, position: dict[int, int]) -> None:
    """Insert `instr` into `instrs` (in order-key order) where its key belongs."""
    key = position[id(instr)]
    at = len(instrs)
    while at and position[id(instrs[at - 1])] > key:
        at -= 1
    instrs.insert(at, instr)


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

    `uses` describes `function` and is kept doing so. The caller has checked that the
    data flow allows the merge, and `can_merge`. `keep`'s base, if an activation, then
    lives at least as long as `drop` did; a `keep` of another type becomes a view with
    `drop`'s type and name, just before `drop`'s first user.
    """
    first_user = uses.users(drop)[0]
    dropped_end = uses.dealloc.get(id(drop))
    kept_end = uses.dealloc.get(id(base_of(keep)))
    if kept_end is not None:
        if dropped_end is None:
            uses.remove(kept_end)
        elif uses.position[id(kept_end)] < uses.position[id(dropped_end)]:
            uses.move_before(kept_end, dropped_end)
    if dropped_end is not None:
        uses.remove(dropped_end)
    name = drop.name
    uses.remove(drop)
    if keep.type != drop.type:
        keep = uses.insert_view(keep, first_user, name, drop.type, 0)
    uses.replace_all(drop, keep)


def remove_unused_views(uses: BufferUses) -> bool:
    """Drop tensorviews nothing uses (innermost first); return whether any went."""
    changed = False
    for instr in reversed(list(uses.function.instructions)):
        if instr.kind == "TensorView" and not uses.users(instr):
            uses.remove(instr)
            changed = True
    return changed
