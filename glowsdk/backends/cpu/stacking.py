"""Operator stacking (paper 5.2): runs of element-wise instructions become one loop.

Walking the program in order, consecutive element-wise instructions (any kinds
with a `scalar` in the kernel table, in any combination) of one result shape
join a stack, and the element-wise kernel computes the whole stack per element
in one loop (elementwise.py), so intermediate results stay in registers instead
of making a round trip through memory per instruction. The composition is
generic: nothing here knows any kind by name.

A stack keeps program semantics when every element is independent of the
others: an instruction may join only if each destination of the stack either
is exactly another operand of it (same bytes, same shape: the in-place and the
producer-consumer case, read and written at the same element) or shares no
byte with it. A destination need not be stored when a later member overwrites
it, or when no instruction after the stack reads its buffer.

A compute kernel that can apply element-wise instructions as it stores (a GEMM
convolution or matmul, epilogue.py) takes the ones right after it that work in
place on its result, e.g. the Add of a residual and the ReLU after a Conv, or in
tensors nothing reads afterwards (a HardSwish's).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from ...compiler.ir.function import Instruction, base_of
from ...compiler.ir.instructions import OperandKind
from ...compiler.ir.program import Program
from .codegen.module import Step
from .kernels import KERNELS
from .kernels.elementwise import is_stackable
from .kernels.epilogue import epilogue_length

STRUCTURAL = frozenset({"AllocActivation", "DeallocActivation", "TensorView"})
"""Instructions that only mark lifetimes or name bytes: no code, no barrier to a stack."""

Span = tuple[str, int, int, tuple[int, ...], object]
"""An operand's region, byte range [start, end), shape and element kind."""


def plan_steps(program: Program, stacking: bool = True) -> list[Step]:
    """The kernels of `program` in order: stacks of element-wise instructions (when `stacking`),
    compute instructions with the element-wise ones they can apply as they store (their
    epilogue), every other compute instruction alone."""
    instructions = program.ir.instructions
    last_read = _last_reads(instructions)
    steps: list[Step] = []
    stack: list[Instruction] = []
    taken: set[int] = set()
    for position, instr in enumerate(instructions):
        if instr.kind in STRUCTURAL or id(instr) in taken:
            continue
        if stacking and stack and _joins(program, stack, instr):
            stack.append(instr)
            continue
        if stack:
            steps.append(_finish(program, stack, last_read))
            stack = []
        if stacking and is_stackable(instr.kind) and instr.types[0].size:
            stack = [instr]
        elif stacking and KERNELS[instr.kind].takes_epilogue(instr):
            following = _following(instructions, position)
            length = epilogue_length(program, instr.operands[0], following,
                                     lambda value, end: _dead_after(program, value, end),
                                     rows=KERNELS[instr.kind].epilogue_rows)
            epilogue = tuple(i for _, i in following[:length])
            taken.update(id(i) for i in epilogue)
            steps.append(Step((instr,), epilogue=epilogue))
        else:
            steps.append(Step((instr,)))
    if stack:
        steps.append(_finish(program, stack, last_read))
    return [step if step.epilogue else replace(step, epilogue=None) for step in steps]


EPILOGUE_LOOKAHEAD = 16
"""Element-wise instructions after a compute kernel considered for its epilogue, at most."""


def _following(instructions: list[Instruction], position: int) -> list[tuple[int, Instruction]]:
    """The (position, instruction) of the element-wise instructions right after `position` (lifetime
    markers skipped), up to the first other one."""
    found = []
    for later in range(position + 1, len(instructions)):
        instr = instructions[later]
        if instr.kind in STRUCTURAL:
            continue
        if not is_stackable(instr.kind) or len(found) == EPILOGUE_LOOKAHEAD:
            break
        found.append((later, instr))
    return found


def _dead_after(program: Program, value, position: int) -> bool:
    """Whether no instruction after `position` reads the bytes of activation `value` before one
    overwrites them all (a later kernel may reuse the buffer) or the buffer is freed."""
    if not isinstance(base_of(value), Instruction):
        return False
    span = _span(program, value)
    for instr in program.ir.instructions[position + 1:]:
        if instr.kind == "DeallocActivation" and base_of(instr.operands[0]) is base_of(value):
            return True
        if instr.kind in STRUCTURAL:
            continue
        touched = [(direction, _span(program, operand)) for operand, direction in instr.operand_pairs()]
        touched = [(direction, other) for direction, other in touched if _overlap(span, other)]
        if any(direction is not OperandKind.OUT for direction, _ in touched):
            return False
        if any(other[1] <= span[1] and span[2] <= other[2] for _, other in touched):
            return True
    return True


def _span(program: Program, value) -> Span:
    region, offset = program.plan.address(value)
    return region, offset, offset + value.type.nbytes, value.type.shape, value.type.elem


def _joins(program: Program, stack: list[Instruction], instr: Instruction) -> bool:
    """Whether `instr` may run in the same per-element loop as `stack` (see the module doc)."""
    if not is_stackable(instr.kind) or instr.types[0].shape != stack[0].types[0].shape:
        return False
    members = [*stack, instr]
    dests = [_span(program, i.operands[0]) for i in members]
    operands = [_span(program, v) for i in members for v in [i.operands[0], *i.present_inputs()]]
    return all(d == o or not _overlap(d, o) for d in dests for o in operands)


def _overlap(a: Span, b: Span) -> bool:
    return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


def _finish(program: Program, stack: list[Instruction], last_read: dict[int, int]) -> Step:
    """The step of a complete stack, with the destinations that need no store."""
    end = max(program.ir.instructions.index(i) for i in stack)
    spans = [_span(program, i.operands[0]) for i in stack]
    unstored = set()
    for number, instr in enumerate(stack):
        overwritten = spans[number] in spans[number + 1:]
        base = base_of(instr.operands[0])
        dead = isinstance(base, Instruction) and last_read.get(id(base), -1) <= end
        if overwritten or dead:
            unstored.add(number)
    return Step(tuple(stack), frozenset(unstored))


def _last_reads(instructions: Iterable[Instruction]) -> dict[int, int]:
    """For each buffer (by id of its base), the position of the last instruction reading it."""
    last: dict[int, int] = {}
    for position, instr in enumerate(instructions):
        if instr.kind == "DeallocActivation":
            continue
        for value, direction in instr.operand_pairs():
            if direction is not OperandKind.OUT or instr.kind == "TensorView":
                last[id(base_of(value))] = position
    return last
