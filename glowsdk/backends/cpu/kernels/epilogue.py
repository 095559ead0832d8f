"""Element-wise instructions stacked onto a GEMM kernel's store (paper 5.2, Conv + Add + ReLU).

Operator stacking (stacking.py) may hand a compute kernel the element-wise
instructions that follow it in place on its result: each reads the result's
exact bytes and writes them back, and its other sources are either tensors of
the result's shape that share no byte with it (the residual of an Add) or a
single element (the zero of a ReLU). The GEMM then computes them on each C
vector before its one store, with the same `scalar` semantics element-wise
kernels use (scalar.py builds on vectors as well), so the output is written once.
A run may also write other tensors of the result's shape that nothing reads after
it (a HardSwish's clamped x / 6 + 0.5, a GELU's erf(x / sqrt 2) + 1): those live
in vectors only. A kernel whose store vectors lie within rows of the result's last
dim (a MatMul's, `epilogue_rows` in its table record) also takes sources of one
value per column: the bias Add of a Linear layer, read at the vector's column.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from llvmlite import ir

from ....graph.types import ElemKind
from ..codegen.kinds import F32, I32, I64, PTR, i64, vector_constant
from ..codegen.loops import loop
from ..codegen.module import KernelContext, Step
from ..codegen.sharing import epilogue_registers, held_in
from ..codegen.sharing import same_bytes as _same_bytes
from ..codegen.target import host_vectors
from .gemm import Count, Epilogue, load_vector, offset, splat, store_vector
from .scalar import SCALARS

POLYNOMIAL_KINDS = frozenset({"Exp", "Tanh", "Erf"})
"""Kinds whose vector code is a few dozen instructions (vmath.py): an epilogue with one is `costly`."""
VECTOR_KINDS = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min"}) | POLYNOMIAL_KINDS
"""Element-wise kinds whose float32 `scalar` builds on vectors unchanged: plain arithmetic,
intrinsics, and vmath.py's straight-line polynomials (a GELU's Erf runs in a MatMul's store)."""


def same_bytes(program: Any, a: Any, b: Any) -> bool:
    """Whether two operands are the same elements in the same order (sharing.same_bytes)."""
    return _same_bytes(program.plan, a, b)


def _disjoint(program: Any, a: Any, b: Any) -> bool:
    (region_a, start_a), (region_b, start_b) = program.plan.address(a), program.plan.address(b)
    return region_a != region_b or start_a + a.type.nbytes <= start_b or start_b + b.type.nbytes <= start_a


def per_column(value: Any, dest: Any, result: Any) -> bool:
    """Whether `value`, a source of an element-wise `dest` over `result`'s elements, holds one value
    per column of the result's last dim, broadcast along the rest (a bias of shape (N,) or 1 x N)."""
    columns = result.type.shape[-1] if result.type.rank else 0
    return value.type.rank > 0 and value.type.size == columns == value.type.shape[-1] == dest.type.shape[-1] \
        and value.type.size not in (1, result.type.size)


def _applies(program: Any, registers: list[Any], instr: Any, rows: bool) -> bool:
    """Whether element-wise `instr` can run on vectors in a float32 kernel's store, `registers` the
    values held in vectors there (the result first): its result is one of them or a new one of the
    result's size, it reads at least one of them, and every other source is a single element or
    a float32 tensor of the result's size sharing no byte with any of them (element counts, not
    shapes: a reshaping view holds its elements at the same flat indices), or with `rows` (the kernel's
    vectors lie within rows of the result's last dim) one value per column (per_column)."""
    result = registers[0]
    if instr.kind not in VECTOR_KINDS or instr.operands[0].type.elem is not ElemKind.FLOAT32:
        return False
    dest = instr.operands[0]
    if dest.type.size != result.type.size:
        return False
    if not any(same_bytes(program, dest, r) for r in registers) and \
            not all(_disjoint(program, dest, r) for r in registers):
        return False
    inputs = list(instr.inputs)
    if not any(same_bytes(program, v, r) for v in inputs for r in registers):
        return False
    for value in inputs:
        if any(same_bytes(program, value, r) for r in registers):
            continue
        if value.type.elem is not ElemKind.FLOAT32 or not all(_disjoint(program, value, r) for r in registers):
            return False
        if value.type.size not in (1, result.type.size) and not (rows and per_column(value, dest, result)):
            return False
    return True


def epilogue_length(program: Any, result: Any, candidates: Sequence[tuple[int, Any]],
                    dead_after: Callable[[Any, int], bool], rows: bool = False) -> int:
    """How many of `candidates` ((position, instruction) of the element-wise instructions right after
    a float32 kernel writing `result`) the kernel applies as it stores: the longest run `_applies`
    accepts after which every other tensor the run writes is dead (`dead_after(value, position)`),
    so only the result is stored. A HardSwish (x / 6 + 0.5 clamped to [0, 1] in a second tensor,
    then times x into the result) runs in the store this way, its second tensor never in memory."""
    registers, length = [result], 0
    for count, (position, instr) in enumerate(candidates, 1):
        if not _applies(program, registers, instr, rows):
            break
        dest = instr.operands[0]
        if not any(same_bytes(program, dest, r) for r in registers):
            registers.append(dest)
        if all(dead_after(r, position) for r in registers[1:]):
            length = count
    return length


def stacked_epilogue(ctx: KernelContext, step: Step) -> Epilogue | None:
    """The vector function applying `step.epilogue` to C (None without one): the result and the
    tensors the epilogue writes are vectors, the other sources loaded or splat. A costly one (a
    polynomial) also gets `stored`, the kernel's one copy of it as a subroutine (`_outlined`)."""
    if not step.epilogue:
        return None
    plan = ctx.owner.program.plan
    result = step.instrs[0].operands[0]
    written = epilogue_registers(plan, result, step.epilogue)

    def held(value: Any) -> int | None:
        return held_in(plan, written, value)

    sources = list({id(v): v for instr in step.epilogue for v in instr.inputs if held(v) is None}.values())

    def compute(vector: ir.Value, at: ir.Value, count: Count, pointers: dict[int, ir.Value]) -> ir.Value:
        """`pointers`: `_reads` of the sources, where the function computing it reads them."""
        builder, lanes = ctx.builder, vector.type.count
        vectors: list[ir.Value | None] = [vector] + [None] * (len(written) - 1)
        for instr in step.epilogue:
            args = []
            for value in instr.inputs:
                index = held(value)
                if index is not None:
                    args.append(vectors[index])
                elif value.type.size == 1:
                    scalar = pointers[id(value)]
                    args.append(scalar if scalar.type.count == lanes else
                                splat(builder, builder.extract_element(scalar, ir.Constant(I32, 0)), lanes))
                elif value.type.size != result.type.size:  # per column: the vector lies within a row
                    column = builder.urem(at, i64(value.type.size))
                    args.append(load_vector(ctx, offset(builder, pointers[id(value)], column), lanes, count))
                else:
                    args.append(load_vector(ctx, offset(builder, pointers[id(value)], at), lanes, count))
            vectors[held(instr.operands[0])] = SCALARS[instr.kind].scalar(ctx, instr, args)
        return vectors[0]

    addresses = {id(v): ctx.address(v) for v in sources}
    reads = _reads(ctx.builder, sources, addresses)

    def apply(vector: ir.Value, at: ir.Value, count: Count) -> ir.Value:
        return compute(vector, at, count, reads)

    if not any(instr.kind in POLYNOMIAL_KINDS for instr in step.epilogue):
        return Epilogue(apply)
    outlined: list[ir.Function] = []

    def stored(pointer: ir.Value, at: ir.Value, rows: ir.Value, columns: ir.Value, ldc: int) -> None:
        if not outlined:
            outlined.append(_outlined(ctx, sources, compute))
        ctx.builder.call(outlined[0], [pointer, at, rows, columns, i64(ldc), *(addresses[id(v)] for v in sources)])
    return Epilogue(apply, stored)


def _reads(builder: ir.IRBuilder, sources: list[Any], pointers: dict[int, ir.Value]) -> dict[int, ir.Value]:
    """Per source (by id), where `compute` reads it: a single element loaded and splat here, once
    (where the kernel builds the epilogue, before its loops and tile variants: so it dominates them
    all; repeated at every store it was 3 of a ReLU's 8 lines per vector), else its pointer."""
    lanes = host_vectors().lanes
    return {id(v): splat(builder, builder.load(pointers[id(v)], typ=F32), lanes) if v.type.size == 1
            else pointers[id(v)] for v in sources}


def _outlined(ctx: KernelContext, sources: list[Any],
              compute: Callable[[ir.Value, ir.Value, Count, dict[int, ir.Value]], ir.Value]) -> ir.Function:
    """The subroutine (C pointer, its element index in C, rows, columns, row stride, one pointer per
    source) applying `compute` in place to that rectangle of C: whole vectors of each row in a loop,
    the rest of the row under a run-time mask."""
    lanes = host_vectors().lanes
    function = ctx.subroutine("epilogue", [PTR, I64, I64, I64, I64] + [PTR] * len(sources))
    c, first, rows, columns, ldc, *pointers = function.args
    for arg, name in zip(function.args, ("c", "at", "rows", "columns", "ldc")):
        arg.name = name
    for arg in (c, *pointers):
        arg.add_attribute("noalias")
    kernel_builder = ctx.builder
    builder = ctx.builder = ir.IRBuilder(function.append_basic_block("entry"))
    where = _reads(builder, sources, {id(v): p for v, p in zip(sources, pointers)})
    whole = builder.udiv(columns, i64(lanes))
    rest = builder.trunc(builder.urem(columns, i64(lanes)), I32)
    lane = vector_constant(I32, list(range(lanes)))
    mask = builder.icmp_unsigned("<", lane, splat(builder, rest, lanes))

    def one(at: ir.Value, count: Count) -> None:
        pointer = offset(builder, c, at)
        value = compute(load_vector(ctx, pointer, lanes, count), builder.add(first, at), count, where)
        store_vector(ctx, value, pointer, lanes, count)

    with loop(builder, rows, name="r") as r:
        row = builder.mul(r, ldc)
        with loop(builder, whole, name="v") as v:
            one(builder.add(row, builder.mul(v, i64(lanes))), lanes)
        with builder.if_then(builder.icmp_unsigned("!=", rest, ir.Constant(I32, 0))):
            one(builder.add(row, builder.mul(whole, i64(lanes))), mask)
    builder.ret_void()
    ctx.builder = kernel_builder
    return function
