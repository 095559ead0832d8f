"""Instrumenting a lowered graph for profiling (paper 4.2).

Glow inserts QuantizationProfile nodes that update a histogram in memory on the
device. glowsdk instead saves every value worth profiling into an output
Placeholder of its own, `__profile__/<value name>`: a Save is a root that no
pass removes, so the values survive every later stage on every backend, and
they come back with the outputs, where `collect_profile` accumulates them.

Profiled: every float-valued result of a compute node (not Constants or
Placeholders, not Saves). The network's float inputs are profiled by
`collect_profile` straight from the calibration inputs.
"""
from __future__ import annotations

from ..errors import GraphError
from ..graph.function import Function
from ..graph.node import NodeValue, Storage
from ..graph.nodes.core import Save

PREFIX = "__profile__/"


def profiled_values(function: Function) -> list[NodeValue]:
    """The values `instrument_for_profiling` saves, in node order."""
    return [value for node in function.nodes if not isinstance(node, (Storage, Save))
            for value in node.results if value.type.elem.is_float]


def instrument_for_profiling(function: Function) -> dict[str, NodeValue]:
    """Save every profiled value into `__profile__/<value name>`; returns those outputs' values by name.

    Meant as `compile_function(..., instrument=instrument_for_profiling)`, so it
    sees the lowered, optimised graph whose value names profiles are keyed by.
    """
    saved: dict[str, NodeValue] = {}
    for value in profiled_values(function):
        name = PREFIX + value.name
        if name in function.module.placeholders:
            raise GraphError(f"cannot profile '{value.name}': the module already has a placeholder '{name}'")
        output = function.save(value, name)
        if output.name != name:  # a value or node already took the name
            raise GraphError(f"cannot profile '{value.name}': the name '{name}' is taken")
        saved[name] = value
    return saved

