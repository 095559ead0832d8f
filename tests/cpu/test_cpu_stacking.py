"""Operator stacking: a chain of element-wise instructions becomes one loop, with the same numbers."""
from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from cpu_util import check, make, run_both
from glowsdk.graph import ElemKind
from glowsdk.graph.nodes import elementwise as ew, linalg

F32 = ElemKind.FLOAT32
CHAIN = [ew.Add, ew.Mul, ew.Max, ew.Tanh, ew.Sub, ew.Exp, ew.Min, ew.Div]


def chain(kinds):
    """x0 through `kinds` in order, binary ones taking x1 (broadcast over rows) as the other side."""
    def build(fn, v):
        value = v[0]
        for kind in kinds:
            binary = len(kind.spec.operands) == 2
            value = fn.add(kind, value, v[1]) if binary else fn.add(kind, value)
        return [value]
    return build


def kernel_bodies(llvm_ir: str) -> dict[str, str]:
    """The text of each kernel function of a module, by name."""
    return {m.group(1): m.group(2) for m in re.finditer(r'define internal i32 @"?([^"(]+)"?\(.*?\n\{\n(.*?)\n\}',
                                                      llvm_ir, re.S)}


def loop_count(body: str) -> int:
    return len(re.findall(r"^\"?[\w.]+\.head\"?:", body, re.M))


@pytest.mark.parametrize("order", [CHAIN, CHAIN[::-1], [ew.Exp, ew.Tanh, ew.Add, ew.Add, ew.Mul]])
def test_chain_is_one_loop_with_the_same_numbers(order):
    compiled = check([((16, 33), F32), ((33,), F32)], chain(order))
    stacks = [s for s in compiled.steps if len(s.instrs) > 1]
    assert len(stacks) == 1 and [i.kind for i in stacks[0].instrs] == [k.spec.name for k in order]
    bodies = kernel_bodies(compiled.llvm_ir)
    assert len(bodies) == 1
    body = next(iter(bodies.values()))
    # one loop nest, rows x columns (x1 broadcasts over rows, so the dims cannot merge)
    assert loop_count(body) == 2 and body.count("d0.head:") == 1
    # the intermediates stay in registers: one store, of the chain's final result
    assert body.count("store float") == 1


@pytest.mark.parametrize("pair", list(itertools.permutations([ew.Add, ew.Mul, ew.Tanh, ew.Sqrt], 2)))
def test_every_pair_stacks_generically(pair):
    feeds = {"x0": np.abs(np.random.default_rng(3).standard_normal((5, 7))).astype(np.float32) + 0.5,
             "x1": np.full((7,), 0.75, np.float32)}
    compiled = check([((5, 7), F32), ((7,), F32)], chain(pair), feeds=feeds)
    assert [len(s.instrs) for s in compiled.steps] == [2]


def test_same_shape_chain_is_one_flat_loop():
    compiled = check([((16, 33), F32), ((16, 33), F32)], chain(CHAIN))
    assert loop_count(next(iter(kernel_bodies(compiled.llvm_ir).values()))) == 1


def test_stacking_off_gives_one_kernel_per_instruction():
    compiled = check([((16, 33), F32), ((33,), F32)], chain(CHAIN), stacking=False)
    assert len(kernel_bodies(compiled.llvm_ir)) == len(CHAIN)


def test_a_matmul_breaks_the_stack_and_results_stay_stored():
    def build(fn, v):
        a = fn.add(ew.Tanh, v[0])
        b = fn.add(ew.Exp, a)
        m = fn.add(linalg.MatMul, b, v[1])
        return [a, fn.add(ew.Add, m, m)]
    compiled = check([((4, 6), F32), ((6, 4), F32)], build, accumulates=True)
    assert [len(s.instrs) for s in compiled.steps] == [2, 1, 1]
    assert not compiled.steps[0].unstored  # tanh writes an output, exp feeds the matmul


def test_different_shapes_do_not_stack():
    def build(fn, v):
        return [fn.add(ew.Add, fn.add(ew.Exp, v[0]), v[1])]
    compiled = check([((1, 5), F32), ((4, 5), F32)], build)
    assert all(len(s.instrs) == 1 for s in compiled.steps)


def test_stacked_results_match_unstacked_on_a_model_fragment():
    fn = make([((8, 40), F32), ((40,), F32)], chain(CHAIN))
    feeds = {"x0": np.random.default_rng(5).standard_normal((8, 40)).astype(np.float32),
             "x1": np.random.default_rng(6).standard_normal(40).astype(np.float32)}
    stacked, _, _ = run_both(fn, feeds)
    separate, _, _ = run_both(fn, feeds, stacking=False)
    np.testing.assert_array_equal(stacked["y0"], separate["y0"])
