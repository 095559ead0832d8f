"""The element-wise kernel: one loop nest over the result computing a stack of scalar ops.

A step here is one element-wise instruction or a stack of them (stacking.py) of
one result shape. Sources broadcast (numpy rules) through zero strides, and
adjacent dims that every operand walks the same way are merged, so a same-shape
stack is one flat loop that LLVM vectorises. Per element, the instructions run
in program order: a source that an earlier instruction of the step wrote at the
same address is taken from that instruction's result without touching memory,
and a destination is stored unless the step says nobody reads it afterwards.
A source the innermost loop does not walk (a row's maximum in a softmax, a
squeeze-and-excitation channel scale, a scalar) is read once before that loop.
Threads share a large step by its outermost loop.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

from llvmlite import ir

from ..codegen.kinds import i64, load, store
from ..codegen.loops import linear_index, loop, loop_nest, merge_dims, row_major_strides
from ..codegen.module import KernelContext, Step
from .scalar import SCALARS
from .table import KERNELS, register

SHARED_ELEMENTS, SHARED_OUTER = 1 << 12, 16
"""A step of at least this many elements, whose outermost loop has at least this many
iterations, can be shared among threads by that loop (whether it is worth sharing is
threads.serial_nanoseconds's call): mobilenet_v3's hard-swish and squeeze-and-excitation steps
over 7 x 7 and 14 x 14 planes are 20 to 30 thousand elements, 3 to 12 us on one thread."""
Key = tuple[str, int, tuple[int, ...], Any]
"""Where an operand's elements are: region, byte offset, shape, element kind."""


def operand_key(ctx: KernelContext, value: Any) -> Key:
    region, offset = ctx.owner.program.plan.address(value)
    return region, offset, value.type.shape, value.type.elem


def broadcast_strides(shape: Sequence[int], out: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a row-major `shape` read as `out` (numpy broadcasting: 0 where it repeats)."""
    padded = (1,) * (len(out) - len(shape)) + tuple(shape)
    strides = (0,) * (len(out) - len(shape)) + row_major_strides(shape)
    return tuple(0 if size != full else stride for size, full, stride in zip(padded, out, strides))


def merged_layout(out: Sequence[int], shapes: Sequence[Sequence[int]]) -> tuple[list[int], list[list[int]]]:
    """Loop dims over `out` and each operand's (broadcast) stride per dim, merged (see merge_dims)."""
    return merge_dims(out, [broadcast_strides(shape, out) for shape in shapes])


def build_elementwise(ctx: KernelContext, step: Step) -> None:
    """The loop computing every instruction of `step` per element."""
    builder = ctx.builder
    out = step.instrs[0].types[0].shape
    operands = _distinct_operands(ctx, step)
    dims, strides = merged_layout(out, [v.type.shape for v in operands.values()])
    pointers = {key: ctx.address(value) for key, value in operands.items()}
    layout = dict(zip(operands, strides))
    shared = ctx.share(dims[0]) if math.prod(dims) >= SHARED_ELEMENTS and dims[0] >= SHARED_OUTER else None
    with _outer_and_inner(builder, dims, shared) as (outer, inner_loop):
        # A source the innermost loop does not walk (a broadcast row max, a scalar) is read before
        # that loop: LLVM does not vectorise a loop that stores into the region such a load reads.
        # (One element merges into no loop dims at all: nothing to hoist.)
        invariant = {key: load(builder, pointers[key], value.type.elem,
                               linear_index(builder, [*outer, i64(0)], layout[key]))
                     for key, value in operands.items() if dims and math.prod(dims) and layout[key][-1] == 0
                     and key not in {operand_key(ctx, i.operands[0]) for i in step.instrs}}
        with inner_loop() as indices:
            _compute(ctx, step, indices, pointers, layout, invariant)


@contextmanager
def _outer_and_inner(builder: ir.IRBuilder, dims: list[int],
                     shared: tuple[ir.Value, ir.Value] | None) -> Iterator[tuple[list[ir.Value], Callable]]:
    """The loops over all dims but the innermost, yielding their indices and a context manager
    for the innermost loop (which yields all indices); `shared` is a thread's share of dims[0]."""
    if not dims:
        yield [], lambda: nullcontext([])
        return
    with loop_nest(builder, dims[:-1], outer=shared if len(dims) > 1 else None) as outer:
        @contextmanager
        def inner() -> Iterator[list[ir.Value]]:
            start, stop = shared if shared is not None and len(dims) == 1 else (0, dims[-1])
            with loop(builder, stop, start, name="inner") as index:
                yield [*outer, index]
        yield outer, inner


def _compute(ctx: KernelContext, step: Step, indices: list[ir.Value], pointers: dict[Key, ir.Value],
             layout: dict[Key, list[int]], invariant: dict[Key, ir.Value]) -> None:
    """Every instruction of `step` at one element (`invariant`: sources read before the loop)."""
    builder = ctx.builder
    known: dict[Key, ir.Value] = dict(invariant)

    def index(key: Key) -> ir.Value:
        return linear_index(builder, indices, layout[key])

    ctx.position = lambda: index(operand_key(ctx, step.instrs[0].operands[0]))
    for number, instr in enumerate(step.instrs):
        args = []
        for source in instr.inputs:
            key = operand_key(ctx, source)
            if key not in known:
                known[key] = load(builder, pointers[key], source.type.elem, index(key))
            args.append(known[key])
        dest = instr.operands[0]
        key = operand_key(ctx, dest)
        known[key] = SCALARS[instr.kind].scalar(ctx, instr, args)
        if number not in step.unstored:
            store(builder, known[key], pointers[key], dest.type.elem, index(key))


def _distinct_operands(ctx: KernelContext, step: Step) -> dict[Key, Any]:
    """Every operand of the step once per address, in first-use order."""
    found: dict[Key, Any] = {}
    for instr in step.instrs:
        for value in [instr.operands[0], *instr.inputs]:
            found.setdefault(operand_key(ctx, value), value)
    return found


for _kind, _record in SCALARS.items():
    register(_kind, _record.elems, build_elementwise, accepts=_record.accepts, scalar=_record.scalar)


def is_stackable(kind: str) -> bool:
    """Whether instructions of `kind` may join a stack (they have per-element semantics)."""
    record = KERNELS.get(kind)
    return record is not None and record.scalar is not None
