"""Test helpers for the IR passes: run passes on IR text, and check a program's numbers.

A program is allocated and run on flat memory at the planned offsets (so a pass
that lets two live values overlap gives wrong numbers) and must agree with the
reference evaluator on a graph that computes the same thing.
"""
from __future__ import annotations

from textwrap import dedent

import numpy as np

import glowsdk
from glowsdk.backends import get_backend
from glowsdk.backends.interpreter.executor import ProgramRunner
from glowsdk.compiler.ir import IRFunction, format_ir, parse_ir, verify_ir
from glowsdk.compiler.ir.allocator import allocate, check_plan
from glowsdk.compiler.ir.irgen import generate_ir
from glowsdk.compiler.ir.passes import IR_PASSES
from glowsdk.compiler.ir.program import Program
from glowsdk.compiler.passes.manager import Entry, PassManager, Pipeline
from glowsdk.compiler.pipeline import compile_function
from glowsdk.graph import ElemKind, Module, Type
from glowsdk.graph.function import Function
from glowsdk.reference.evaluator import evaluate

F32 = ElemKind.FLOAT32
RNG = np.random.default_rng(11)


def graph(**shapes: tuple[int, ...]) -> tuple[Function, list]:
    """A function `main` in a new module, and one float32 placeholder per keyword (name=shape)."""
    module = Module()
    fn = module.create_function("main")
    return fn, [module.create_placeholder(n, Type(F32, s)).result() for n, s in shapes.items()]


def optimise(text: str, *passes: str, constants: dict | None = None) -> tuple[IRFunction, IRFunction]:
    """The parsed program and a copy of it after `passes` (verified after each)."""
    before, after = parse_ir(dedent(text), constants), parse_ir(dedent(text), constants)
    verify_ir(before)
    PassManager(registry=IR_PASSES).run(Pipeline("test", [Entry(p) for p in passes]), after)
    return before, after


def same_numbers(ir: IRFunction, fn: Function) -> None:
    """`ir`, allocated and run on flat memory, computes what the graph `fn` does."""
    feeds = {}
    for ph in fn.input_placeholders():
        if ph.type.elem.is_float:
            feeds[ph.name] = RNG.standard_normal(ph.type.shape).astype(ph.type.dtype)
        else:
            feeds[ph.name] = RNG.integers(0, 100, ph.type.shape).astype(ph.type.dtype)
    want = evaluate(fn, feeds)
    plan = allocate(ir)
    check_plan(ir, plan)
    got = ProgramRunner(Program(ir, plan)).run(feeds)
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-6, err_msg=name)


def check(text_in: str, passes: tuple[str, ...], text_out: str, fn: Function, constants: dict | None = None) -> None:
    """`passes` turn `text_in` into `text_out`, and both compute what `fn` does."""
    before, after = optimise(text_in, *passes, constants=constants)
    assert format_ir(after) == dedent(text_out).strip()
    same_numbers(before, fn)
    same_numbers(after, fn)


def scheduled_function(name: str) -> Function:
    """The lowered, scheduled function of a bundled model, as the interpreter would compile it."""
    stages = {}
    net = glowsdk.load(name, random_weights=0)
    compile_function(net.function, get_backend("interpreter"), on_stage=lambda s, f: stages.setdefault(s, f))
    return stages["scheduled"]


def scheduled_ir(name: str) -> IRFunction:
    return generate_ir(scheduled_function(name))
