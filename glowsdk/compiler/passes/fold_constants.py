"""Constant folding: run the reference kernels on nodes whose operands are all Constants.

The interpreter's kernels double as the constant folder (STYLE 8): a node whose
present operands are all Constants (a Splat has none) is evaluated with
`run_node` and its results become Constants. One sweep in schedule order folds
whole chains, e.g. the light models' Splat weights and Reshape'd scales.

The memory rule. Folding must not turn a cheap recipe into a large tensor for
nothing: a node is folded only when

- its results are small (at most SMALL_BYTES in all), or do not outgrow its
  operands (at most GROWTH times their bytes), or
- its results are weights: every reader takes them as a parameter operand (any
  operand after the first) of a compute node (families nn, linalg, rnn, quant:
  Conv's filter and bias, Gemm's b and c, MatMul's rhs, BatchNorm's statistics,
  ...), directly or through other constant-only nodes that are weights
  themselves. A kernel needs a weight in memory anyway.

So a large Splat feeding an Add with an activation stays a Splat, while a large
Splat filter of a Conv becomes a Constant. A node whose kernel fails on its
constant operands (say, an out-of-range Gather index) is left for run time to
report.

Dequantize of a Constant (the int8 weights of an imported QDQ model) is not
folded: the quantization pipeline's fold-qdq turns it into integer compute, and
its last pass, fold-dequantized, folds what stays float.
"""
from __future__ import annotations

from ...errors import GlowError
from ...graph.function import Function
from ...graph.node import Constant, Node, Storage
from ...graph.nodes.core import Save
from ...reference.evaluator import run_node
from ...reference.registry import KERNELS
from .manager import Pass, register_pass

SMALL_BYTES = 64 * 1024
GROWTH = 2
WEIGHT_FAMILIES = frozenset({"nn", "linalg", "rnn", "quant"})


@register_pass
class FoldConstants(Pass):
    """Replace constant-only nodes by Constants, within the memory rule above."""

    name = "fold-constants"
    fold_dequantize = False

    def run(self, function: Function) -> bool:
        computable = _constant_computable(function, self.fold_dequantize)
        weights: dict[Node, bool] = {}
        changed = False
        for node in list(function.nodes):
            if node not in computable or not all(isinstance(v.node, Constant) for v in node.present_inputs()):
                continue
            if not (_small_or_not_growing(node) or _is_weight(node, computable, weights)):
                continue
            try:
                arrays = run_node(node, [None if v is None else v.node.value for v in node.inputs])
            except (GlowError, ArithmeticError, IndexError, ValueError):
                continue
            for value, array in zip(node.results, arrays):
                name = node.name if len(node.types) == 1 else f"{node.name}.{node.result_name(value.index)}"
                if any(v == value for user in node.users for v in user.inputs):
                    const = function.module.create_constant(name, array, value.type)
                    function.replace_all_uses(value, const.result())
            function.erase(node)
            changed = True
        return changed


def _constant_computable(function: Function, dequantize: bool) -> set[Node]:
    """Nodes computable at compile time: operands are Constants or such nodes, and a kernel exists."""
    computable: set[Node] = set()
    for node in function.nodes:
        if isinstance(node, Save) or node.kind not in KERNELS or (node.kind == "Dequantize" and not dequantize):
            continue
        if all(isinstance(v.node, Constant) or v.node in computable for v in node.present_inputs()):
            computable.add(node)
    return computable


def _small_or_not_growing(node: Node) -> bool:
    produced = sum(t.nbytes for t in node.types)
    consumed = sum(v.type.nbytes for v in node.present_inputs())
    return produced <= max(SMALL_BYTES, GROWTH * consumed)


def _is_weight(node: Node, computable: set[Node], memo: dict[Node, bool]) -> bool:
    """Whether every reader of `node` takes it as a weight, directly or through constant-only nodes."""
    if node not in memo:
        memo[node] = bool(node.users) and all(
            _is_weight(user, computable, memo) if user in computable else _reads_as_weight(user, node)
            for user in node.users)
    return memo[node]


def _reads_as_weight(user: Node, node: Node) -> bool:
    """Whether `user` reads `node` only through parameter operands of a compute kind."""
    if isinstance(user, Storage) or user.spec.family not in WEIGHT_FAMILIES:
        return False
    return all(slot > 0 for slot, v in enumerate(user.inputs) if v is not None and v.node is node)


@register_pass
class FoldDequantized(FoldConstants):
    """fold-constants that also folds Dequantize of Constants (quantized weights that stay float)."""

    name = "fold-dequantized"
    fold_dequantize = True
