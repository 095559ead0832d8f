"""share-buffers: an activation takes over the buffer of one of the same size that died just before.

    %a = allocactivation {type=T}             %a = allocactivation {type=T}
    ... last use of %a ...                    ... last use of %a ...
    %da = deallocactivation @out %a     ->    %y = conv @out %a, ...
    %b = allocactivation {type=T}             (users of %b use %a)
    %y = conv @out %b, ...
    %db = deallocactivation @out %b           %da = deallocactivation @out %a

Legal by the operand directions alone: every access of %a comes before the first
access of %b, and that first access writes all of %b (@out), so no value of %a is
read after %b's bytes are written and %b never reads %a's leftovers.

Worth doing only where it costs the allocator nothing: the allocator already
gives the bytes of dead buffers to later ones, and a merged buffer also occupies
the gap between the two lifetimes. So %b takes %a's buffer only when no other
activation starts inside that gap (no other buffer could have used %a's bytes
there). What is live inside the gap was live at %a's last use, so the most bytes
live at once (the allocator's lower bound) stays the same, with fewer buffers.
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from ...passes.manager import Pass
from ..function import Instruction, IRFunction
from ..instructions import OperandKind
from .buffers import BufferUses, can_merge, covers_base, merge_into
from .registry import IR_PASSES


@dataclass
class Span:
    """An activation's data accesses: where the first and the last are."""

    alloc: Instruction
    first: int
    last: int


def spans(function: IRFunction, uses: BufferUses) -> list[Span]:
    """Every accessed activation, in the order of its first access."""
    found = []
    for alloc in function.allocs():
        accesses = uses.of(alloc)
        if accesses:
            found.append(Span(alloc, accesses[0].index, accesses[-1].index))
    return sorted(found, key=lambda s: (s.first, s.last))


def starts_fresh(span: Span, uses: BufferUses) -> bool:
    """Whether the buffer's first access writes all of it and reads nothing of it."""
    first = [a for a in uses.of(span.alloc) if a.index == span.first]
    return all(a.direction is OperandKind.OUT and covers_base(a.value) for a in first)


def pick_merges(function: IRFunction, uses: BufferUses) -> list[tuple[Instruction, Instruction]]:
    """(buffer, the earlier buffer it takes over) pairs, chosen in the order buffers start."""
    order = spans(function, uses)
    starts = [s.first for s in order]
    groups: list[Span] = []  # one per surviving buffer: its alloc and the last access of all merged in
    merges = []
    for span in order:
        # the latest start before this one: only a buffer that died after it is a candidate
        earlier = bisect_left(starts, span.first)
        previous = starts[earlier - 1] if earlier else -1
        size = span.alloc.type.nbytes
        candidates = [g for g in groups if g.alloc.type.nbytes == size and previous <= g.last < span.first]
        if candidates and starts_fresh(span, uses):
            group = max(candidates, key=lambda g: g.last)  # the buffer that died last
            if can_merge(uses, span.alloc, group.alloc):
                merges.append((span.alloc, group.alloc))
                group.last = span.last
                continue
        groups.append(Span(span.alloc, span.first, span.last))
    return merges


@IR_PASSES.register
class ShareBuffers(Pass):
    """Merge same-size activations whose lifetimes meet without a gap another buffer could use."""

    name = "share-buffers"

    def run(self, function: IRFunction) -> bool:
        uses = BufferUses(function)
        merges = pick_merges(function, uses)
        for drop, keep in merges:
            merge_into(function, drop, keep, uses)
        return bool(merges)
