"""dead-store: remove instructions whose results nobody reads.

    %a = allocactivation {type=T}
    %r = relu @out %a, @in %x           ->   %a = allocactivation {type=T}
    %d = deallocactivation @out %a           %d = deallocactivation @out %a

An instruction is dead when everything it writes is an activation that no later
instruction reads (through any view): output weights are what the program is
for, and an @inout operand means the instruction has an effect on a buffer it
also reads. One backward sweep suffices: it sees every read that remains after
the instructions below were removed.
"""
from __future__ import annotations

from ...passes.manager import Pass
from ..function import Instruction, IRFunction, base_of
from ..instructions import OperandKind
from .buffers import STRUCTURAL, is_activation
from .registry import IR_PASSES


def is_dead(instr: Instruction, read_later: set[int]) -> bool:
    """Whether `instr` writes only activations nothing after it reads."""
    pairs = instr.operand_pairs()
    if any(d is OperandKind.INOUT for _, d in pairs):
        return False
    written = [base_of(v) for v, d in pairs if d is OperandKind.OUT]
    return bool(written) and all(is_activation(b) and id(b) not in read_later for b in written)


@IR_PASSES.register
class DeadStore(Pass):
    """Drop instructions whose destinations are never read and are not outputs."""

    name = "dead-store"

    def run(self, function: IRFunction) -> bool:
        read_later: set[int] = set()
        changed = False
        for instr in reversed(list(function.instructions)):
            if instr.kind in STRUCTURAL:
                continue
            if is_dead(instr, read_later):
                function.remove(instr)
                changed = True
                continue
            read_later.update(id(base_of(v)) for v, d in instr.operand_pairs() if d.reads)
        return changed
