"""From a scheduled, lowered graph to a Program: IR, IR optimisation, static allocation.

The one road every IR-consuming backend takes (paper 3.5): IRGen translates the
graph, the IR optimiser (`IR_OPTIMIZATION`) shrinks lifetimes, shares buffers and
peels views, and the allocator gives every buffer its byte offset. A backend then
only has to turn instructions at known addresses into work for its device.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import GraphError
from ...graph.function import Function
from ..passes.manager import PassManager
from .allocator import MemoryPlan, allocate
from .function import IRFunction
from .irgen import generate_ir
from .passes import IR_OPTIMIZATION, IR_PASSES


@dataclass
class Program:
    """The optimised IR of one function and where each of its buffers lives."""

    ir: IRFunction
    plan: MemoryPlan


def build_program(function: Function, *, passes: PassManager | None = None) -> Program:
    """IRGen, then the IR optimisation pipeline (run by `passes`, e.g. to dump IR), then allocation."""
    manager = passes or PassManager(registry=IR_PASSES)
    ir = generate_ir(function)
    if manager.verify:
        try:
            ir.verify()
        except GraphError as err:
            raise GraphError(f"after IRGen: {err}") from None
    manager.run(IR_OPTIMIZATION, ir)
    return Program(ir, allocate(ir))
