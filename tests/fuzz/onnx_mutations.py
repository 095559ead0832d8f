"""Structure-aware mutations of ONNX models: each edits one field the way a broken exporter or a
hostile file would (attribute types and values, names, dims, tensor data, inputs, outputs,
external data, opsets), so the importer meets almost-valid models rather than random bytes.

A mutation is one entry of `MUTATIONS`: a name and a function `(rng, mutant) -> bool` that edits
`mutant` in place and says whether it applied. Bytes protobuf will not let Python set (invalid
UTF-8 in a string field) go in as an ASCII marker of the same length, patched in the serialized
model (`Mutant.serialize`).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

A = AttributeProto

HUGE_INTS = [-1, -2, 0, 2, 3, 7, 255, 1 << 20, 1 << 31, (1 << 31) - 1, 1 << 40, (1 << 63) - 1, -(1 << 63)]
ODD_FLOATS = [0.0, -0.0, -1.0, 1e-30, 1e30, float("inf"), float("-inf"), float("nan"), 2.5]
ODD_NAMES = ["", " ", "a\nb", "new\nline", "tab\there", "quote'd", "x" * 300, "back\\slash", "nul\x00byte",
             "\u00e9t\u00e9", "\r", "a/b", "../up"]
ATTR_NAMES = ["axis", "axes", "perm", "keepdims", "to", "value", "mode", "auto_pad", "pads", "kernel_shape",
              "strides", "dilations", "group", "blocksize", "num_outputs", "split", "epsilon", "alpha", "beta",
              "direction", "hidden_size", "activations", "equation", "start", "end", "allowzero", "upper",
              "saturate", "output_dtype", "stash_type", "layout", "transA", "transB", "largest", "sorted",
              "select_last_index", "noop_with_empty_axes", "exclusive", "reverse", "fmod", "ceil_mode",
              "storage_order", "count_include_pad", "approximate", "block_size", "value_ints", "value_float",
              "sparse_value", "value_string", "spatial", "training_mode", "coordinate_transformation_mode",
              "nearest_mode", "keep_aspect_ratio_policy", "clip", "activation_alpha", "size", "bias", "k"]
BAD_UTF8 = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80abc", b"\xfe\xfe"]
MARKER = b"@@glowfuzz%04d@@"
"""A placeholder string of fixed length; `Mutant.serialize` swaps it for invalid UTF-8 bytes."""


@dataclass
class Mutant:
    """A model being mutated, the external files beside it, and byte patches for after serializing."""

    model: onnx.ModelProto
    files: dict[str, bytes] = field(default_factory=dict)
    patches: list[tuple[bytes, bytes]] = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    def bad_text(self, rng: random.Random) -> str:
        """A marker string that becomes invalid UTF-8 of the same length once serialized."""
        marker = MARKER % len(self.patches)
        bad = rng.choice(BAD_UTF8)
        self.patches.append((marker, (bad * len(marker))[:len(marker) - 1] + b"\xff"))
        return marker.decode()

    def serialize(self) -> bytes:
        data = self.model.SerializeToString()
        for marker, bad in self.patches:
            data = data.replace(marker, bad)
        return data


# -- where to mutate -----------------------------------------------------------------------------
def _graphs(model: onnx.ModelProto):
    """The main graph and every sub-graph."""
    stack = [model.graph]
    while stack:
        graph = stack.pop()
        yield graph
        for node in graph.node:
            for attr in node.attribute:
                if attr.HasField("g"):
                    stack.append(attr.g)
                stack.extend(attr.graphs)


def _nodes(m: Mutant):
    return [n for g in _graphs(m.model) for n in g.node]


def _attrs(m: Mutant):
    return [(n, a) for n in _nodes(m) for a in n.attribute]


def _tensors(m: Mutant):
    """Initializers (of all graphs) and tensor attributes."""
    out = [t for g in _graphs(m.model) for t in g.initializer]
    out += [a.t for _, a in _attrs(m) if a.HasField("t")]
    return out


def _values(m: Mutant) -> list[str]:
    g = m.model.graph
    names = [v.name for v in g.input] + [t.name for t in g.initializer]
    return names + [o for n in g.node for o in n.output]


# -- attributes ----------------------------------------------------------------------------------
def _odd_attribute(rng: random.Random, m: Mutant, name: str, kind: int | None = None) -> AttributeProto:
    """An attribute called `name` of type `kind` (random if None) holding an odd value."""
    kind = rng.choice([A.INT, A.INTS, A.FLOAT, A.FLOATS, A.STRING, A.STRINGS, A.TENSOR, A.GRAPH,
                       A.SPARSE_TENSOR, A.TENSORS, A.UNDEFINED, A.TYPE_PROTO]) if kind is None else kind
    attr = AttributeProto(name=name, type=kind)
    if kind == A.INT:
        attr.i = rng.choice(HUGE_INTS)
    elif kind == A.INTS:
        attr.ints.extend(rng.choice(HUGE_INTS) for _ in range(rng.choice([0, 1, 2, 3, 4, 9])))
    elif kind == A.FLOAT:
        attr.f = rng.choice(ODD_FLOATS)
    elif kind == A.FLOATS:
        attr.floats.extend(rng.choice(ODD_FLOATS) for _ in range(rng.choice([0, 1, 3])))
    elif kind == A.STRING:
        attr.s = rng.choice([b"", b"s", b"a\nb", b"SAME_UPPER", b"linear"] + BAD_UTF8)
    elif kind == A.STRINGS:
        attr.strings.extend(rng.choice([b"Tanh", b"x", b"\xff"]) for _ in range(rng.choice([0, 1, 3])))
    elif kind == A.TENSOR:
        attr.t.CopyFrom(numpy_helper.from_array(np.array(rng.choice([[1.0], [1, 2], [[3]]]))))
    elif kind == A.SPARSE_TENSOR:
        attr.sparse_tensor.values.CopyFrom(numpy_helper.from_array(np.array([1.0], np.float32)))
        attr.sparse_tensor.indices.CopyFrom(numpy_helper.from_array(np.array([rng.choice([0, 5, -1])])))
        attr.sparse_tensor.dims.extend([rng.choice([2, 1 << 40, -3])])
    elif kind == A.GRAPH:
        attr.g.CopyFrom(helper.make_graph([], "empty", [], []))
    return attr


def attr_retype(rng, m):
    """An attribute keeps its name, gets another type (Concat(axis=[0,1]), Flatten(axis="s"), SPARSE)."""
    pairs = _attrs(m)
    if not pairs:
        return False
    node, attr = rng.choice(pairs)
    new = _odd_attribute(rng, m, attr.name)
    if rng.random() < 0.3:
        new.CopyFrom(attr)
        # the type says one thing, the fields another
        new.type = rng.choice([A.SPARSE_TENSOR, A.UNDEFINED, A.STRING, A.INTS, A.TENSOR])
    attr.CopyFrom(new)
    return True


def attr_value(rng, m):
    """An attribute keeps its type, gets an extreme value (keepdims=2, axis=2^40, NaN epsilon)."""
    pairs = [(n, a) for n, a in _attrs(m) if a.type in (A.INT, A.INTS, A.FLOAT, A.FLOATS, A.STRING, A.STRINGS)]
    if not pairs:
        return False
    _, attr = rng.choice(pairs)
    attr.CopyFrom(_odd_attribute(rng, m, attr.name, attr.type))
    if attr.type == A.STRING and rng.random() < 0.3:
        attr.s = rng.choice(BAD_UTF8)
    return True


def attr_add(rng, m):
    """A node gets an attribute it may not know, of any type."""
    node = rng.choice(_nodes(m))
    node.attribute.append(_odd_attribute(rng, m, rng.choice(ATTR_NAMES)))
    return True


def attr_drop(rng, m):
    pairs = _attrs(m)
    if not pairs:
        return False
    node, attr = rng.choice(pairs)
    node.attribute.remove(attr)
    return True


def attr_duplicate(rng, m):
    """The same attribute name twice, with different values."""
    pairs = _attrs(m)
    if not pairs:
        return False
    node, attr = rng.choice(pairs)
    node.attribute.append(_odd_attribute(rng, m, attr.name, attr.type))
    return True


# -- names and op types ------------------------------------------------------------------------------
def _odd_name(rng, m: Mutant) -> str:
    return m.bad_text(rng) if rng.random() < 0.25 else rng.choice(ODD_NAMES)


def node_name(rng, m):
    rng.choice(_nodes(m)).name = _odd_name(rng, m)
    return True


def op_type(rng, m):
    """op_type becomes invalid UTF-8, an odd string, or another op (Mean with Transpose's inputs)."""
    node = rng.choice(_nodes(m))
    roll = rng.random()
    if roll < 0.3:
        node.op_type = m.bad_text(rng)
    elif roll < 0.4:
        node.op_type = rng.choice(ODD_NAMES)
    elif roll < 0.5:
        node.domain = rng.choice(["ai.onnx", "com.microsoft", "\n", "ai.onnx.ml"])
    else:
        node.op_type = rng.choice(OP_TYPES)
    return True


def value_rename(rng, m):
    """A value (input, initializer or node output) renamed everywhere, or only where it is defined."""
    names = [n for n in _values(m) if n]
    if not names:
        return False
    old, new = rng.choice(names), _odd_name(rng, m)
    everywhere = rng.random() < 0.6
    g = m.model.graph
    for value in list(g.input) + list(g.output) + list(g.value_info):
        if value.name == old and (everywhere or value in g.input):
            value.name = new
    for tensor in g.initializer:
        if tensor.name == old:
            tensor.name = new
    for node in g.node:
        for seq in ([node.input] if everywhere else []) + [node.output]:
            for i, name in enumerate(seq):
                if name == old:
                    seq[i] = new
    return True


# -- inputs and outputs --------------------------------------------------------------------------------
def node_inputs(rng, m):
    """A node loses an input, gets an empty name for one (Transpose([""])), all of them (Mean([])),
    or an extra one."""
    node = rng.choice(_nodes(m))
    roll = rng.random()
    if roll < 0.3 and node.input:
        node.input[rng.randrange(len(node.input))] = ""
    elif roll < 0.5:
        del node.input[:]
    elif roll < 0.7 and node.input:
        del node.input[rng.randrange(len(node.input))]
    else:
        node.input.append(rng.choice(_values(m) + ["", "undefined"]))
    return True


def node_outputs(rng, m):
    """Two nodes define one value, a node redefines an input, or a node gets more or fewer outputs."""
    nodes = _nodes(m)
    node = rng.choice(nodes)
    roll = rng.random()
    if roll < 0.4:
        names = _values(m)
        node.output.append(rng.choice(names)) if not node.output else \
            node.output.__setitem__(rng.randrange(len(node.output)), rng.choice(names))
    elif roll < 0.6:
        node.output.append(rng.choice(["", "extra", node.output[0] if node.output else "o"]))
    elif roll < 0.8:
        del node.output[:]
    else:
        m.model.graph.node.append(node)  # the same node twice
    return True


def graph_outputs(rng, m):
    """A graph output that is a graph input or an initializer, listed twice, or naming nothing."""
    g = m.model.graph
    roll = rng.random()
    candidates = [v.name for v in g.input] + [t.name for t in g.initializer]
    if roll < 0.5 and candidates:
        name = rng.choice(candidates)
        g.output.append(helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None))
    elif roll < 0.75 and g.output:
        g.output.append(rng.choice(g.output))
    elif g.output:
        g.output[rng.randrange(len(g.output))].name = rng.choice(["", "nowhere", "a\nb"])
    else:
        return False
    return True


# -- dims and tensors ------------------------------------------------------------------------------------
def input_dims(rng, m):
    """A graph input gets a negative, zero, huge or symbolic dim, another rank, or no shape."""
    inputs = [v for v in m.model.graph.input if v.type.HasField("tensor_type")]
    if not inputs:
        return False
    tensor = rng.choice(inputs).type.tensor_type
    dims = tensor.shape.dim
    roll = rng.random()
    if roll < 0.6 and dims:
        dim = dims[rng.randrange(len(dims))]
        if rng.random() < 0.2:
            dim.dim_param = rng.choice(["N", "", "a\nb"])
        else:
            dim.dim_value = rng.choice([-1, -7, 0, 1 << 20, 1 << 31, 1 << 40, (1 << 63) - 1])
    elif roll < 0.8:
        dims.add().dim_value = rng.choice([1, 2, 1 << 40])
    elif roll < 0.9:
        tensor.ClearField("shape")
    else:
        tensor.elem_type = rng.choice([0, TensorProto.STRING, TensorProto.COMPLEX64, 99, TensorProto.INT4])
    return True


def tensor_data(rng, m):
    """A tensor's data stops matching its header: raw_data truncated, segment set, data_type
    UNDEFINED or unknown, dims negative or huge, data in the wrong field."""
    tensors = _tensors(m)
    if not tensors:
        return False
    t = rng.choice(tensors)
    roll = rng.random()
    if roll < 0.2:
        if not t.raw_data:
            array = numpy_helper.to_array(t)
            t.CopyFrom(numpy_helper.from_array(array, t.name))
        t.raw_data = t.raw_data[:rng.randrange(len(t.raw_data) + 1)] if t.raw_data else b"\x01"
    elif roll < 0.3:
        t.segment.begin, t.segment.end = rng.choice([(0, 1), (1, 0), (-1, 5)])
    elif roll < 0.5:
        t.data_type = rng.choice([TensorProto.UNDEFINED, TensorProto.STRING, TensorProto.COMPLEX128, 77,
                                  TensorProto.FLOAT16, TensorProto.INT4, TensorProto.BOOL, TensorProto.UINT64])
    elif roll < 0.75 and t.dims:
        t.dims[rng.randrange(len(t.dims))] = rng.choice([-1, 0, 1 << 40, (1 << 62), 3])
    elif roll < 0.85:
        t.dims.append(rng.choice([1, 2, 1 << 33]))
    else:
        t.float_data.extend([1.0, 2.0])
        t.int64_data.extend([1 << 40])
    return True


def shape_values(rng, m):
    """A small initializer (a shape, a count, axes, scales...) gets huge, negative or non-finite
    entries: Range to 2^40, ConstantOfShape [2^20, 1280], Expand/Tile by 2^31, Resize by NaN."""
    small = [t for t in _tensors(m) if not t.external_data and 0 < np.prod(t.dims) <= 8
             and t.data_type in (TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT)]
    if not small:
        return False
    t = rng.choice(small)
    array = numpy_helper.to_array(t).copy()
    if array.dtype.kind == "f":
        picks = ODD_FLOATS + [1e10, 65536.0]
    else:
        info = np.iinfo(array.dtype)
        picks = [v for v in HUGE_INTS + [1280, 1 << 20] if info.min <= v <= info.max]
    flat = array.reshape(-1)
    for _ in range(rng.choice([1, 1, 2])):
        flat[rng.randrange(flat.size)] = rng.choice(picks)
    t.CopyFrom(numpy_helper.from_array(array, t.name))
    return True


def external_data(rng, m):
    """A tensor (in the main graph or a sub-graph) moves to a file beside the model, with odd
    location, offset or length fields."""
    tensors = [t for t in _tensors(m) if t.data_type != TensorProto.STRING]
    if not tensors:
        return False
    t = rng.choice(tensors)
    try:
        raw = numpy_helper.to_array(t).tobytes()
    except Exception:
        raw = b"\x00" * 8
    location = "weights.bin"
    m.files[location] = raw
    fields = {"location": location, "offset": "0", "length": str(len(raw))}
    roll = rng.random()
    if roll < 0.15:
        fields["location"] = rng.choice(["../escape.bin", "/etc/hostname", "", "nul\x00.bin", "a\nb.bin",
                                         "missing.bin", ".", "sub/../../x.bin"])
    elif roll < 0.35:
        fields["offset"] = rng.choice(["abc", "1.5", "-4", "", "99999999999", " 1", "0x10", "1e3"])
    elif roll < 0.55:
        fields["length"] = rng.choice(["abc", "2.0", "-1", "", str(1 << 40), str(len(raw) + 1), "0"])
    elif roll < 0.6:
        fields["checksum"] = "x"
    elif roll < 0.65:
        fields["location"] = m.bad_text(rng)
    t.ClearField("raw_data")
    for name in ("float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
        t.ClearField(name)
    del t.external_data[:]
    for key, value in fields.items():
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    t.data_location = TensorProto.EXTERNAL
    return True


def opset(rng, m):
    """Another default-opset version, none, or a duplicate entry."""
    ops = m.model.opset_import
    roll = rng.random()
    if roll < 0.6 and ops:
        ops[0].version = rng.choice([1, 6, 7, 9, 10, 11, 12, 13, 17, 19, 21, 23, 99, -1])
    elif roll < 0.8:
        del ops[:]
    else:
        ops.add().version = rng.choice([7, 13, 18])
    return True


def node_order(rng, m):
    """Nodes shuffled, or an edge turned back into a cycle."""
    nodes = list(m.model.graph.node)
    if len(nodes) < 2:
        return False
    if rng.random() < 0.5:
        rng.shuffle(nodes)
        del m.model.graph.node[:]
        m.model.graph.node.extend(nodes)
    else:
        a, b = rng.sample(nodes, 2)
        if a.output:
            b.input.append(a.output[0])
        if b.output:
            a.input.append(b.output[0])
    return True


Mutation = Callable[[random.Random, Mutant], bool]
MUTATIONS: dict[str, Mutation] = {
    "attr_retype": attr_retype, "attr_value": attr_value, "attr_add": attr_add, "attr_drop": attr_drop,
    "attr_duplicate": attr_duplicate, "node_name": node_name, "op_type": op_type, "value_rename": value_rename,
    "node_inputs": node_inputs, "node_outputs": node_outputs, "graph_outputs": graph_outputs,
    "input_dims": input_dims, "tensor_data": tensor_data, "shape_values": shape_values,
    "external_data": external_data, "opset": opset, "node_order": node_order,
}
"""Every mutation, by name (the name goes into the mutant's log)."""

OP_TYPES = ["Transpose", "Concat", "Flatten", "Mean", "Sum", "Max", "Range", "ConstantOfShape", "Expand",
            "Tile", "Reshape", "Split", "Slice", "Pad", "Resize", "Upsample", "ReduceMax", "ArgMin", "TopK",
            "Conv", "ConvTranspose", "MaxPool", "LSTM", "GRU", "Einsum", "Constant", "Cast", "Gemm",
            "QuantizeLinear", "DequantizeLinear", "QLinearConv", "Softmax", "Gather", "Unsqueeze",
            "DepthToSpace", "LayerNormalization", "GroupNormalization", "Identity", "Dropout", "Where"]
"""Op types a node may be switched to (so converters meet inputs and attributes they don't expect)."""


def mutate(seed: bytes, rng: random.Random, count: int) -> Mutant:
    """A mutant of the serialized `seed`: `count` mutations drawn at random (skipping inapplicable ones)."""
    model = onnx.ModelProto()
    model.ParseFromString(seed)
    return apply(Mutant(model), rng, count)


def apply(m: Mutant, rng: random.Random, count: int) -> Mutant:
    """`count` more mutations of `m`, in place (an inapplicable one is skipped, four tries per edit)."""
    names = list(MUTATIONS)
    tries = 0
    while len(m.log) < count and tries < 4 * count:
        tries += 1
        name = rng.choice(names)
        try:
            applied = MUTATIONS[name](rng, m)
        except Exception:  # noqa: BLE001  (an edit that cannot apply to this, already odd, model: skip it)
            applied = False
        if applied:
            m.log.append(name)
    return m
