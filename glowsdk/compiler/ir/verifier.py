"""The IR verifier: types, operand directions, lifetimes, and reads of unwritten buffers.

Checks, naming the instruction:
- every operand is a weight or an instruction defined earlier in the program;
- operand counts and directions match the record; constants and inputs are never
  written (a backend may read an input where the caller's array holds it);
- a derived instruction's destination types are what its node type rule gives for
  its sources, so IRGen and every IR pass keep the program well-typed;
- a tensorview fits inside its source;
- an activation is used only between its allocactivation and deallocactivation,
  deallocated once, and never read before something wrote it (a write through a
  view counts for the whole buffer: views are windows, written in full by IRGen);
- an instruction reads no bytes it writes, unless it is in-place (element-wise)
  and reads exactly the bytes, with the type, it writes.
"""
from __future__ import annotations

from ...errors import GraphError
from .function import Instruction, IRFunction, Value, Weight, base_of, view_offset
from .instructions import result_types

_STRUCTURAL = ("AllocActivation", "DeallocActivation", "TensorView")


def verify_ir(function: IRFunction) -> None:
    """Raise GraphError for the first broken invariant."""
    defined: set[int] = {id(w) for w in function.weights.values()}
    alive: set[int] = set()
    dead: set[int] = set()
    written: set[int] = {id(w) for w in function.weights.values() if w.role != "output"}
    for instr in function.instructions:
        _check_shape(instr)
        _check_overlap(instr)
        for value, direction in instr.operand_pairs():
            if id(value) not in defined:
                raise instr.fail(f"uses %{value.name} before it is defined")
            base = base_of(value)
            if isinstance(base, Instruction):
                if id(base) in dead:
                    raise instr.fail(f"uses %{value.name} after its deallocactivation")
                if id(base) not in alive:
                    raise instr.fail(f"uses %{value.name}, whose buffer is not allocated here")
            if direction.writes and isinstance(base, Weight) and base.role != "output":
                raise instr.fail(f"writes the {base.role} %{base.name}")
            if direction.reads and instr.kind not in _STRUCTURAL and id(base) not in written:
                raise instr.fail(f"reads %{value.name} before anything wrote it")
        for value, direction in instr.operand_pairs():
            if direction.writes and instr.kind != "DeallocActivation":
                written.add(id(base_of(value)))
        if instr.kind == "AllocActivation":
            alive.add(id(instr))
        elif instr.kind == "DeallocActivation":
            target = instr.operands[0]
            if not (isinstance(target, Instruction) and target.kind == "AllocActivation"):
                raise instr.fail("deallocates something that is not an activation")
            alive.discard(id(target))
            dead.add(id(target))
        defined.add(id(instr))


def _check_shape(instr: Instruction) -> None:
    slots = instr.operand_slots()
    if len(slots) != len(instr.operands):
        raise instr.fail(f"has {len(instr.operands)} operands, the record declares {len(slots)}")
    for slot, value in zip(slots, instr.operands):
        if value is None and not slot.optional:
            raise instr.fail(f"operand '{slot.name}' is missing")
    if instr.kind == "TensorView":
        source = instr.operands[0]
        if instr.attrs["offset"] < 0 or instr.attrs["offset"] + instr.type.nbytes > source.type.nbytes:
            raise instr.fail(f"view {instr.type} at byte {instr.attrs['offset']} does not fit in "
                             f"%{source.name} ({source.type}, {source.type.nbytes} bytes)")
    elif instr.kind == "Copy":
        dest, source = instr.operands
        if dest.type != source.type:
            raise instr.fail(f"copies {source.type} into {dest.type}")
    elif instr.spec.node is not None:
        try:
            expected = result_types(instr)
        except GraphError:
            raise
        except (ValueError, TypeError, IndexError, KeyError) as err:
            raise instr.fail(str(err)) from None
        if expected != instr.types:
            raise instr.fail(f"writes {', '.join(map(str, instr.types))} but its sources give "
                             f"{', '.join(map(str, expected))}")
        if instr.spec.node.verify is not None:
            instr.spec.node.verify(instr)


def _check_overlap(instr: Instruction) -> None:
    """Kernels may stream: a destination must not alias a source, except element for element in place."""
    if instr.kind in _STRUCTURAL:
        return
    pairs = instr.operand_pairs()
    for i, (written, direction) in enumerate(pairs):
        for j, (read, other) in enumerate(pairs):
            if i == j or not (direction.writes and other.reads) or not _overlap(written, read):
                continue
            if not (instr.spec.inplace and view_offset(written) == view_offset(read) and written.type == read.type):
                raise instr.fail(f"writes %{written.name} over bytes of %{read.name}, which it reads")


def _overlap(a: Value, b: Value) -> bool:
    start_a, start_b = view_offset(a), view_offset(b)
    return (base_of(a) is base_of(b) and start_a < start_b + b.type.nbytes
            and start_b < start_a + a.type.nbytes)
