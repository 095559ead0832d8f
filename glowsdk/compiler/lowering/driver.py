"""Node lowering driven by the backend (paper 3.4, 3.6 step 4).

Each node that has a lowering rule, and that the backend does not ask to keep,
is replaced by the rule's sub-graph; new nodes are lowered in turn until only
primitives and kept nodes remain. The function is verified after every rewrite
when `verify_each` is set (tests, debugging), so a broken rule is caught at the
node that introduced it; the result is always verified once at the end.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ...backends.base import Backend, unsupported_nodes
from ...errors import GraphError, UnsupportedOpsError
from ...graph.function import Function
from ...graph.node import NodeValue, Storage
from . import rules  # noqa: F401  (registers the lowering rules)
from .registry import LOWERINGS, Lowerer


@dataclass
class LoweringReport:
    """How many nodes of each kind were lowered, and which the backend kept."""

    lowered: Counter = field(default_factory=Counter)
    kept: Counter = field(default_factory=Counter)


def lower_function(function: Function, backend: Backend, verify_each: bool = False,
                   check_support: bool = True) -> LoweringReport:
    """Lower `function` for `backend`; UnsupportedOpsError lists what remains unsupported (unless the caller
    checks later: a backend that runs only quantized code supports the graph only once it is quantized)."""
    report = LoweringReport()
    worklist = list(function.nodes)
    while worklist:
        node = worklist.pop(0)
        if node.function is not function or isinstance(node, Storage) or node.kind not in LOWERINGS:
            continue
        if not backend.should_lower(node):
            report.kept[node.kind] += 1
            continue
        before = set(map(id, function.nodes))
        with function.inserting_before(node):
            produced = LOWERINGS[node.kind](Lowerer(function, node), node)
        if produced is None:
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
        worklist[:0] = [n for n in function.nodes if id(n) not in before]
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
