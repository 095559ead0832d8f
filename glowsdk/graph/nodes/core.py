"""Core node kinds: writing results out, and tensors built from attributes."""
from __future__ import annotations

from ..kinds import define_node
from ..node import Node, Placeholder
from ..spec import elem_attr, float_attr, ints_attr
from ..types import Type


def _verify_save(node: Node) -> None:
    target = node.output.node
    if not isinstance(target, Placeholder) or not target.is_output:
        raise node.fail(f"can only save into an output Placeholder, not '{target.name}'")
    if node.input.type != target.type:
        raise node.fail(f"saves {node.input.type} into '{target.name}' of type {target.type}")


Save = define_node(
    "Save", "input output", results="", infer=lambda node: [], verify=_verify_save,
    family="core",
    doc="Copy `input` into the output Placeholder `output`: how a function returns values.")

Splat = define_node(
    "Splat", "", attrs=[ints_attr("shape"), float_attr("value"), elem_attr("elem")],
    infer=lambda node: Type(node.elem, node.shape), family="core",
    doc="A tensor of `shape` whose every element is `value` (ONNX ConstantOfShape).")
