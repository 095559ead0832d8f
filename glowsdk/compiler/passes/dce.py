"""Dead-code elimination: drop nodes whose results nobody uses, and unused constants."""
from __future__ import annotations

from ...graph.function import Function
from .manager import Pass, register_pass


@register_pass
class DeadCodeElimination(Pass):
    """Erase every node that no Save reaches; Saves are the roots."""

    name = "dce"

    def run(self, function: Function) -> bool:
        constants = len(function.module.constants)
        erased = function.erase_dead()
        function.module.erase_unused_storage()
        return bool(erased) or len(function.module.constants) != constants
