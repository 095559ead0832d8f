"""dead-alloc: remove activations nothing uses but their deallocation, and views nothing uses.

    %a = allocactivation {type=T}
    %v = tensorview @in %a {...}        ->   (nothing)
    %d = deallocactivation @out %a

What dead-store and the other rewrites leave behind; an unused buffer would
still take room in the allocator's plan.
"""
from __future__ import annotations

from ...passes.manager import Pass
from ..function import IRFunction
from .buffers import BufferUses, remove_unused_views
from .registry import IR_PASSES


@IR_PASSES.register
class DeadAlloc(Pass):
    """Drop unused tensorviews, then allocs used only by their deallocs."""

    name = "dead-alloc"

    def run(self, function: IRFunction) -> bool:
        uses = BufferUses(function)
        changed = remove_unused_views(uses)
        for alloc in function.allocs():
            users = list(uses.users(alloc))
            if all(u.kind == "DeallocActivation" for u in users):
                for user in users:
                    uses.remove(user)
                uses.remove(alloc)
                changed = True
        return changed
