"""How to test each primitive: one recipe per family, registered for every primitive of the table.

A recipe builds the variants of one (primitive, element kind) case: several
shapes (broadcasting, size-1 and empty dims where the primitive allows them),
attribute forms, and edge values (NaN and infinities, integer extremes, rounding
ties of the quantized kinds). `kinds` are the element kinds a case exists for:
the primitive's kinds in primitives.md, less the ones its verify rule refuses
(AveragePool is float or 8-bit quantized only). `tests/test_conformance_primitives.py`
checks that every primitive of the table has a recipe.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from ..compiler.lowering.primitives import FLOATS, NUMERIC, PRIMITIVES, QUANTIZED
from ..graph.node import Node
from ..graph.nodes import core, elementwise as ew, linalg, nn, quant, reduce, tensor
from ..graph.nodes.layernorm_int8 import layernorm_params
from ..graph.types import ElemKind, Type
from .case_builder import CaseBuilder
from .values import DIVISOR, FULL, QUANT_SCALES, SMALL, Domain, integer_bounds, quantized_type, with_edges

F32 = ElemKind.FLOAT32
BYTE_QUANTIZED = frozenset({ElemKind.QINT8, ElemKind.QUINT8})
Build = Callable[[CaseBuilder, ElemKind, type[Node]], None]


@dataclass(frozen=True)
class Recipe:
    """The case builder of one primitive and the element kinds it has cases for."""

    primitive: str
    build: Build
    kinds: frozenset[ElemKind]


RECIPES: dict[str, Recipe] = {}


def recipe(*kinds_of: type[Node], kinds: Iterable[ElemKind] | None = None) -> Callable[[Build], Build]:
    """Register `build` for the primitives `kinds_of` (element kinds: the table's unless given)."""
    def register(build: Build) -> Build:
        for node_kind in kinds_of:
            name = node_kind.spec.name
            RECIPES[name] = Recipe(name, build, frozenset(PRIMITIVES[name].elems if kinds is None else kinds))
        return build
    return register


def _domains(kind: ElemKind, op: str) -> tuple[Domain, Domain]:
    """Integer domains of (lhs, rhs) where the result stays defined: no overflowing products, no
    zero divisor, no INT_MIN / -1."""
    if not kind.is_integer:
        return FULL, FULL
    low = integer_bounds(kind)[0]
    return {"Mul": (SMALL, SMALL), "Pow": (SMALL, Domain(0, 4)), "Div": (Domain(low + 1), DIVISOR),
            "Mod": (Domain(low + 1), DIVISOR)}.get(op, (FULL, FULL))


@recipe(ew.Add, ew.Sub, ew.Max, ew.Min)
@recipe(ew.Mul, kinds=NUMERIC | BYTE_QUANTIZED)
@recipe(ew.Div, ew.Pow, ew.Mod)
def binary(b: CaseBuilder, kind: ElemKind, op: type[Node]) -> None:
    name = op.spec.name
    lhs, rhs = _domains(kind, name)
    edge_rhs = name not in ("Mod", "Pow") or kind.is_integer  # a float divisor or exponent stays ordinary
    attrs = [{"fmod": False}, {"fmod": True}] if name == "Mod" else [{}]
    for extra in attrs:
        tag = " fmod" if extra.get("fmod") else ""
        shapes = [((2, 3, 4), (2, 3, 4), "equal shapes, edge values"), ((2, 1, 4), (3, 1), "broadcast both ways"),
                  ((1, 1), (1,), "size-1 dims"), ((), (3,), "rank-0 lhs"), ((0, 3), (3,), "empty dim")]
        for a, c, label in shapes:
            x = b.tensor(kind, a, edge=True, domain=lhs)
            y = b.tensor(kind, c, edge=edge_rhs, domain=rhs)
            b.check(f"{label} {a} . {c}{tag}", b.node(op, x, y, **extra))


@recipe(ew.Equal)
@recipe(ew.Less, kinds=NUMERIC)
def compare(b: CaseBuilder, kind: ElemKind, op: type[Node]) -> None:
    values = with_edges(kind, (4, 6), b.rng)
    twin = np.where(b.rng.random((4, 6)) < 0.5, values, b.rng.permutation(values))
    b.check("edge values, half equal", b.node(op, b.tensor(kind, (4, 6), values=values),
                                              b.tensor(kind, (4, 6), values=twin)))
    b.check("broadcast (2,1,3) . (4,1)", b.node(op, b.tensor(kind, (2, 1, 3)), b.tensor(kind, (4, 1))))
    b.check("empty dim", b.node(op, b.tensor(kind, (0, 2)), b.tensor(kind, (2,))))


@recipe(ew.And, ew.Or, ew.Not)
def logic(b: CaseBuilder, kind: ElemKind, op: type[Node]) -> None:
    arity = len(op.spec.operands)
    for shapes, label in ((((2, 3, 4),) * 2, "equal shapes"), (((3, 1), (1, 4)), "broadcast"),
                          (((0, 4), (4,)), "empty dim")):
        b.check(label, b.node(op, *(b.tensor(kind, s) for s in shapes[:arity])))


@recipe(ew.Where)
def where(b: CaseBuilder, kind: ElemKind, op: type[Node]) -> None:
    cond = b.tensor(ElemKind.BOOL, (2, 1, 4))
    b.check("broadcast all three", b.node(op, cond, b.tensor(kind, (3, 1), edge=True), b.tensor(kind, (2, 3, 4))))
    b.check("equal shapes", b.node(op, b.tensor(ElemKind.BOOL, (5,)), b.tensor(kind, (5,), edge=True),
                                   b.tensor(kind, (5,), edge=True)))
    b.check("empty dim", b.node(op, b.tensor(ElemKind.BOOL, (0, 2)), b.tensor(kind, (2,)), b.tensor(kind, (1,))))


@recipe(ew.Exp, ew.Log, ew.Sqrt, ew.Tanh, ew.Erf, ew.Floor, ew.Round, ew.Sin, ew.Cos)
def unary(b: CaseBuilder, kind: ElemKind, op: type[Node]) -> None:
    b.check("edge values (2,3,5)", b.node(op, b.tensor(kind, (2, 3, 5), edge=True)))
    b.check("rank 0", b.node(op, b.tensor(kind, ())))
    b.check("empty dim", b.node(op, b.tensor(kind, (0, 2))))


def _in_range_of(kind: ElemKind, b: CaseBuilder, shape: tuple[int, ...]) -> np.ndarray:
    """float32 values every cast into `kind` defines: in range, and with fractions to truncate."""
    if kind.is_integer:
        low, high = integer_bounds(kind)
        low, high = max(low, -2 ** 24), min(high, 2 ** 24)
        return (b.rng.uniform(low, high, shape) if low < 0 else b.rng.uniform(0, high, shape)).astype(np.float32)
    return (b.rng.standard_normal(shape) * 3).astype(np.float32)


@recipe(ew.Cast, kinds=PRIMITIVES["Cast"].elems)
def cast(b: CaseBuilder, kind: ElemKind, op: type[Node]) -> None:
    """Column `kind` is the source: `kind` to float32 and float32 to `kind` (to float64 and int32 for float32)."""
    targets = [ElemKind.FLOAT64, ElemKind.INT32, ElemKind.BOOL] if kind is F32 else [F32]
    for target in targets:
        if kind.is_float and target is ElemKind.INT32:  # float to integer is defined in range only
            source = b.tensor(kind, (3, 5), values=_in_range_of(target, b, (3, 5)))
        else:
            source = b.tensor(kind, (3, 5), edge=True)
        b.check(f"{kind.value} -> {target.value}", b.node(op, source, to=target))
    if kind is not F32:
        values = _in_range_of(kind, b, (3, 5)) if kind.is_integer else None
        b.check(f"float32 -> {kind.value}",
                b.node(op, b.tensor(F32, (3, 5), values=values, edge=values is None), to=kind))
    b.check("empty dim", b.node(op, b.tensor(kind, (0, 3)), to=F32 if kind is not F32 else ElemKind.FLOAT16))


POOL_FORMS = [
    ("2x2 stride 2", (1, 2, 5, 5), {"kernel": (2, 2), "strides": (2, 2), "pads": (0, 0, 0, 0)}),
    ("3x3 pad 1", (2, 3, 6, 6), {"kernel": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1)}),
    ("3x3 stride 2 ceil_mode", (1, 1, 6, 6), {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1),
                                              "ceil_mode": True}),
    ("2x2 dilation 2 asymmetric pad", (1, 2, 6, 5), {"kernel": (2, 2), "strides": (1, 2), "pads": (0, 1, 1, 0),
                                                     "dilations": (2, 2)}),
    ("1-D", (1, 2, 7), {"kernel": (3,), "strides": (2,), "pads": (1, 1)}),
    ("size-1", (1, 1, 1, 1), {"kernel": (1, 1), "strides": (1, 1), "pads": (0, 0, 0, 0)}),
]


@recipe(nn.MaxPool, nn.MaxPoolWithIndices)
@recipe(nn.AveragePool, kinds=FLOATS | BYTE_QUANTIZED)
def pool(b: CaseBuilder, kind: ElemKind, op: type[Node]) -> None:
    forms = POOL_FORMS
    if op is nn.AveragePool:
        forms = forms + [("3x3 pad 1 count_include_pad", (1, 2, 5, 5),
                          {"kernel": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1), "count_include_pad": True})]
    for label, shape, attrs in forms:
        attrs = {"dilations": (1,) * (len(shape) - 2), **attrs}
        b.check(label, b.node(op, b.tensor(kind, shape, edge=True), **attrs))


@recipe(reduce.ReduceSum, reduce.ReduceMax, reduce.ReduceMin, reduce.ReduceProd)
def reduction(b: CaseBuilder, kind: ElemKind, op: type[Node]) -> None:
    domain = SMALL if op is reduce.ReduceProd else FULL
    forms = [((2, 3, 4), (1,), True, True), ((2, 3, 4), (0, 2), False, False), ((2, 3, 4), (0, 1, 2), True, False),
             ((1, 1), (0,), True, False), ((2, 0, 3), (1,), False, False)]
    for shape, axes, keepdims, edge in forms:
        label = f"{shape} axes {axes}{' keepdims' if keepdims else ''}{' edge values' if edge else ''}"
        b.check(label, b.node(op, b.tensor(kind, shape, edge=edge, domain=domain), axes=axes, keepdims=keepdims))


def _tied(b: CaseBuilder, kind: ElemKind, shape: tuple[int, ...]) -> np.ndarray:
    """Values with many ties (and no NaN, whose order the primitives leave open)."""
    values = b.rng.integers(-2, 3, shape)
    if kind.is_integer:
        values = np.clip(values, *integer_bounds(kind))
    return values.astype(kind.dtype)


@recipe(reduce.ArgMax, reduce.ArgMin)
def arg_reduction(b: CaseBuilder, kind: ElemKind, op: type[Node]) -> None:
    for axis, keepdims, last in ((1, True, False), (0, False, True), (2, True, True)):
        x = b.tensor(kind, (3, 4, 5), values=_tied(b, kind, (3, 4, 5)))
        b.check(f"axis {axis} ties{' last' if last else ''}",
                b.node(op, x, axis=axis, keepdims=keepdims, select_last_index=last))
    b.check("size-1 axis", b.node(op, b.tensor(kind, (2, 1)), axis=1))


@recipe(reduce.TopK)
def top_k(b: CaseBuilder, kind: ElemKind, op: type[Node]) -> None:
    for k, axis, largest in ((3, 1, True), (1, 0, False), (5, 1, False), (0, 2, True)):
        x = b.tensor(kind, (2, 5, 3), values=_tied(b, kind, (2, 5, 3)))
        b.check(f"k={k} axis {axis} {'largest' if largest else 'smallest'} ties", b.node(op, x, k=k, axis=axis,
                                                                                        largest=largest))


CONV_FORMS = [
    ("3x3 pad 1 bias", (1, 2, 5, 5), (3, 2, 3, 3), {"pads": (1, 1, 1, 1)}),
    ("stride 2 dilation 2", (2, 3, 7, 7), (2, 3, 2, 2), {"strides": (2, 2), "dilations": (2, 2)}),
    ("group 2 asymmetric pad", (1, 4, 5, 4), (4, 2, 3, 1), {"group": 2, "pads": (0, 1, 2, 0)}),
    ("1-D", (1, 2, 7), (3, 2, 3), {"pads": (1, 0)}),
    ("size-1", (1, 1, 1, 1), (1, 1, 1, 1), {}),
]


def _window(x_shape: tuple, w_shape: tuple, attrs: dict) -> dict:
    spatial = len(x_shape) - 2
    return {"kernel": w_shape[2:], "strides": (1,) * spatial, "pads": (0,) * 2 * spatial,
            "dilations": (1,) * spatial, **attrs}


@recipe(nn.Conv, kinds=FLOATS | BYTE_QUANTIZED)
def conv(b: CaseBuilder, kind: ElemKind, op: type[Node]) -> None:
    for label, x_shape, w_shape, attrs in CONV_FORMS:
        x = b.tensor(kind, x_shape, edge=label == "size-1")
        w = b.tensor(kind, w_shape)
        bias = None
        if "bias" in label:
            scale = None if not kind.is_quantized else QUANT_SCALES[kind][0] ** 2
            bias_type = Type(ElemKind.QINT32, (w_shape[0],), scale, 0) if kind.is_quantized else Type(kind, (w_shape[0],))
            bias = b.tensor(bias_type, domain=Domain(-1000, 1000))
        b.check(label, b.node(op, x, w, bias, **_window(x_shape, w_shape, attrs)))


@recipe(linalg.MatMul, kinds=NUMERIC | BYTE_QUANTIZED)
def matmul(b: CaseBuilder, kind: ElemKind, op: type[Node]) -> None:
    domain = SMALL if kind.is_integer else FULL
    forms = [((2, 3), (3, 4), "2-D"), ((2, 2, 3), (2, 3, 5), "batched"), ((1, 1), (1, 1), "size-1"),
             ((2, 0), (0, 3), "empty inner dim"), ((4, 4), (4, 4), "edge values")]
    for a, c, label in forms:
        edge = label == "edge values" and not kind.is_integer
        b.check(f"{label} {a} x {c}", b.node(op, b.tensor(kind, a, edge=edge, domain=domain),
                                            b.tensor(kind, c, edge=edge, domain=domain)))


@recipe(quant.IntegerMatMul, kinds={ElemKind.INT8, ElemKind.UINT8})
def integer_matmul(b: CaseBuilder, kind: ElemKind, op: type[Node]) -> None:
    b.check("no zero points", b.node(op, b.tensor(kind, (3, 4), edge=True), b.tensor(kind, (4, 2), edge=True),
                                            None, None))
    b.check("zero points, per-column rhs", b.node(op, b.tensor(kind, (2, 3, 4)), b.tensor(kind, (2, 4, 5)),
                                                  b.tensor(kind, ()), b.tensor(kind, (5,))))


@recipe(quant.IntegerConv, kinds={ElemKind.INT8, ElemKind.UINT8})
def integer_conv(b: CaseBuilder, kind: ElemKind, op: type[Node]) -> None:
    for label, x_shape, w_shape, attrs in CONV_FORMS[:3]:
        zeros = (b.tensor(kind, ()), b.tensor(kind, (w_shape[0],))) if "bias" in label else (None, None)
        bias = b.tensor(ElemKind.INT32, (w_shape[0],), domain=Domain(-1000, 1000)) if "bias" in label else None
        b.check(label, b.node(op, b.tensor(kind, x_shape, edge=True), b.tensor(kind, w_shape), *zeros, bias,
                              **_window(x_shape, w_shape, attrs)))


DATA_KINDS = frozenset(ElemKind)


@recipe(tensor.Reshape, tensor.Transpose, tensor.Slice, tensor.Concat, tensor.Gather, tensor.Expand)
def data(b: CaseBuilder, kind: ElemKind, op: type[Node]) -> None:
    def x(*shape: int) -> object:
        return b.tensor(kind, shape, edge=True)

    forms = {
        "Reshape": [("(2,3,4) -> (4,6)", (x(2, 3, 4),), {"shape": (4, 6)}),
                    ("(0,3) -> (3,0)", (x(0, 3),), {"shape": (3, 0)}), ("(1,) -> ()", (x(1),), {"shape": ()})],
        "Transpose": [("perm (2,0,1)", (x(2, 3, 4),), {"perm": (2, 0, 1)}),
                      ("perm (1,0,2)", (x(3, 0, 2),), {"perm": (1, 0, 2)})],
        "Slice": [("steps (2,-2)", (x(5, 6),), {"starts": (1, 5), "ends": (4, -1), "steps": (2, -2)}),
                  ("empty result", (x(5, 6),), {"starts": (2, 0), "ends": (2, 6), "steps": (1, 1)}),
                  ("through index 0", (x(4,),), {"starts": (3,), "ends": (-1,), "steps": (-1,)})],
        "Concat": [("axis 1 with an empty part", (x(2, 1, 3), x(2, 2, 3), x(2, 0, 3)), {"axis": 1}),
                   ("one part", (x(3,),), {"axis": 0})],
        "Gather": [("axis 0, negative indices", (x(4, 3), b.tensor(ElemKind.INT64, (2, 2), values=np.array(
                        [[0, -1], [3, -4]]))), {"axis": 0}),
                   ("axis 1, rank-0 index", (x(2, 3), b.tensor(ElemKind.INT64, (), values=np.array(2))), {"axis": 1})],
        "Expand": [("(3,1) -> (2,3,4)", (x(3, 1),), {"shape": (2, 3, 4)}), ("(1,) -> (2,2)", (x(1),), {"shape": (2, 2)})],
    }[op.spec.name]
    for label, operands, attrs in forms:
        b.check(label, b.node(op, *operands, **attrs))


@recipe(core.Splat, kinds=DATA_KINDS - QUANTIZED)
def splat(b: CaseBuilder, kind: ElemKind, op: type[Node]) -> None:
    """Large (over 64 KiB for one-byte kinds), so constant folding keeps it a Splat."""
    value = -1.5 if kind.is_float else (3.0 if kind.is_integer else 1.0)
    b.check(f"(257,256) of {value}", b.node(op, shape=(257, 256), value=value, elem=kind))


@recipe(quant.Quantize, quant.Dequantize, quant.Rescale, quant.Reinterpret, kinds=QUANTIZED)
def quantization(b: CaseBuilder, kind: ElemKind, op: type[Node]) -> None:
    """Column `kind` is the quantized side; the other is float32, int8q or the storage kind."""
    shape = (4, 9)
    scale, offset = QUANT_SCALES[kind]
    low, high = integer_bounds(kind)
    name = op.spec.name
    if name == "Quantize":
        steps = b.rng.integers(low - offset, high - offset, shape[0] * shape[1])
        ties = (steps + 0.5) * scale  # exactly halfway between two representable values
        ties[:4] = [(high - offset + 10) * scale, (low - offset - 10) * scale, 0.0, -0.0]  # saturation
        b.check("ties and saturation", b.node(op, b.tensor(F32, shape, values=ties.reshape(shape)),
                                              result_type=quantized_type(kind, shape)))
    elif name == "Dequantize":
        b.check("extremes", b.node(op, b.tensor(kind, shape, edge=True), elem=F32))
    elif name == "Rescale":
        down = Type(ElemKind.QINT8, shape, scale * 2, -5)  # odd q - offset rounds a tie
        up = Type(kind, shape, scale / 2, offset)  # doubling saturates the extremes
        b.check("halving: ties", b.node(op, b.tensor(kind, shape, edge=True), result_type=down))
        b.check("doubling: saturation", b.node(op, b.tensor(kind, shape, edge=True), result_type=up))
    else:
        plain = Type(kind.quantized_storage, shape)
        b.check("strip", b.node(op, b.tensor(kind, shape, edge=True), result_type=plain))
        b.check("attach", b.node(op, b.tensor(plain, edge=True), result_type=quantized_type(kind, shape)))


@recipe(quant.IntegerLayerNorm, kinds={ElemKind.QINT8})
def integer_layer_norm(b: CaseBuilder, kind: ElemKind, op: type[Node]) -> None:
    """The integer constants the quantizer would make (`layernorm_params`) from float gamma and beta; rows of edge
    codes, constant rows (variance 0: epsilon alone keeps the root above 0) and rows of one element."""
    forms = (("(2,8), epsilon 1e-5", (2, 8), 1e-5, None), ("(2,3,16) edge codes", (2, 3, 16), 1e-3, None),
             ("(3,1) one element per row", (3, 1), 1e-5, None), ("(2,8) constant rows", (2, 8), 1e-5, 7))
    for label, shape, epsilon, fill in forms:
        length = shape[-1]
        x_type, y_type = quantized_type(kind, shape), Type(kind, shape, 0.05, 3)
        gamma = b.rng.uniform(0.5, 1.5, length) * b.rng.choice([-1.0, 1.0], length)
        params = layernorm_params(gamma, b.rng.uniform(-0.5, 0.5, length), epsilon, x_type.scale, y_type.scale)
        x = b.tensor(x_type, edge=True, values=None if fill is None else np.full(shape, fill))
        b.check(label, b.node(op, x, b.tensor(ElemKind.INT32, (length,), values=params.gamma),
                              b.tensor(ElemKind.INT32, (length,), values=params.beta), epsilon=params.epsilon,
                              shift=params.shift, result_type=y_type))
