"""Cutting a function into sub-functions along an assignment of its nodes to parts.

Each part becomes a Function of its own Module. A value produced in one part and used in another
is a border: the producer saves it to an output placeholder named after the value, the consumer
reads it from an input placeholder of that name. Borders travel as float32: a quantized border is
dequantized on the producer's side and quantized back, with the same type, on the consumer's
side. That round trip is exact (the quantized integers come back unchanged), and it gives every
NPU part the shape the NPU backend compiles: float inputs quantized on entry, dequantized outputs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import GraphError
from ...graph.function import Function, Module
from ...graph.node import Constant, Node, NodeValue, Placeholder
from ...graph.nodes import quant
from ...graph.nodes.core import Save
from ...graph.types import ElemKind


@dataclass
class Piece:
    """One part: its function, and the names of the tensors it reads and writes (network or border)."""

    index: int
    function: Function
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)


def part_of(node: Node, assignment: dict[int, int]) -> int | None:
    """The part of a compute node, or of a Save (its producer's part); None for storage."""
    if isinstance(node, Save):
        return assignment.get(id(node.input.node), 0)
    return assignment.get(id(node))


def border_values(function: Function, assignment: dict[int, int]) -> dict[NodeValue, set[int]]:
    """Each value used in a part other than its producer's -> the parts that use it."""
    borders: dict[NodeValue, set[int]] = {}
    for node in function.nodes:
        user_part = part_of(node, assignment)
        for value in node.present_inputs():
            producer = assignment.get(id(value.node))
            if producer is not None and producer != user_part:
                borders.setdefault(value, set()).add(user_part)
    return borders


def cut(function: Function, assignment: dict[int, int], parts: int) -> list[Piece]:
    """One Piece per part 0..parts-1; `assignment` maps id(node) of every compute node to its part."""
    borders = border_values(function, assignment)
    names = {value: f"{value.name}" for value in borders}
    pieces = []
    for index in range(parts):
        module = Module()
        module.reserve_names([*names.values(), *(p.name for p in function.output_placeholders())])
        piece = Piece(index, module.create_function(function.name))
        mapped: dict[NodeValue, NodeValue] = {}
        for node in function.nodes:
            if part_of(node, assignment) != index:
                continue
            if isinstance(node, Save):
                saved = _operand(piece, node.input, mapped, names)
                placeholder = piece.function.save(saved, node.output.node.name)
                _check_name(placeholder, node.output.node.name)
                piece.outputs.append(placeholder.name)
                continue
            inputs = [None if v is None else _operand(piece, v, mapped, names) for v in node.inputs]
            with piece.function.from_origin(node.origin):
                twin = piece.function.create(type(node), inputs, name=node.name, **node.attrs)
            for k, value in enumerate(node.results):
                mapped[value] = twin.result(k)
                if value in borders:
                    _save_border(piece, twin.result(k), names[value])
        pieces.append(piece)
    return pieces


def _operand(piece: Piece, value: NodeValue, mapped: dict[NodeValue, NodeValue],
             names: dict[NodeValue, str]) -> NodeValue:
    """`value` as seen inside the piece: its own node's result, a copied Constant, or an input placeholder."""
    if value in mapped:
        return mapped[value]
    module = piece.function.module
    source = value.node
    if isinstance(source, Constant):
        found = module.constants.get(source.name) or module.create_constant(source.name, source.value, source.type)
        mapped[value] = found.result()
        return mapped[value]
    name = source.name if isinstance(source, Placeholder) else names[value]
    carried = value.type
    if carried.elem.is_quantized:
        carried = carried.with_elem(ElemKind.FLOAT32)
    placeholder = module.create_placeholder(name, carried)
    _check_name(placeholder, name)
    piece.inputs.append(name)
    result = placeholder.result()
    if value.type.elem.is_quantized:
        result = piece.function.add(quant.Quantize, result, name=f"{name}/quantize", result_type=value.type)
    mapped[value] = result
    return result


def _save_border(piece: Piece, value: NodeValue, name: str) -> None:
    if value.type.elem.is_quantized:
        value = piece.function.add(quant.Dequantize, value, name=f"{name}/dequantize", elem=ElemKind.FLOAT32)
    placeholder = piece.function.save(value, name)
    _check_name(placeholder, name)
    piece.outputs.append(name)


def _check_name(placeholder: Placeholder, wanted: str) -> None:
    if placeholder.name != wanted:
        raise GraphError(f"partition border '{wanted}' was renamed '{placeholder.name}' (a name clash)")
