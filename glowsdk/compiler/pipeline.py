"""The compilation pipeline from a verified graph to a backend's compiled function.

Today: verify, check backend support, hand over. Optimisation, lowering,
scheduling, IRGen and the IR optimiser slot in here as they arrive (paper 3.6).
"""
from __future__ import annotations

from ..backends.base import Backend, CompiledFunction, CompileOptions
from ..errors import UnsupportedOpsError
from ..graph.function import Function


def compile_function(function: Function, backend: Backend,
                     options: CompileOptions | None = None) -> CompiledFunction:
    """Verify `function`, make sure `backend` runs every node, and compile it."""
    function.verify()
    unsupported = {n.kind for n in function.nodes if not backend.is_op_supported(n)}
    if unsupported:
        raise UnsupportedOpsError(unsupported, f"target '{backend.name}'")
    return backend.compile(function, options or CompileOptions())
