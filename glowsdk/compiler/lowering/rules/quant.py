"""Lowering rules of the quantization kinds that are not primitives: the int8 table lookup."""
from __future__ import annotations

from ....graph.node import Node, NodeValue
from ....graph.nodes import elementwise as ew
from ....graph.nodes import quant, tensor
from ....graph.types import ElemKind
from ..registry import Lowerer, lowers


@lowers(quant.TableLookup)
def _table_lookup(b: Lowerer, node: Node) -> NodeValue:
    """Exact: the table's entries are the results, picked by an int32 index (a host's integer Gather)."""
    # TableLookup(x, T) -> Gather(T, Cast(Reinterpret(x, int8), int32) + 128)
    x = node.input
    raw = b.add(quant.Reinterpret, x, result_type=x.type.with_elem(ElemKind.INT8))
    index = b.add(ew.Add, b.add(ew.Cast, raw, to=ElemKind.INT32), b.scalar(128, ElemKind.INT32))
    return b.add(tensor.Gather, node.table, index, axis=0)
