"""Common-subexpression elimination by structural identity (`Node.key()`)."""
from __future__ import annotations

from ...graph.function import Function
from ...graph.node import Node
from ...graph.nodes.core import Save
from .manager import Pass, register_pass


@register_pass
class CommonSubexpressionElimination(Pass):
    """Merge nodes of one kind, operands, attributes and types into the first of them.

    One sweep in schedule order suffices for chains: once a node's duplicate is
    merged, its users' keys name the survivor, so they match too. Saves are never
    merged (each writes its own output); storage is unique by construction and is
    not in the node list.
    """

    name = "cse"

    def run(self, function: Function) -> bool:
        seen: dict[tuple, Node] = {}
        merged = False
        for node in list(function.nodes):
            if isinstance(node, Save):
                continue
            twin = seen.setdefault(node.key(), node)
            if twin is node:
                continue
            for old, new in zip(node.results, twin.results):
                function.replace_all_uses(old, new)
            function.erase(node)
            merged = True
        return merged
