"""Text and Graphviz dumps of a function (Glow's dump / dumpDAG), driven by the node records."""
from __future__ import annotations

from typing import Any

import numpy as np

from .function import Function
from .node import Constant, Node, NodeValue, Placeholder


def format_attr(value: Any) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(format_attr(v) for v in value) + "]"
    if isinstance(value, np.ndarray):
        return f"array<{value.dtype}{list(value.shape)}>"
    if isinstance(value, float):
        return f"{value:.6g}"
    if hasattr(value, "value") and not isinstance(value, (int, str, bool)):
        return str(value.value)
    return repr(value) if isinstance(value, str) else str(value)


def _operand(value: NodeValue | None) -> str:
    return "none" if value is None else f"%{value.name}"


def format_node(node: Node) -> str:
    """`%name = Kind(%a, %b) {attr=...} : type` — one line per node."""
    args = []
    operand_specs = node.spec.operands
    for i, value in enumerate(node.inputs):
        spec = operand_specs[min(i, len(operand_specs) - 1)]
        label = f"{spec.name}{i - len(operand_specs) + 1}" if spec.variadic else spec.name
        args.append(f"{label}=" + _operand(value))
    attrs = ", ".join(f"{k}={format_attr(v)}" for k, v in node.attrs.items())
    types = ", ".join(str(t) for t in node.types)
    text = f"%{node.name} = {node.kind}({', '.join(args)})"
    if attrs:
        text += f" {{{attrs}}}"
    if types:
        text += f" : {types}"
    return text


def format_function(function: Function) -> str:
    """The whole function: declarations of the storage it uses, then its nodes in order."""
    lines = [f"function {function.name} {{", "  declare {"]
    used = {id(v.node) for n in function.nodes for v in n.present_inputs()}
    module = function.module
    for ph in module.placeholders.values():
        if id(ph) in used:
            role = "output" if ph.is_output else "input"
            lines.append(f"    %{ph.name} = placeholder {role} : {ph.type}")
    for const in module.constants.values():
        if id(const) in used:
            lines.append(f"    %{const.name} = constant : {const.type}")
    lines.append("  }")
    lines.append("  nodes {")
    lines.extend("    " + format_node(n) for n in function.nodes)
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines)


def _dot_id(node: Node) -> str:
    return '"' + node.name.replace('"', '\\"') + '"'


def _dot_escape(text: str) -> str:
    for ch in "\\{}|<>\"":
        text = text.replace(ch, "\\" + ch)
    return text


def format_dot(function: Function) -> str:
    """A Graphviz digraph: record-shaped nodes with kind, name, attributes and result types."""
    lines = [f'digraph "{function.name}" {{', "  rankdir=TB;",
             '  node [shape=record, fontname="Helvetica", fontsize=10];']
    storage: dict[int, Node] = {}
    for node in function.nodes:
        for value in node.present_inputs():
            if isinstance(value.node, (Constant, Placeholder)):
                storage[id(value.node)] = value.node
    for node in storage.values():
        color = "lightgrey" if isinstance(node, Constant) else "lightblue"
        label = _dot_escape(f"{node.kind} {node.name}") + "|" + _dot_escape(str(node.type))
        lines.append(f'  {_dot_id(node)} [label="{{{label}}}", style=filled, fillcolor={color}];')
    for node in function.nodes:
        fields = [_dot_escape(f"{node.kind} {node.name}")]
        fields += [_dot_escape(f"{k}: {format_attr(v)}") for k, v in node.attrs.items()]
        fields += [_dot_escape(str(t)) for t in node.types]
        lines.append(f'  {_dot_id(node)} [label="{{{"|".join(fields)}}}"];')
        for i, value in enumerate(node.present_inputs()):
            writes = node.kind == "Save" and i == 1  # a Save's second operand is where it writes
            src, dst = (node, value.node) if writes else (value.node, node)
            lines.append(f"  {_dot_id(src)} -> {_dot_id(dst)};")
    lines.append("}")
    return "\n".join(lines)
