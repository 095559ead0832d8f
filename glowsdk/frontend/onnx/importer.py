"""ONNX -> high-level IR: one ONNX node becomes one or more graph nodes (paper 3.2).

Shapes are static, as in Glow. Symbolic input dims are bound by the caller
(`input_shapes`); inputs that decide shapes or types (Reshape's shape, Slice's
starts, ...) must be computable at compile time: from initializers, shape
sub-graphs folded here, or graph inputs the caller binds as constants
(`constants`). Shape sub-graphs fold away: only what the network computes at run
time remains in the function.
"""
from __future__ import annotations

import re
from typing import Mapping, Sequence

import numpy as np
import onnx

from ...errors import GlowError, GraphError, ModelFileError, NeedsConstantError, UnsupportedError, \
    UnsupportedOpsError
from ...graph.function import Function, Module
from ...graph.node import NodeValue, Origin
from ...graph.types import Type
from . import ops  # noqa: F401  (registers the converters)
from .context import ImportContext, OnnxNode, static_type, value_type
from .registry import CONVERTERS
from .tensors import check_size, tensor_array
from .text import shown
from .validate import check_definitions, check_node, check_strings

MIN_OPSET = 7
MAX_OPSET = onnx.defs.onnx_opset_version()


def supported_ops() -> list[str]:
    """The ONNX op types the importer translates."""
    return sorted(CONVERTERS)


def import_model(model: onnx.ModelProto, *, input_shapes: Mapping[str, Sequence[int]] | None = None,
                 constants: Mapping[str, np.ndarray] | None = None, source: str = "model") -> Module:
    """Translate an ONNX model into a verified Module with one Function, `main`."""
    source = shown(source)
    try:
        return _import(model, dict(input_shapes or {}), dict(constants or {}), source)
    except GlowError as err:
        # the last guard of the one-line promise: a name quoted raw somewhere below still prints escaped
        if err.args and isinstance(err.args[0], str) and not err.args[0].isprintable():
            err.args = (shown(err.args[0]), *err.args[1:])
        raise


def _import(model: onnx.ModelProto, input_shapes: dict, constants: dict, source: str) -> Module:
    check_strings(model, source)
    graph = model.graph
    opset = _default_opset(model, source)
    _check_ops(graph, source)
    check_definitions(graph, source)
    outputs = {v.name for v in graph.output}
    initializers = {t.name for t in graph.initializer}

    module = Module()
    module.reserve_names(outputs)
    function = module.create_function("main")
    ctx = ImportContext(module, function, opset, source)
    for tensor in graph.initializer:
        array = tensor_array(tensor, f"{source}: initializer '{shown(tensor.name)}'")
        # a constant's name is internal: an initializer that is also a graph output leaves the name to it
        name = f"{tensor.name}/value" if tensor.name in outputs else tensor.name
        ctx.env[tensor.name] = module.create_constant(name, array).result()
    known = {i.name for i in graph.input}
    for name in list(input_shapes) + list(constants):
        if name not in known or name in initializers:
            inputs = ", ".join(shown(i.name) for i in graph.input if i.name not in initializers)
            raise GlowError(f"{source}: '{shown(name)}' is not a graph input (inputs: {inputs})")
    for value in graph.input:
        if value.name in initializers:
            continue
        ctx.env[value.name] = _import_input(module, value, input_shapes, constants, source)

    for proto in _topological(graph, source):
        _convert(ctx, proto)

    for value in graph.output:
        if value.name not in ctx.env:
            raise GraphError(f"{source}: graph output '{shown(value.name)}' is not produced by any node")
        _check_declared_output(value, ctx.env[value.name], source)
        placeholder = function.save(ctx.env[value.name], value.name)
        if placeholder.name != value.name:  # also a graph input: the placeholder's name is taken
            module.output_names[placeholder.name] = value.name
    function.erase_dead()
    module.erase_unused_storage()
    function.verify()
    return module


def _default_opset(model: onnx.ModelProto, source: str) -> int:
    domains = [o.domain for o in model.opset_import]
    for domain in set(domains):
        if domains.count(domain) > 1:
            raise ModelFileError(f"{source}: the model imports opset domain '{shown(domain)}' "
                                 f"{domains.count(domain)} times")
    versions = {o.domain: o.version for o in model.opset_import}
    opset = versions.get("", versions.get("ai.onnx"))
    if opset is None:
        raise ModelFileError(f"{source}: the model imports no version of the default ONNX opset")
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise UnsupportedError(f"{source}: opset {opset} is outside the supported range "
                               f"{MIN_OPSET}..{MAX_OPSET}")
    return opset


def _check_ops(graph: onnx.GraphProto, source: str) -> None:
    """Refuse the model listing every op the importer cannot translate, all at once."""
    missing = set()
    for node in graph.node:
        if node.domain not in ("", "ai.onnx"):
            missing.add(shown(f"{node.domain}.{node.op_type}"))
        elif node.op_type not in CONVERTERS:
            missing.add(shown(node.op_type) or "''")
    if missing:
        raise UnsupportedOpsError(missing, source)


def _import_input(module: Module, value: onnx.ValueInfoProto, input_shapes: dict,
                  constants: dict, source: str) -> NodeValue:
    where = f"{source}: input '{shown(value.name)}'"
    elem, dims = value_type(value)
    if value.name in constants:
        array = np.asarray(constants[value.name])
        if array.dtype != elem.dtype:
            array = array.astype(elem.dtype)
        return module.create_constant(value.name, array).result()
    if value.name in input_shapes:
        try:
            shape = tuple(int(d) for d in input_shapes[value.name])
        except (TypeError, ValueError):
            raise GlowError(f"{where}: shape {shown(str(input_shapes[value.name]))} is not a list of "
                            f"integers") from None
        if dims is not None:
            if len(shape) != len(dims):
                raise GlowError(f"{where}: shape {_fmt(shape)} has rank {len(shape)}, the model declares "
                                f"rank {len(dims)} ({_fmt(dims)})")
            for given, declared in zip(shape, dims):
                if isinstance(declared, int) and declared != given:
                    raise GlowError(f"{where}: shape {_fmt(shape)} does not fit the declared {_fmt(dims)}")
        if any(d < 0 for d in shape):
            raise GlowError(f"{where}: shape {_fmt(shape)} has a negative dimension")
        type_ = Type(elem, shape)
    else:
        type_ = static_type(elem, dims)
        if type_ is None:
            described = "unknown rank" if dims is None else _fmt(dims)
            raise GlowError(f"{where} has a symbolic shape ({described}); bind it with "
                            f"--input-shape {shown(value.name)}=DxDx...")
    check_size(type_.shape, elem, where)
    return module.create_placeholder(value.name, type_).result()


def _fmt(dims: Sequence) -> str:
    return "x".join("?" if d is None else shown(str(d)) for d in dims)


def _topological(graph: onnx.GraphProto, source: str) -> list[onnx.NodeProto]:
    """The nodes in dependency order; errors for undefined values and cycles."""
    available = {t.name for t in graph.initializer} | {i.name for i in graph.input} | {""}
    producer = {}
    for node in graph.node:
        for out in node.output:
            if out:
                producer[out] = node
    order: list[onnx.NodeProto] = []
    state: dict[int, int] = {}  # 1 = on the current path, 2 = done
    for root in graph.node:
        stack = [(root, iter(root.input))]
        if state.get(id(root)) == 2:
            continue
        state[id(root)] = 1
        while stack:
            node, pending = stack[-1]
            for name in pending:
                if name in available:
                    continue
                dep = producer.get(name)
                if dep is None:
                    raise GraphError(f"{source}: {_label(node)} reads '{shown(name)}', which no node, input "
                                     f"or initializer defines")
                if state.get(id(dep)) == 1:
                    raise GraphError(f"{source}: the graph has a cycle through {_label(dep)}")
                if state.get(id(dep)) != 2:
                    state[id(dep)] = 1
                    stack.append((dep, iter(dep.input)))
                    break
            else:
                stack.pop()
                state[id(node)] = 2
                order.append(node)
    return order


def _label(node: onnx.NodeProto) -> str:
    """How messages name an ONNX node: "node 'conv1' (Conv)"."""
    name = node.name or (node.output[0] if node.output and node.output[0] else node.op_type)
    return f"node '{shown(name)}' ({shown(node.op_type)})"


def _convert(ctx: ImportContext, proto: onnx.NodeProto) -> None:
    label = _label(proto)
    check_node(proto, ctx.opset, f"{ctx.source}: {label}")
    try:
        node = OnnxNode(proto, ctx)
        with ctx.function.from_origin(Origin(node.name, node.op_type)):
            produced = CONVERTERS[proto.op_type](node)
    except (NeedsConstantError, UnsupportedError):
        raise
    except GlowError as err:
        # Name the ONNX node the user knows, not the graph node the converter made.
        message = re.sub(r"^node '[^']*' \([A-Za-z0-9_]+\): ", "", str(err))
        raise type(err)(f"{ctx.source}: {label}: {message}") from None
    results = produced if isinstance(produced, (list, tuple)) else [produced]
    for name, value in zip(node.output_names, results):
        if name and value is not None:
            ctx.env[name] = value
    for name in node.output_names[len(results):]:
        if name:
            raise node.unsupported(f"output '{shown(name)}' is not produced by glowsdk")


def _check_declared_output(value: onnx.ValueInfoProto, produced: NodeValue, source: str) -> None:
    """A statically declared output type must match what the graph computes."""
    if not value.type.HasField("tensor_type") or not value.type.tensor_type.elem_type:
        return
    elem, dims = value_type(value)
    actual = produced.type
    plain = actual.elem.quantized_storage if actual.elem.is_quantized else actual.elem
    fits = dims is None or (len(dims) == actual.rank and all(
        not isinstance(d, int) or d == a for d, a in zip(dims, actual.shape)))
    if plain != elem or not fits:
        raise GraphError(f"{source}: output '{shown(value.name)}' is declared {elem.value}<{_fmt(dims or [])}>, "
                         f"but the graph computes {actual}")


def function_of(module: Module) -> Function:
    """The single function an import produces."""
    return module.functions["main"]
