"""What the importer checks before any converter runs, so converters meet only well-formed nodes.

- every string the model holds is valid UTF-8 (`check_strings`);
- every value is defined once: no two graph inputs, initializers or node outputs share a name,
  and a graph output is listed once (`check_definitions`);
- each node fits its ONNX schema (`check_node`): the number of inputs and outputs, required
  inputs named (not ""), variadic inputs all present, attributes of the schema's type and
  given once, required attributes present, 0/1 flags 0 or 1.

The schema is the one of the model's opset, or, for an op glowsdk accepts outside the versions
ONNX defines it for, its nearest version. Attributes no version of the op defines are refused,
as onnxruntime refuses them.
"""
from __future__ import annotations

from collections import Counter
from functools import lru_cache

import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from ...errors import GraphError, ModelFileError
from .text import shown

FLAGS = frozenset({
    "keepdims", "noop_with_empty_axes", "select_last_index", "largest", "sorted", "exclusive", "reverse",
    "transA", "transB", "count_include_pad", "ceil_mode", "allowzero", "upper", "fmod", "detect_positive",
    "detect_negative", "saturate", "input_forget", "linear_before_reset", "exclude_outside", "antialias",
    "training_mode", "storage_order", "spatial", "layout",
})
"""Integer attributes ONNX defines as 0/1 flags: any other value is refused (onnxruntime reads
keepdims=2 as false, a C++ reading as true: neither is what the model meant)."""

_SINGLE = onnx.defs.OpSchema.FormalParameterOption.Single
_VARIADIC = onnx.defs.OpSchema.FormalParameterOption.Variadic
_OPTIONAL = onnx.defs.OpSchema.FormalParameterOption.Optional
_TYPE_NAMES = {int(v): k for k, v in onnx.AttributeProto.AttributeType.items()}


# -- strings -----------------------------------------------------------------------------------------
def check_strings(message: Message, where: str) -> None:
    """ModelFileError naming the first string field that is not valid UTF-8 (protobuf hands such a
    field to Python as bytes)."""
    bad = _first_bad_string(message, "model")
    if bad is not None:
        path, value = bad
        raise ModelFileError(f"{where}: {path} is not valid UTF-8 ({shown(value)})")


def _first_bad_string(message: Message, path: str) -> tuple[str, bytes] | None:
    for field, value in message.ListFields():
        repeated = field.is_repeated
        items = list(value) if repeated else [value]
        if field.type == FieldDescriptor.TYPE_STRING:
            for i, item in enumerate(items):
                if isinstance(item, bytes):
                    return f"{path}.{field.name}{f'[{i}]' if repeated else ''}", item
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            for i, item in enumerate(items):
                found = _first_bad_string(item, f"{path}.{field.name}{f'[{i}]' if repeated else ''}")
                if found is not None:
                    return found
    return None


# -- definitions ---------------------------------------------------------------------------------------
def check_definitions(graph: onnx.GraphProto, source: str) -> None:
    """Every value defined once (inputs, initializers, node outputs); every graph output listed once."""
    initializers = Counter(t.name for t in graph.initializer)
    for name, count in initializers.items():
        if count > 1:
            raise GraphError(f"{source}: initializer '{shown(name)}' is defined {count} times")
    defined: dict[str, str] = {}
    for value in graph.input:
        if value.name in defined:
            raise GraphError(f"{source}: graph input '{shown(value.name)}' is listed twice")
        defined[value.name] = "a graph input"
    # an initializer may also be listed as a graph input (its overridable default)
    defined.update({name: "an initializer" for name in initializers if name not in defined})
    for node in graph.node:
        for name in node.output:
            if not name:
                continue
            if name in defined:
                raise GraphError(f"{source}: node '{shown(node.name or name)}' ({shown(node.op_type)}) defines "
                                 f"'{shown(name)}', which is already {defined[name]}")
            defined[name] = f"defined by node '{shown(node.name or name)}'"
    outputs = Counter(v.name for v in graph.output)
    for name, count in outputs.items():
        if count > 1:
            raise GraphError(f"{source}: graph output '{shown(name)}' is listed {count} times")
    if "" in outputs:
        raise GraphError(f"{source}: a graph output has an empty name")


# -- nodes -----------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def node_schema(op_type: str, opset: int) -> onnx.defs.OpSchema | None:
    """The schema of `op_type` at `opset`; its earliest version if the op is newer than the opset."""
    try:
        return onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        pass
    try:
        return onnx.defs.get_schema(op_type, onnx.defs.onnx_opset_version(), "")
    except onnx.defs.SchemaError:
        return None


@lru_cache(maxsize=None)
def _attribute_types(op_type: str) -> dict[str, set[int]]:
    """Every attribute any version of `op_type` defines, with the types it has had."""
    types: dict[str, set[int]] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.name == op_type and schema.domain == "":
            for name, attr in schema.attributes.items():
                types.setdefault(name, set()).add(int(attr.type.value))
    return types


def check_node(node: onnx.NodeProto, opset: int, label: str) -> None:
    """GraphError if the node does not fit its schema; `label` names it ("node 'conv1' (Conv)")."""
    schema = node_schema(node.op_type, opset)
    if schema is None:
        return
    _check_arity(node, schema, label)
    _check_attributes(node, schema, label)


def _check_arity(node: onnx.NodeProto, schema: onnx.defs.OpSchema, label: str) -> None:
    inputs, outputs = list(node.input), list(node.output)
    formals = list(schema.inputs)

    def formal(i: int):
        return formals[min(i, len(formals) - 1)] if formals else None

    while inputs and not inputs[-1] and formal(len(inputs) - 1) is not None \
            and formal(len(inputs) - 1).option == _OPTIONAL:
        inputs.pop()  # trailing "" is how an exporter omits optional inputs
    if not schema.min_input <= len(inputs) <= schema.max_input:
        raise GraphError(f"{label}: takes {_range(schema.min_input, schema.max_input)} inputs, got {len(inputs)}")
    for i, name in enumerate(inputs):
        if not name and formal(i) is not None and formal(i).option in (_SINGLE, _VARIADIC):
            formal_name = formal(i).name
            raise GraphError(f"{label}: input {i} ({formal_name}) is required, but its name is empty")
    if not schema.min_output <= len(outputs) <= schema.max_output:
        raise GraphError(f"{label}: has {len(outputs)} outputs, the op defines "
                         f"{_range(schema.min_output, schema.max_output)}")


def _range(low: int, high: int) -> str:
    if low == high:
        return str(low)
    return f"at least {low}" if high >= 1 << 30 else f"{low} to {high}"


def _check_attributes(node: onnx.NodeProto, schema: onnx.defs.OpSchema, label: str) -> None:
    names = Counter(a.name for a in node.attribute)
    for name, count in names.items():
        if count > 1:
            raise GraphError(f"{label}: attribute '{shown(name)}' is given {count} times")
    for attr in node.attribute:
        where = f"{label}: attribute '{shown(attr.name)}'"
        if attr.ref_attr_name:
            raise GraphError(f"{where} refers to a function attribute outside a function")
        formal = schema.attributes.get(attr.name)
        expected = {int(formal.type.value)} if formal is not None else _attribute_types(node.op_type).get(attr.name)
        if expected is None:
            raise GraphError(f"{where} is not an attribute of {shown(node.op_type)}")
        if attr.type not in expected:
            wanted = " or ".join(sorted(_TYPE_NAMES.get(t, str(t)) for t in expected))
            raise GraphError(f"{where} must be {wanted}, got {_TYPE_NAMES.get(attr.type, str(attr.type))}")
        if attr.name in FLAGS and attr.type == onnx.AttributeProto.INT and attr.i not in (0, 1):
            raise GraphError(f"{where} is a flag and must be 0 or 1, got {attr.i}")
    for name, formal in schema.attributes.items():
        if formal.required and name not in names:
            raise GraphError(f"{label}: needs the attribute '{name}'")
