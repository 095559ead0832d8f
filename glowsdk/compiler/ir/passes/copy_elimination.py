"""copy-elimination: a copy goes when its source can live in the destination all along, or
when the destination's readers can read the source instead (paper 3.5).

    %a = allocactivation {type=T}
    %w = relu @out %a, @in %x                 ->   %w = relu @out %y, @in %x
    %c = copy @out %y, @in %a

    %b = allocactivation {type=T}
    %c = copy @out %b, @in %a                 ->   (users of %b read %a)

Retargeting the source needs it to be an activation (or a full-size view of one,
e.g. a peeled reshape: its writers then write a view of the destination) that
nothing writes after the copy; the destination must exist before the source's
first write, and nothing but the copy may touch the destination's bytes while the
source lives (so a Save's producers write the output weight directly, and later
readers of the saved value read it there). Forwarding the source needs the
destination to be an activation only the copy writes, and nothing may write the
source's buffer while the destination is still read.
"""
from __future__ import annotations

from ...passes.manager import Pass
from ..function import Instruction, IRFunction, base_of, view_offset
from .buffers import (
    BufferUses,
    can_merge,
    covers_base,
    is_activation,
    merge_into,
    only_written_by,
)
from .registry import IR_PASSES


def retarget_source(function: IRFunction, copy: Instruction, uses: BufferUses) -> bool:
    """Let the copy's source live in the copy's destination from its first write on."""
    dest, source = copy.operands
    buffer = base_of(source)
    if not (is_activation(buffer) and covers_base(source)) or base_of(dest) is buffer:
        return False
    accesses, position = uses.of(buffer), uses.position[id(copy)]
    if any(a.index > position and a.direction.writes for a in accesses):
        return False  # the destination must keep the value the copy saw
    lifetime = (accesses[0].index - 1, accesses[-1].index + 1)
    if uses.touched_between(dest, *lifetime, besides=copy) or not can_merge(uses, buffer, dest):
        return False
    orphans = list(uses.views.get(id(buffer), []))
    merge_into(function, buffer, dest, uses)
    uses.remove(copy)  # now a copy of the destination's bytes onto themselves
    for view in reversed(orphans):
        if not uses.users(view):
            uses.remove(view)
    return True


def forward_source(function: IRFunction, copy: Instruction, uses: BufferUses) -> bool:
    """Make the readers of the copy's destination read its source instead."""
    dest, source = copy.operands
    position = uses.position[id(copy)]
    if not (is_activation(dest) and only_written_by(uses, dest, copy)) or uses.first_user(dest) < position:
        return False
    last_read = max(a.index for a in uses.of(dest))
    if any(position < a.index <= last_read for a in uses.writes(source)):
        return False
    merge_into(function, dest, source, uses)
    uses.remove(copy)  # now a copy of the source onto itself
    return True


def is_noop(copy: Instruction) -> bool:
    """A copy of bytes onto themselves."""
    dest, source = copy.operands
    return base_of(dest) is base_of(source) and view_offset(dest) == view_offset(source)


@IR_PASSES.register
class CopyElimination(Pass):
    """Remove copies by retargeting writers or forwarding sources."""

    name = "copy-elimination"

    def run(self, function: IRFunction) -> bool:
        changed = False
        uses = BufferUses(function)
        for copy in [i for i in function.instructions if i.kind == "Copy"]:
            if is_noop(copy):
                uses.remove(copy)
                changed = True
                continue
            changed |= retarget_source(function, copy, uses) or forward_source(function, copy, uses)
        return changed
