"""Gradient checks against central finite differences, the oracle every rule is held to.

A case builds a small float64 function of placeholder operands; the checked loss is
sum(output * R) for a fixed random R, so every output element weighs differently.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from glowsdk.backends import get_backend
from glowsdk.compiler.pipeline import compile_function
from glowsdk.graph.function import Function, Module
from glowsdk.graph.node import NodeValue
from glowsdk.graph.nodes import elementwise as ew, reduce as rd
from glowsdk.graph.types import ElemKind, Type
from glowsdk.reference.evaluator import evaluate
from glowsdk.training import differentiate

Build = Callable[..., NodeValue]
EPS = 1e-6


def gradient_function(build: Build, shapes: Sequence[Sequence[int]], seed: int = 0,
                      elem: ElemKind = ElemKind.FLOAT64) -> tuple[Function, dict[str, np.ndarray]]:
    """The function saving `loss` and the gradient `g<i>` of each operand `x<i>`, and random inputs."""
    rng = np.random.default_rng(seed)
    module = Module()
    fn = module.create_function()
    operands = [module.create_placeholder(f"x{i}", Type(elem, tuple(s))) for i, s in enumerate(shapes)]
    out = build(fn, *[p.result() for p in operands])
    weights = module.create_constant("r", rng.standard_normal(out.type.shape).astype(elem.dtype))
    loss = fn.add(rd.ReduceSum, fn.add(ew.Mul, out, weights.result()),
                  axes=tuple(range(out.type.rank)), keepdims=False)
    grads = differentiate(fn, loss, operands)
    fn.save(loss, "loss")
    for i, p in enumerate(operands):
        fn.save(grads[p.name], f"g{i}")
    fn.verify()
    feeds = {p.name: rng.standard_normal(p.type.shape).astype(elem.dtype) for p in operands}
    return fn, feeds


def finite_differences(fn: Function, feeds: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    """d loss / d feeds[name] by central differences, one element at a time."""
    base = feeds[name]
    grad = np.zeros_like(base)
    for index in np.ndindex(base.shape):
        values = []
        for delta in (EPS, -EPS):
            moved = base.copy()
            moved[index] += delta
            values.append(evaluate(fn, {**feeds, name: moved})["loss"])
        grad[index] = (values[0] - values[1]) / (2 * EPS)
    return grad


def check_against_finite_differences(build: Build, shapes: Sequence[Sequence[int]], seed: int = 0) -> None:
    fn, feeds = gradient_function(build, shapes, seed)
    outputs = evaluate(fn, feeds)
    for i in range(len(shapes)):
        expected = finite_differences(fn, feeds, f"x{i}")
        np.testing.assert_allclose(outputs[f"g{i}"], expected, rtol=1e-5, atol=1e-6,
                                   err_msg=f"gradient of operand x{i}")


def check_lowered(build: Build, shapes: Sequence[Sequence[int]], target: str, seed: int = 0) -> None:
    """The gradient function lowered to primitives and run on `target` agrees with the reference
    evaluator on the unlowered graph."""
    fn, feeds = gradient_function(build, shapes, seed)
    expected = evaluate(fn, feeds)
    got = compile_function(fn, get_backend(target)).execute(feeds)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-9, atol=1e-9, err_msg=name)
