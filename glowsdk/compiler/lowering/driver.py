"""Node lowering driven by the backend (paper 3.4, 3.6 step 4).

Each node that has a lowering rule, and that the backend does not ask to keep,
is replaced by the rule's sub-graph; new nodes are lowered in turn until only
primitives and kept nodes remain. A primitive the backend does not support is
rewritten by its alternative lowering (PRIMITIVE_LOWERINGS) when it has one, the
backend declares every primitive that lowering builds from and runs every node
it made; otherwise the rewrite is undone and the node stays (for a fallback
device, or to be reported). The function is verified after every rewrite when
`verify_each` is set (tests, debugging), so a broken rule is caught at the node
that introduced it; the result is always verified once at the end.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ...errors import GraphError, UnsupportedOpsError
from ...graph.function import Function
from ...graph.node import Node, NodeValue, Storage
from ..backend import Backend, unsupported_nodes
from . import rules  # noqa: F401  (registers the lowering rules)
from .registry import LOWERINGS, PRIMITIVE_LOWERINGS, AlternativeLowering, Lowerer, Rule


@dataclass
class LoweringReport:
    """How many nodes of each kind were lowered, and which the backend kept."""

    lowered: Counter = field(default_factory=Counter)
    kept: Counter = field(default_factory=Counter)


def _rule(node: Node, backend: Backend, partial: bool) -> Rule | None:
    """The lowering of a high-level node, or the alternative lowering of a primitive `backend` does not
    support, when the backend declares every primitive the alternative builds from (`partial`: its core)."""
    if node.kind in LOWERINGS:
        return LOWERINGS[node.kind]
    alternative = PRIMITIVE_LOWERINGS.get(node.kind)
    if alternative is None or backend.is_op_supported(node):
        return None
    needed = {alternative.core} if partial else alternative.onto
    return alternative if all(kind in backend.primitives for kind in needed) else None


def _taken(rule: AlternativeLowering, made: list[Node], backend: Backend, partial: bool) -> bool:
    """Whether the backend runs what an alternative lowering made (`partial`: all of its core nodes)."""
    if partial:
        return all(backend.is_op_supported(n) for n in made if n.kind == rule.core)
    return all(backend.is_op_supported(n) for n in made)


def _undo(function: Function, made: list[Node]) -> None:
    """Erase a rewrite not taken: its nodes, then the constants nobody uses any more (its index arrays)."""
    for node in reversed(made):
        function.erase(node)
    function.module.erase_unused_storage()


def lower_function(function: Function, backend: Backend, verify_each: bool = False,
                   check_support: bool = True, partial: bool = False) -> LoweringReport:
    """Lower `function` for `backend`; UnsupportedOpsError lists what remains unsupported (unless the caller
    checks later: a backend that runs only quantized code supports the graph only once it is quantized)."""
    report = LoweringReport()
    worklist = list(function.nodes)
    while worklist:
        node = worklist.pop(0)
        if node.function is not function or isinstance(node, Storage):
            continue
        rule = _rule(node, backend, partial)
        if rule is None:
            continue
        if not backend.should_lower(node):
            report.kept[node.kind] += 1
            continue
        before = set(map(id, function.nodes))
        with function.inserting_before(node):
            produced = rule(Lowerer(function, node), node)
        if produced is None:
            continue
        made = [n for n in function.nodes if id(n) not in before]
        if isinstance(rule, AlternativeLowering) and not _taken(rule, made, backend, partial):
            _undo(function, made)  # the backend runs the result no better than the node
            continue
        values = [produced] if isinstance(produced, NodeValue) else list(produced)
        if len(values) != len(node.types):
            raise AssertionError(f"lowering of {node.kind} returned {len(values)} values for "
                                 f"{len(node.types)} results")
        for old, new in zip(node.results, values):
            if new is not None and old.node.users:
                function.replace_all_uses(old, new)
        if any(u for u in node.users):
            raise GraphError(f"lowering of '{node.name}' ({node.kind}) left a result without replacement")
        function.erase(node)
        report.lowered[node.kind] += 1
        worklist[:0] = made
        if verify_each:
            try:
                function.verify()
            except GraphError as err:
                raise GraphError(f"after lowering '{node.name}' ({node.kind}): {err}") from None
    function.erase_dead()
    function.verify()
    remaining = unsupported_nodes(function, backend) if check_support else []
    if remaining:
        raise UnsupportedOpsError({n.kind for n in remaining}, f"target '{backend.name}'")
    return report
