"""Random lowered graphs through the whole IR pipeline, against the reference evaluator.

Hypothesis draws chains and DAGs of primitives (element-wise unary and binary
with broadcasting, MatMul, Reshape, Transpose, Concat, Slice, ReduceSum, Where,
Expand, Splat), with values read by several users, saved twice or saved as they
are. Each graph goes through IRGen, the IR optimiser and the allocator and runs
on the interpreter's flat buffers; the reference evaluator on the graph is the
oracle. The IR must verify and the plan must pass the allocator's brute-force
check, so a pass or a placement that breaks the data flow fails here.
Derandomized: the same ~100 graphs on every run.
"""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glowsdk.backends.interpreter.executor import ProgramRunner
from glowsdk.compiler.ir import verify_ir
from glowsdk.compiler.ir.allocator import check_plan
from glowsdk.compiler.ir.program import build_program
from glowsdk.graph import ElemKind, Module, Type, nodes
from glowsdk.graph.function import Function
from glowsdk.graph.node import NodeValue
from glowsdk.reference.evaluator import evaluate

F32 = ElemKind.FLOAT32
UNARY = (nodes.Tanh, nodes.Sin, nodes.Cos, nodes.Exp)
BINARY = (nodes.Add, nodes.Sub, nodes.Mul, nodes.Max, nodes.Min, nodes.Div)
OPS = ("unary", "binary", "binary", "matmul", "reshape", "transpose", "concat", "slice", "reduce", "where",
       "expand")

shapes = st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple)


class Builder:
    """Adds random primitives to one function, drawing every choice from hypothesis."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.module = Module()
        self.fn = self.module.create_function("main")
        self.values: list[NodeValue] = []
        self.constants = 0

    def pick(self) -> NodeValue:
        """A float value to read: usually a recent one, so chains grow deep."""
        recent = self.values[-3:]
        return self.draw(st.sampled_from(recent if self.draw(st.booleans()) else self.values))

    def constant(self, shape: tuple[int, ...]) -> NodeValue:
        self.constants += 1
        if self.draw(st.integers(0, 4)) == 0:  # a Splat: an instruction with no sources
            return self.fn.add(nodes.Splat, shape=shape, value=0.5, elem=F32)
        data = np.random.default_rng(self.constants).standard_normal(shape).astype(np.float32)
        return self.module.create_constant(f"c{self.constants}", data).result()

    def broadcastable_to(self, shape: tuple[int, ...]) -> NodeValue:
        """A value that broadcasts to `shape`: an existing one of that shape, or a fresh constant of
        a suffix of it with some dims set to 1."""
        same = [v for v in self.values if v.type.shape == shape]
        if same and self.draw(st.booleans()):
            return self.draw(st.sampled_from(same))
        if not shape:  # a scalar (a reduction over every axis) broadcasts with scalars only
            return self.constant(())
        suffix = shape[self.draw(st.integers(0, len(shape) - 1)):]
        return self.constant(tuple(1 if self.draw(st.booleans()) else d for d in suffix))

    def step(self) -> NodeValue:
        a = self.pick()
        shape = a.type.shape
        op = self.draw(st.sampled_from(OPS))
        if not shape and op in ("concat", "slice", "reduce"):
            op = "unary"  # they need an axis, which a scalar does not have
        fn = self.fn
        if op == "binary":
            b = self.broadcastable_to(shape)
            a, b = (b, a) if self.draw(st.booleans()) else (a, b)
            return fn.add(self.draw(st.sampled_from(BINARY)), a, b)
        if op == "matmul" and len(shape) >= 2:
            b = self.constant((*shape[:-2], shape[-1], self.draw(st.integers(1, 4))))
            return fn.add(nodes.MatMul, a, b)
        if op == "reshape":
            return fn.add(nodes.Reshape, a, shape=self.draw(factorizations(a.type.size)))
        if op == "transpose":
            return fn.add(nodes.Transpose, a, perm=self.draw(st.permutations(range(len(shape)))))
        if op == "concat":
            axis = self.draw(st.integers(0, len(shape) - 1))
            parts = [a]
            for _ in range(self.draw(st.integers(1, 2))):
                fits = [v for v in self.values if _concatenable(v.type.shape, shape, axis)]
                if fits and self.draw(st.booleans()):
                    parts.append(self.draw(st.sampled_from(fits)))  # may be `a` itself
                else:
                    parts.append(self.constant(shape[:axis] + (self.draw(st.integers(1, 3)),) + shape[axis + 1:]))
            return fn.add(nodes.Concat, *parts, axis=axis)
        if op == "slice":
            starts, ends, steps = self.draw(slices(shape))
            return fn.add(nodes.Slice, a, starts=starts, ends=ends, steps=steps)
        if op == "reduce":
            axes = sorted(self.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1)))
            return fn.add(nodes.ReduceSum, a, axes=axes, keepdims=self.draw(st.booleans()))
        if op == "where":
            cond = fn.add(nodes.Less, a, self.broadcastable_to(shape))
            return fn.add(nodes.Where, cond, self.broadcastable_to(shape), a)
        if op == "expand":
            return fn.add(nodes.Expand, a, shape=(self.draw(st.integers(1, 3)), *shape))
        return fn.add(self.draw(st.sampled_from(UNARY)), a)


def _concatenable(candidate: tuple[int, ...], shape: tuple[int, ...], axis: int) -> bool:
    return len(candidate) == len(shape) and all(c == s for i, (c, s) in enumerate(zip(candidate, shape))
                                                if i != axis)


@st.composite
def factorizations(draw: st.DrawFn, size: int) -> tuple[int, ...]:
    """A shape of `size` elements: its prime factors shuffled into up to four dims (1s allowed)."""
    factors, n, p = [], size, 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    factors = draw(st.permutations(factors))
    rank = draw(st.integers(1, 4))
    dims = [1] * rank
    for f in factors:
        dims[draw(st.integers(0, rank - 1))] *= f
    return tuple(dims)


@st.composite
def slices(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[list[int], list[int], list[int]]:
    """Normalised (starts, ends, steps), never empty; half the time a contiguous leading-axis slice."""
    starts, ends, steps = [], [], []
    leading = draw(st.booleans())
    for axis, dim in enumerate(shape):
        if leading and axis > 0:
            start, end, step = 0, dim, 1
        else:
            step = 1 if leading else draw(st.sampled_from([1, 1, 2, -1]))
            # two distinct bounds, so runs of every length come up, not just single indices
            low, high = sorted(draw(st.lists(st.integers(0, dim), min_size=2, max_size=2, unique=True)))
            start, end = (low, high) if step > 0 else (high - 1, low - 1)
        starts.append(start)
        ends.append(end)
        steps.append(step)
    return starts, ends, steps


@st.composite
def lowered_graphs(draw: st.DrawFn) -> Function:
    builder = Builder(draw)
    for i in range(draw(st.integers(1, 2))):
        builder.values.append(builder.module.create_placeholder(f"x{i}", Type(F32, draw(shapes))).result())
    for _ in range(draw(st.integers(2, 12))):
        builder.values.append(builder.step())
    fn = builder.fn
    saved = [v for v in builder.values if not v.node.users and v.node.function is fn]  # nothing is dead
    saved += draw(st.lists(st.sampled_from(builder.values), max_size=2))  # repeats and inputs too
    for i, value in enumerate(saved):
        fn.save(value, f"y{i}")
    fn.verify()
    return fn


@settings(max_examples=100, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(lowered_graphs())
def test_random_lowered_graphs_run_as_the_reference(fn: Function):
    rng = np.random.default_rng(0)
    feeds = {p.name: rng.standard_normal(p.type.shape).astype(np.float32) for p in fn.input_placeholders()}
    want = evaluate(fn, feeds)
    program = build_program(fn)
    verify_ir(program.ir)
    check_plan(program.ir, program.plan)
    assert program.plan.report.lower_bound_bytes <= program.plan.report.allocated_bytes
    got = ProgramRunner(program).run(feeds)
    assert got.keys() == want.keys()
    for name, value in want.items():
        assert got[name].shape == value.shape and got[name].dtype == value.dtype, name
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=name)
