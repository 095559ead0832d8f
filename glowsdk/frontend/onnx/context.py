"""What a converter sees: the ONNX node, bound to the graph being built."""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from ...errors import GraphError, NeedsConstantError, UnsupportedError
from ...graph.function import Function, Module
from ...graph.node import Constant, Node, NodeValue
from ...graph.types import ElemKind, Type
from ...reference.evaluator import NotConstantError, fold
from .tensors import check_size, elem_of_onnx, sparse_array, tensor_array
from .text import shown

__all__ = ["ImportContext", "OnnxNode", "elem_of_onnx", "shown", "static_type", "value_type"]

class ImportContext:
    """The state shared by all converters of one import."""

    def __init__(self, module: Module, function: Function, opset: int, source: str) -> None:
        self.module = module
        self.function = function
        self.opset = opset
        self.source = source
        self.env: dict[str, NodeValue] = {}

    def constant(self, array: np.ndarray, name: str) -> NodeValue:
        """A new Constant holding `array`."""
        return self.module.create_constant(name, np.require(array, requirements="C")).result()


class OnnxNode:
    """One ONNX node during conversion: its attributes, inputs and a way to add graph nodes."""

    def __init__(self, proto: onnx.NodeProto, ctx: ImportContext) -> None:
        self.proto = proto
        self.ctx = ctx
        self.op_type = proto.op_type
        # the name messages and graph nodes carry: the ONNX name, its odd characters escaped
        self.name = shown(proto.name or (proto.output[0] if proto.output and proto.output[0] else proto.op_type))
        self.input_names = list(proto.input)
        self.output_names = list(proto.output)
        self.attrs: dict[str, Any] = {attr.name: self._attribute(attr) for attr in proto.attribute}

    def _attribute(self, attr: onnx.AttributeProto) -> Any:
        """An attribute's value (its type already checked against the schema): tensors as arrays,
        strings as str."""
        where = f"node '{self.name}' ({self.op_type}): attribute '{shown(attr.name)}'"
        if attr.type == onnx.AttributeProto.TENSOR:
            return tensor_array(attr.t, where)
        if attr.type == onnx.AttributeProto.SPARSE_TENSOR:
            return sparse_array(attr.sparse_tensor, where)
        value = onnx.helper.get_attribute_value(attr)
        try:
            if isinstance(value, bytes):
                return value.decode("utf-8")
            if attr.type == onnx.AttributeProto.STRINGS:
                return [v.decode("utf-8") for v in value]
        except UnicodeDecodeError:
            raise GraphError(f"{where} is not valid UTF-8 ({shown(value)})") from None
        return value

    @property
    def opset(self) -> int:
        return self.ctx.opset

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def has_input(self, index: int) -> bool:
        return index < len(self.input_names) and self.input_names[index] != ""

    def input(self, index: int) -> NodeValue | None:
        """The graph value of input `index`, or None if the input is absent."""
        if not self.has_input(index):
            return None
        return self.ctx.env[self.input_names[index]]

    def inputs(self) -> list[NodeValue | None]:
        return [self.input(i) for i in range(len(self.input_names))]

    def is_const(self, index: int) -> bool:
        """Whether input `index` is present and computable at compile time."""
        if not self.has_input(index):
            return False
        try:
            self.const(index, "")
        except NeedsConstantError:
            return False
        return True

    def const(self, index: int, what: str) -> np.ndarray | None:
        """The compile-time value of input `index` (None if absent).

        Raises NeedsConstantError naming the graph input it depends on otherwise;
        `what` says why the value is needed ("the target shape").
        """
        value = self.input(index)
        if value is None:
            return None
        if isinstance(value.node, Constant):
            return value.node.value
        try:
            return fold(value)
        except NotConstantError as err:
            raise NeedsConstantError(err.placeholder, self.name, what or f"input {index}") from None

    def add(self, kind: type[Node], *inputs: NodeValue | None, suffix: str = "", **attrs: Any) -> NodeValue:
        """Add a single-result node named after this ONNX node."""
        return self.create(kind, inputs, suffix, **attrs).result()

    def create(self, kind: type[Node], inputs: list | tuple, suffix: str = "", **attrs: Any) -> Node:
        """Add a node (any number of results) named after this ONNX node."""
        name = f"{self.name}/{suffix}" if suffix else self.name
        node = self.ctx.function.create(kind, list(inputs), name, **attrs)
        for result in node.results:  # the size guard: before anything computes the values
            check_size(result.type.shape, result.type.elem, f"node '{self.name}' ({self.op_type})")
        return node

    def constant(self, array: np.ndarray, suffix: str) -> NodeValue:
        return self.ctx.constant(array, f"{self.name}/{suffix}")

    def check_size(self, shape, elem: ElemKind) -> None:
        """The size guard, for a value about to be computed at import (Range, a folded constant)."""
        check_size(shape, elem, f"node '{self.name}' ({self.op_type})")

    def unsupported(self, why: str) -> UnsupportedError:
        """An error for a form of this op glowsdk does not support."""
        return UnsupportedError(f"node '{self.name}' ({self.op_type}): {why}")

    def error(self, why: str) -> GraphError:
        """An error for a malformed node."""
        return GraphError(f"node '{self.name}' ({self.op_type}): {why}")


def value_type(value: onnx.ValueInfoProto) -> tuple[ElemKind, list[int | str | None] | None]:
    """Element kind and dims of a graph input/output.

    A dim is an int, a symbol, or None (unnamed unknown); dims is None if the rank is unknown.
    """
    where = f"graph value '{shown(value.name)}'"
    if not value.type.HasField("tensor_type"):
        raise UnsupportedError(f"{where}: only tensor values are supported")
    tensor = value.type.tensor_type
    elem = elem_of_onnx(tensor.elem_type, where)
    if not tensor.HasField("shape"):
        return elem, None
    dims: list[int | str | None] = []
    for d in tensor.shape.dim:
        if d.HasField("dim_value"):
            if d.dim_value < 0:
                raise GraphError(f"{where}: dim {len(dims)} is negative ({d.dim_value})")
            dims.append(int(d.dim_value))
        else:
            dims.append(d.dim_param or None)
    return elem, dims


def static_type(elem: ElemKind, dims: list[int | str | None] | None) -> Type | None:
    """The Type if the rank and every dim are known, else None."""
    if dims is None or any(not isinstance(d, int) for d in dims):
        return None
    return Type(elem, tuple(dims))
