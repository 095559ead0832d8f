"""The primitive set: the node kinds a backend implements (paper 3.4).

Every other node kind lowers, possibly in several steps, onto these. Each entry
names the kind, the element kinds a backend may claim for it, its family (the
unit a vendor usually implements as one kernel template), and, where the kind is
broader than the primitive, a canonical-form predicate (MatMul is a primitive
only without broadcasting). `vendor_guide/primitives.md` is generated from this
table (`python -m glowsdk.compiler.lowering.docgen`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ...graph.node import Node
from ...graph.nodes import core, elementwise as ew, linalg, nn, quant, reduce, tensor
from ...graph.types import ElemKind

FLOATS = frozenset({ElemKind.FLOAT32, ElemKind.FLOAT16, ElemKind.BFLOAT16, ElemKind.FLOAT64})
INTEGERS = frozenset(k for k in ElemKind if k.is_integer)
NUMERIC = FLOATS | INTEGERS
BOOL = frozenset({ElemKind.BOOL})
QUANTIZED = frozenset(k for k in ElemKind if k.is_quantized)
ANY = frozenset(ElemKind)
BYTES = frozenset({ElemKind.INT8, ElemKind.UINT8, ElemKind.INT32})


@dataclass(frozen=True)
class Primitive:
    """One primitive: a node kind, the element kinds it may carry, its family."""

    kind: type[Node]
    elems: frozenset[ElemKind]
    family: str
    form: Callable[[Node], bool] | None = None
    form_doc: str = ""

    @property
    def name(self) -> str:
        return self.kind.spec.name

    def accepts(self, node: Node) -> bool:
        """Whether `node` is this primitive in canonical form."""
        return node.kind == self.name and (self.form is None or self.form(node))


def _unbroadcast_matmul(node: Node) -> bool:
    a, b = node.inputs[0].type.shape, node.inputs[1].type.shape
    return len(a) == len(b) >= 2 and a[:-2] == b[:-2]


_TABLE = [
    Primitive(linalg.MatMul, NUMERIC | QUANTIZED, "matrix", _unbroadcast_matmul,
              "both operands of one rank >= 2 with equal batch dims (no broadcasting, no 1-D)"),
    Primitive(nn.Conv, FLOATS | QUANTIZED, "matrix"),
    Primitive(quant.IntegerMatMul, BYTES, "matrix"),
    Primitive(quant.IntegerConv, BYTES, "matrix"),
    *(Primitive(k, NUMERIC | QUANTIZED, "binary") for k in (ew.Add, ew.Sub, ew.Mul, ew.Max, ew.Min)),
    *(Primitive(k, NUMERIC, "binary") for k in (ew.Div, ew.Pow, ew.Mod)),
    *(Primitive(k, NUMERIC | BOOL, "compare") for k in (ew.Equal, ew.Less)),
    *(Primitive(k, BOOL, "logic") for k in (ew.And, ew.Or, ew.Not)),
    Primitive(ew.Where, ANY, "select"),
    *(Primitive(k, FLOATS, "unary") for k in
      (ew.Exp, ew.Log, ew.Sqrt, ew.Tanh, ew.Erf, ew.Floor, ew.Round, ew.Sin, ew.Cos)),
    Primitive(ew.Cast, ANY - QUANTIZED, "convert"),
    *(Primitive(k, NUMERIC | QUANTIZED, "pool") for k in (nn.MaxPool, nn.MaxPoolWithIndices, nn.AveragePool)),
    *(Primitive(k, NUMERIC, "reduce") for k in
      (reduce.ReduceSum, reduce.ReduceMax, reduce.ReduceMin, reduce.ReduceProd)),
    *(Primitive(k, NUMERIC, "reduce") for k in (reduce.ArgMax, reduce.ArgMin)),
    Primitive(reduce.TopK, NUMERIC, "sort"),
    *(Primitive(k, ANY, "data") for k in
      (tensor.Reshape, tensor.Transpose, tensor.Slice, tensor.Concat, tensor.Gather, tensor.Expand, core.Splat)),
    *(Primitive(k, FLOATS | QUANTIZED | INTEGERS, "quant") for k in
      (quant.Quantize, quant.Dequantize, quant.Rescale, quant.Reinterpret)),
    Primitive(quant.IntegerLayerNorm, frozenset({ElemKind.QINT8, ElemKind.INT32}), "quant"),
]

PRIMITIVES: dict[str, Primitive] = {p.name: p for p in _TABLE}
"""Every primitive by kind name."""


def is_primitive(node: Node) -> bool:
    """Whether `node` is a primitive in canonical form (whatever a backend supports)."""
    primitive = PRIMITIVES.get(node.kind)
    return primitive is not None and primitive.accepts(node)
