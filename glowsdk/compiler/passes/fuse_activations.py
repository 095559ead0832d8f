"""Recognise activations that exporters write out as arithmetic: GELU (exact and tanh forms), SiLU, HardSwish.

PyTorch exports GELU below opset 20 as x * 0.5 * (1 + erf(x / sqrt(2))) (Div, Erf, Add, Mul, Mul), its tanh
form with a cube and Tanh, and SiLU as x * Sigmoid(x). As one node each is one unary function: a backend
may keep it whole (an int8 device runs it as one lookup table, not five int8 steps that each round), and
the others lower it again. The constants must match within `TOLERANCE` (exporters round sqrt(2) and
sqrt(2/pi) to float32), every inner node must be read by the pattern only, and the result must have
x's type (no broadcasting by a constant). The fused node computes the same function rounded once, so the
outputs change by float32 roundings only.
"""
from __future__ import annotations

import math

from ...graph.function import Function
from ...graph.node import Node, NodeValue
from ...graph.nodes import elementwise as ew
from .manager import Pass, register_pass
from .rewrite import RuleSet, emit, producer, uniform_value

RULES = RuleSet()
TOLERANCE = 1e-5
"""Relative: a float32 constant is within 6e-8 of the real number it rounds."""


def _near(value: NodeValue, expected: float) -> bool:
    found = uniform_value(value)
    return found is not None and abs(found - expected) <= TOLERANCE * abs(expected)


def _inner(value: NodeValue, kind: type[Node]) -> Node | None:
    """The `kind` node producing `value`, when nothing outside the pattern reads it."""
    node = producer(value, kind)
    return node if node is not None and len(node.users) == 1 else None


def _factors(node: Node) -> list[NodeValue]:
    """The operands of a product: `node`'s, with inner Muls (read by it only) opened, one level deep."""
    found: list[NodeValue] = []
    for operand in (node.lhs, node.rhs):
        inner = _inner(operand, ew.Mul)
        found += [inner.lhs, inner.rhs] if inner is not None else [operand]
    return found


def _scaled(value: NodeValue, factor: float) -> NodeValue | None:
    """v where `value` is v * factor, factor * v or v / (1 / factor)."""
    mul = _inner(value, ew.Mul)
    if mul is not None:
        for v, c in ((mul.lhs, mul.rhs), (mul.rhs, mul.lhs)):
            if _near(c, factor):
                return v
    div = _inner(value, ew.Div)
    return div.lhs if div is not None and _near(div.rhs, 1 / factor) else None


def _one_plus(value: NodeValue, kind: type[Node]) -> Node | None:
    """The `kind` node f where `value` is 1 + f(...) or f(...) + 1."""
    add = _inner(value, ew.Add)
    if add is None:
        return None
    for one, other in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
        if _near(one, 1.0) and _inner(other, kind) is not None:
            return other.node
    return None


def _cube(value: NodeValue, x: NodeValue) -> bool:
    """Whether `value` is x * x * x (two Muls in either association) or x ** 3."""
    power = _inner(value, ew.Pow)
    if power is not None:
        return power.base == x and _near(power.exponent, 3.0)
    product = _inner(value, ew.Mul)
    return product is not None and _factors(product) == [x, x, x]


def _erf_argument(curve: Node) -> NodeValue | None:
    """x where `curve` is erf(x / sqrt(2))."""
    return _scaled(curve.input, 1 / math.sqrt(2))


def _tanh_argument(curve: Node) -> NodeValue | None:
    """x where `curve` is tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))."""
    inner = _scaled(curve.input, math.sqrt(2 / math.pi))
    add = None if inner is None else _inner(inner, ew.Add)
    if add is None:
        return None
    for x, term in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
        cube = _scaled(term, 0.044715)
        if cube is not None and _cube(cube, x):
            return x
    return None


GELU_FORMS = ((ew.Erf, _erf_argument, "none"), (ew.Tanh, _tanh_argument, "tanh"))
"""The curve of each GELU form, how to find x inside it, and the Gelu node's `approximate`."""


@RULES.rule(ew.Mul)
def _gelu(node: Node) -> NodeValue | None:
    # x * 0.5 * (1 + erf(x / sqrt(2))) -> Gelu(x)  (the three factors in any order and association)
    # x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) -> Gelu(x, approximate="tanh")
    factors = _factors(node)
    if len(factors) != 3:
        return None
    for k, factor in enumerate(factors):
        for kind, argument, approximate in GELU_FORMS:
            curve = _one_plus(factor, kind)
            x = None if curve is None else argument(curve)
            rest = factors[:k] + factors[k + 1:]
            if x is not None and node.type == x.type and x in rest and _near(rest[1 - rest.index(x)], 0.5):
                return emit(node, ew.Gelu, x, approximate=approximate)
    return None


@RULES.rule(ew.Mul)
def _silu(node: Node) -> NodeValue | None:
    # x * Sigmoid(x) -> Silu(x); x * HardSigmoid(x, 1/6, 1/2) -> HardSwish(x)
    for x, gate in ((node.lhs, node.rhs), (node.rhs, node.lhs)):
        if node.type != x.type:
            continue
        sigmoid, hard = _inner(gate, ew.Sigmoid), _inner(gate, ew.HardSigmoid)
        if sigmoid is not None and sigmoid.input == x:
            return emit(node, ew.Silu, x)
        if hard is not None and hard.input == x and math.isclose(hard.alpha, 1 / 6, rel_tol=TOLERANCE) \
                and math.isclose(hard.beta, 0.5, rel_tol=TOLERANCE):
            return emit(node, ew.HardSwish, x)
    return None


@register_pass
class FuseActivations(Pass):
    """Replace the arithmetic forms of GELU, SiLU and HardSwish by one node each."""

    name = "fuse-activations"

    def run(self, function: Function) -> bool:
        return RULES.apply(function)
