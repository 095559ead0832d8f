"""Counted loops with compile-time trip counts, the shape every specialised kernel is made of.

A loop is `for i in range(start, stop)` over i64 with `start`/`stop` constants or
values computed before the loop; the body is emitted inside a `with` block.
Loops are canonical (one preheader, one latch, an induction phi), so LLVM's loop
passes and vectoriser recognise them without help.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

from llvmlite import ir

from .kinds import I64, i64


@contextmanager
def loop(builder: ir.IRBuilder, stop: int | ir.Value, start: int | ir.Value = 0,
         name: str = "i") -> Iterator[ir.Value]:
    """Emit `for index in range(start, stop)`; yields the index, continues after the loop on exit."""
    start_v = i64(start) if isinstance(start, int) else start
    stop_v = i64(stop) if isinstance(stop, int) else stop
    function = builder.function
    head = function.append_basic_block(f"{name}.head")
    body = function.append_basic_block(f"{name}.body")
    done = function.append_basic_block(f"{name}.done")
    before = builder.block
    builder.branch(head)
    builder.position_at_end(head)
    index = builder.phi(I64, name=name)
    index.add_incoming(start_v, before)
    builder.cbranch(builder.icmp_signed("<", index, stop_v), body, done)
    builder.position_at_end(body)
    yield index
    latch = builder.block
    index.add_incoming(builder.add(index, i64(1), name=f"{name}.next", flags=("nsw",)), latch)
    builder.branch(head)
    builder.position_at_end(done)


@contextmanager
def loop_nest(builder: ir.IRBuilder, dims: Sequence[int], name: str = "d",
              outer: tuple[ir.Value, ir.Value] | None = None) -> Iterator[list[ir.Value]]:
    """Nested loops over `dims` (outermost first); yields one index per dim. `outer`: the
    [start, stop) the outermost loop runs instead of all of dims[0] (a thread's share)."""
    if outer is None or not dims:
        with _nest(builder, list(dims), name, []) as indices:
            yield indices
        return
    with loop(builder, outer[1], outer[0], name=f"{name}0") as first:
        with _nest(builder, list(dims[1:]), name, [first]) as indices:
            yield indices


@contextmanager
def _nest(builder: ir.IRBuilder, dims: list[int], name: str, outer: list[ir.Value]) -> Iterator[list[ir.Value]]:
    if not dims:
        yield outer
        return
    with loop(builder, dims[0], name=f"{name}{len(outer)}") as index:
        with _nest(builder, dims[1:], name, [*outer, index]) as indices:
            yield indices


def linear_index(builder: ir.IRBuilder, indices: Sequence[ir.Value], strides: Sequence[int],
                 base: int = 0) -> ir.Value:
    """base + sum(index * stride), skipping zero strides (constants fold the rest)."""
    total: ir.Value = i64(base)
    for index, stride in zip(indices, strides):
        if stride:
            term = index if stride == 1 else builder.mul(index, i64(stride), flags=("nsw",))
            total = builder.add(total, term, flags=("nsw",))
    return total


def row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a contiguous row-major tensor of `shape`."""
    strides, step = [], 1
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


def merge_dims(dims: Sequence[int], strides: Sequence[Sequence[int]]) -> tuple[list[int], list[list[int]]]:
    """`dims` and per-operand `strides` with size-1 dims dropped and neighbouring dims merged
    wherever every operand steps through them as one (the outer stride is the inner one times
    the inner size), so contiguous work becomes one long loop."""
    keep = [d for d, size in enumerate(dims) if size != 1]
    merged = [dims[d] for d in keep]
    walks = [[s[d] for d in keep] for s in strides]
    d = len(merged) - 1
    while d > 0:
        if all(w[d - 1] == w[d] * merged[d] for w in walks):
            merged[d - 1:d + 1] = [merged[d - 1] * merged[d]]
            for w in walks:
                w[d - 1:d + 1] = [w[d]]
        d -= 1
    return merged, walks
