"""IRGen: a scheduled, lowered graph becomes low-level IR (paper 3.5).

A one-to-many translation that decides nothing about memory: placeholders and
constants become weights, every node becomes one `allocactivation` per result
(placed just before the node's instruction) and then its compute instruction,
and a `Save` becomes a `copy` into its output weight. Every `deallocactivation`
goes at the end of the program, so each activation starts out living to the end;
shrinking lifetimes, sharing buffers and turning reshapes into views are the IR
optimiser's job, and placing buffers is the allocator's. Instructions are named
after their nodes and activations after the results they hold, so a dump reads
like the graph it came from.
"""
from __future__ import annotations

from ...errors import UnsupportedError
from ...graph.function import Function
from ...graph.node import Constant, NodeValue, Placeholder
from ...graph.nodes.core import Save
from .function import Instruction, IRFunction, Value
from .instructions import derived_spec


def generate_ir(function: Function) -> IRFunction:
    """The IR of `function`, in its schedule order, with every activation live to the end."""
    ir = IRFunction(function.name)
    values = _declare(function, ir)
    activations: list[Instruction] = []
    for node in function.topo_order():
        if isinstance(node, Save):
            # copy @out %output_weight, @in %buffer
            ir.create("Copy", [values[node.output], values[node.input]], name=node.name)
            continue
        try:
            spec = derived_spec(node.kind)
        except ValueError as err:
            raise UnsupportedError(f"node '{node.name}' ({node.kind}): {err}") from None
        dests = [ir.create("AllocActivation", [], name=f"{node.name}.{node.result_name(i)}", type=t)
                 for i, t in enumerate(node.types)]
        sources = [None if v is None else values[v] for v in node.inputs]
        ir.create(spec, [*dests, *sources], name=node.name, **node.attrs)
        values.update(zip(node.results, dests))
        activations.extend(dests)
    for alloc in activations:
        ir.create("DeallocActivation", [alloc], name=f"dealloc.{alloc.name}")
    return ir


def _declare(function: Function, ir: IRFunction) -> dict[NodeValue, Value]:
    """Weights for the storage `function` touches: inputs, then constants, then outputs.

    Weights keep their storage's names (unique in the module, so never renamed).
    """
    used = {id(v.node): v.node for node in function.nodes for v in node.present_inputs()}
    storage: list[tuple[Constant | Placeholder, str]] = []
    storage += [(ph, "input") for ph in function.input_placeholders()]
    storage += [(c, "constant") for c in function.module.constants.values() if id(c) in used]
    storage += [(ph, "output") for ph in function.output_placeholders()]
    values: dict[NodeValue, Value] = {}
    for node, role in storage:
        value = node.value if isinstance(node, Constant) else None
        values[node.result()] = ir.add_weight(node.name, node.type, role, value)
    return values
