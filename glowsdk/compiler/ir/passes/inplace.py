"""inplace: an element-wise instruction writes its result over a source it reads for the last time.

    %b = allocactivation {type=T}
    %r = relu @out %b, @in %a                 ->   %r = relu @out %a, @in %a
    (%a is not used after %r)                      (users of %b use %a)

An element-wise kernel reads element i of its sources only to write element i of
its destination, so the destination may share the bytes of a source of the same
type (the instruction record says so: `inplace`). Legal when the destination is
an activation only this instruction writes, the source's base is an activation
(weights belong to the caller) that nothing accesses after this instruction, and
no other source of the instruction reads that base at another place.
"""
from __future__ import annotations

from ...passes.manager import Pass
from ..function import Instruction, IRFunction, Value, base_of, view_offset
from ..instructions import OperandKind
from .buffers import BufferUses, can_merge, is_activation, merge_into, only_written_by
from .registry import IR_PASSES


def reusable_source(instr: Instruction, dest: Instruction, uses: BufferUses) -> Value | None:
    """A source of `instr` whose bytes `dest` may take over, or None."""
    position = uses.position[id(instr)]
    sources = [v for v, d in instr.operand_pairs() if d is OperandKind.IN]
    for source in sources:
        base = base_of(source)
        if source.type != dest.type or not is_activation(base):
            continue
        if uses.last_access(base) > position:
            continue
        same_place = (view_offset(source), source.type)
        if all(base_of(v) is not base or (view_offset(v), v.type) == same_place for v in sources):
            return source
    return None


def reuse(function: IRFunction, instr: Instruction, uses: BufferUses) -> bool:
    """Put one destination of `instr` over a source if that is legal; return whether one was."""
    for dest, direction in instr.operand_pairs():
        if direction is not OperandKind.OUT or not is_activation(dest):
            continue
        if not only_written_by(uses, dest, instr) or uses.first_user(dest) < uses.position[id(instr)]:
            continue
        source = reusable_source(instr, dest, uses)
        if source is not None and can_merge(uses, dest, source):
            merge_into(function, dest, source, uses)
            return True
    return False


@IR_PASSES.register
class InPlace(Pass):
    """Element-wise destinations reuse a dying source's buffer.

    One forward sweep finds everything: putting a later instruction in place only
    adds accesses after it, so it never lets an earlier source die sooner. The
    buffer index follows every merge, so the sweep is linear in the function.
    """

    name = "inplace"

    def run(self, function: IRFunction) -> bool:
        changed = False
        uses = BufferUses(function)
        for instr in list(function.instructions):
            while instr.spec.inplace and reuse(function, instr, uses):
                changed = True
        return changed
