"""peel-views: an instruction that only re-types or windows its source's bytes becomes a tensorview.

    %b = allocactivation {type=float32<6>}            %r = tensorview @in %a {type=float32<6>, offset=0}
    %r = reshape @out %b, @in %a {shape=[6]}    ->    (users of %b read %r)

Every buffer and view of the IR is contiguous in row-major order, so a Reshape
(the graph's Reshape, Flatten, Squeeze, Unsqueeze), a Reinterpret (the same raw
integers under another scale and offset) and a Slice that picks one contiguous
byte range (a range of the first axis that is not 1, whole dims after it) name
bytes that already exist: the copy and its destination buffer go.

Legal when the destination is an activation written only by this instruction and
used only after it, and nothing writes the source's base after it (the view would
see the change; the copy would not).
"""
from __future__ import annotations

import math

from ...passes.manager import Pass
from ..function import Instruction, IRFunction
from .buffers import BufferUses, is_activation, merge_into, only_written_by
from .registry import IR_PASSES


def contiguous_window(instr: Instruction) -> int | None:
    """The byte offset in its source of what `instr` produces, if that is one contiguous range."""
    if instr.kind in ("Reshape", "Reinterpret"):
        return 0
    if instr.kind != "Slice" or instr.type.size == 0 or instr.type.rank == 0:
        return None
    shape = instr.input.type.shape
    picked = [range(s, e, step) for s, e, step in zip(instr.starts, instr.ends, instr.steps)]
    # Axes before the first one picking more than one index pick one index; the axes
    # after it are taken whole, in order; that axis itself is a run of increasing indices.
    first = next((k for k, r in enumerate(picked) if len(r) > 1), len(picked) - 1)
    if len(picked[first]) > 1 and picked[first].step != 1:
        return None
    if any(picked[k] != range(shape[k]) for k in range(first + 1, len(shape))):
        return None
    element = sum(r[0] * math.prod(shape[k + 1:]) for k, r in enumerate(picked[:first + 1]))
    return element * instr.type.elem.itemsize


def peel(function: IRFunction, instr: Instruction, offset: int, uses: BufferUses) -> bool:
    """Replace `instr` by a view of its source if that is legal; return whether it was."""
    dest, source = instr.operands[0], instr.input
    position = uses.position[id(instr)]
    if not (is_activation(dest) and only_written_by(uses, dest, instr)):
        return False
    if uses.first_user(dest) < position:
        return False
    if any(a.index > position for a in uses.writes(source)):
        return False
    view = uses.replace_with_view(instr, source, dest.type, offset)  # in its place, with its name
    merge_into(function, dest, view, uses)
    return True


@IR_PASSES.register
class PeelViews(Pass):
    """Reshape, Reinterpret and contiguous Slice become tensorviews of their sources."""

    name = "peel-views"

    def run(self, function: IRFunction) -> bool:
        changed = False
        uses = BufferUses(function)
        for instr in list(function.instructions):
            offset = contiguous_window(instr)
            if offset is not None and peel(function, instr, offset, uses):
                changed = True
        return changed
