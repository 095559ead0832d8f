"""A function as data: JSON for its structure, numpy arrays for its weights; no pickle, no eval.

The record of every node kind (`define_node`) says what its attributes are, so one writer and one
reader cover every kind, a plugin's too (it must be imported before reading). Reading rebuilds
each node through `Function.create`, which infers and verifies its types again; a stored type that
disagrees with the inferred one is an error, so a file edited by hand cannot smuggle a wrong type in.
Arrays (constants and array attributes) are returned separately, keyed by name, for the container
that holds them (an .npz read with allow_pickle=False).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..errors import GraphError
from .function import Function, Module
from .node import Node, NodeValue, Origin
from .spec import NODE_KINDS, AttrKind
from .types import ElemKind, Type

FORMAT = "glowsdk-function"
VERSION = 1


def type_to_json(t: Type) -> dict[str, Any]:
    out: dict[str, Any] = {"elem": t.elem.value, "shape": list(t.shape)}
    if t.scale is not None:
        out["scale"] = list(t.scale) if isinstance(t.scale, tuple) else t.scale
        out["offset"] = list(t.offset) if isinstance(t.offset, tuple) else t.offset
    if t.axis is not None:
        out["axis"] = t.axis
    return out


def type_from_json(data: Mapping[str, Any], where: str) -> Type:
    try:
        scale, offset = data.get("scale"), data.get("offset")
        return Type(ElemKind(data["elem"]), tuple(int(d) for d in data["shape"]),
                    tuple(scale) if isinstance(scale, list) else scale,
                    tuple(offset) if isinstance(offset, list) else offset, data.get("axis"))
    except (KeyError, TypeError, ValueError) as err:
        raise GraphError(f"{where}: not a tensor type ({err})") from None


def function_to_data(function: Function) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The function's structure as JSON-ready data, and its arrays by key."""
    module = function.module
    arrays: dict[str, np.ndarray] = {}
    constants = []
    for k, const in enumerate(module.constants.values()):
        arrays[f"c{k}"] = np.require(const.value, requirements="C")
        constants.append({"name": const.name, "type": type_to_json(const.type), "array": f"c{k}"})
    placeholders = [{"name": p.name, "type": type_to_json(p.type), "output": p.is_output}
                    for p in module.placeholders.values()]
    nodes = []
    for k, node in enumerate(function.nodes):
        attrs = {}
        for attr in node.spec.attrs:
            attrs[attr.name] = _attr_to_json(attr.kind, node.attrs[attr.name], f"n{k}.{attr.name}", arrays)
        nodes.append({"name": node.name, "kind": node.kind,
                      "inputs": [None if v is None else [v.node.name, v.index] for v in node.inputs],
                      "attrs": attrs, "types": [type_to_json(t) for t in node.types],
                      "origin": None if node.origin is None else list(node.origin)})
    return {"format": FORMAT, "version": VERSION, "name": function.name, "constants": constants,
            "placeholders": placeholders, "nodes": nodes}, arrays


def function_from_data(data: Mapping[str, Any], arrays: Mapping[str, np.ndarray], where: str) -> Function:
    """Rebuild a function written by `function_to_data`; GraphError (naming `where` and the node) if it is wrong."""
    if data.get("format") != FORMAT or data.get("version") != VERSION:
        raise GraphError(f"{where}: not a {FORMAT} version {VERSION} record "
                         f"(format {data.get('format')!r}, version {data.get('version')!r})")
    module = Module()
    values: dict[str, Node] = {}
    try:
        for c in data["constants"]:
            array = arrays[c["array"]]
            values[c["name"]] = module.create_constant(c["name"], array, type_from_json(c["type"], where))
        for p in data["placeholders"]:
            values[p["name"]] = module.create_placeholder(p["name"], type_from_json(p["type"], where),
                                                          bool(p["output"]))
        function = module.create_function(data["name"])
        for record in data["nodes"]:
            _add_node(function, record, values, arrays, where)
    except (KeyError, TypeError, ValueError) as err:
        raise GraphError(f"{where}: malformed function record ({type(err).__name__}: {err})") from None
    function.verify()
    return function


def _add_node(function: Function, record: Mapping[str, Any], values: dict, arrays: Mapping[str, np.ndarray],
              where: str) -> None:
    name, kind_name = record["name"], record["kind"]
    kind = NODE_KINDS.get(kind_name)
    if kind is None:
        raise GraphError(f"{where}: node '{name}' has kind {kind_name}, which this glowsdk does not declare "
                         f"(a plugin's kind needs its plugin installed)")
    inputs = []
    for ref in record["inputs"]:
        if ref is None:
            inputs.append(None)
            continue
        producer = values.get(ref[0])
        if producer is None:
            raise GraphError(f"{where}: node '{name}' reads '{ref[0]}', defined nowhere before it")
        inputs.append(NodeValue(producer, int(ref[1])))
    specs = {a.name: a.kind for a in kind.spec.attrs}
    attrs = {k: _attr_from_json(specs[k], v, arrays, where) for k, v in record["attrs"].items() if k in specs}
    origin = record.get("origin")
    with function.from_origin(Origin(*origin) if origin else None):
        node = function.create(kind, inputs, name, **attrs)
    if node.name != name:
        raise GraphError(f"{where}: node name '{name}' is used twice")
    stored = [type_from_json(t, where) for t in record["types"]]
    if stored != node.types:
        raise GraphError(f"{where}: node '{name}' ({kind_name}) is stored with types "
                         f"{[str(t) for t in stored]} but computes {[str(t) for t in node.types]}")
    values[name] = node


def _attr_to_json(kind: AttrKind, value: Any, key: str, arrays: dict[str, np.ndarray]) -> Any:
    if kind is AttrKind.ELEM:
        return value.value
    if kind is AttrKind.TYPE:
        return type_to_json(value)
    if kind is AttrKind.ARRAY:
        arrays[key] = np.require(value, requirements="C")
        return {"array": key}
    if kind in (AttrKind.INTS, AttrKind.FLOATS, AttrKind.STRS):
        return list(value)
    return value


def _attr_from_json(kind: AttrKind, value: Any, arrays: Mapping[str, np.ndarray], where: str) -> Any:
    if kind is AttrKind.ELEM:
        return ElemKind(value)
    if kind is AttrKind.TYPE:
        return type_from_json(value, where)
    if kind is AttrKind.ARRAY:
        return arrays[value["array"]]
    return value
