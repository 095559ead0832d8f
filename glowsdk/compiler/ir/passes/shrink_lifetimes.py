"""shrink-lifetimes: every activation lives only from its first use to its last.

    %a = allocactivation            %x = conv ...
    %x = conv ...                   %a = allocactivation
    %r = relu @out %a, ...    ->    %r = relu @out %a, ...
    %y = conv @in %a ...            %y = conv @in %a ...
    %z = ...                        %d = deallocactivation @out %a
    %d = deallocactivation @out %a  %z = ...

IRGen allocates each buffer just before its producer and frees everything at the
end; the allocator gives two buffers the same bytes only when their alloc..dealloc
intervals are disjoint, so those intervals must be as tight as the data flow
allows. The program is rebuilt around the instructions that move data (kept in
order): each alloc lands right before the first of them that uses the buffer
(directly or through a view), each tensorview right before the first that uses it,
and each dealloc right after the last. A buffer or view nothing uses stays next
to where it was.
"""
from __future__ import annotations

from ...passes.manager import Pass
from ..function import Instruction, IRFunction
from .buffers import STRUCTURAL
from .registry import IR_PASSES


def first_and_last_uses(work: list[Instruction]) -> tuple[dict[int, int], dict[int, int]]:
    """The index in `work` of the first and the last instruction using each value, where using a
    view uses its source too (and so, in the end, its base buffer)."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for index, instr in enumerate(work):
        for value in instr.operands:
            while value is not None:
                first.setdefault(id(value), index)
                last[id(value)] = index
                value = value.operands[0] if isinstance(value, Instruction) and value.kind == "TensorView" else None
    return first, last


@IR_PASSES.register
class ShrinkLifetimes(Pass):
    """Sink allocs and views to their first use, hoist deallocs to after the last."""

    name = "shrink-lifetimes"

    def run(self, function: IRFunction) -> bool:
        work = [i for i in function.instructions if i.kind not in STRUCTURAL]
        first, last = first_and_last_uses(work)
        before: list[list[Instruction]] = [[] for _ in range(len(work) + 1)]
        after: list[list[Instruction]] = [[] for _ in range(len(work))]
        anchor = 0  # the data-moving instruction an unused buffer or view stays in front of
        slot: dict[int, int] = {}
        for instr in function.instructions:
            if instr.kind not in STRUCTURAL:
                anchor += 1
                continue
            if instr.kind == "DeallocActivation":
                buffer = instr.operands[0]
                if id(buffer) in last:
                    after[last[id(buffer)]].append(instr)
                else:
                    before[slot.get(id(buffer), anchor)].append(instr)
                continue
            # an unused buffer stays where it was; an unused view goes with its source
            home = anchor if instr.kind == "AllocActivation" else slot.get(id(instr.operands[0]), anchor)
            slot[id(instr)] = first.get(id(instr), home)
            before[slot[id(instr)]].append(instr)
        order: list[Instruction] = []
        for index in range(len(work) + 1):
            order += sorted(before[index], key=_structural_rank)
            if index < len(work):
                order.append(work[index])
                order += after[index]
        changed = order != function.instructions
        function.instructions[:] = order
        return changed


def _structural_rank(instr: Instruction) -> int:
    """In front of one instruction: allocs first, then views of them, then deallocs of unused buffers."""
    return ("AllocActivation", "TensorView", "DeallocActivation").index(instr.kind)
