"""Seeded random weights for the bundled models, chosen by the role of each weight.

The light models fill every weight with the same constant (0.02), so every class
scores the same and a wrong kernel can hide behind the symmetry. Replacing the
fills by random values breaks it. Each distribution is chosen by what consumes
the weight, so that activations keep a root-mean-square between about 1 and 15
through 50+ layers and the softmax is peaked without saturating:

- convolution and dense weights: zero-mean normal with variance gain / fan-in,
  gain 2 (He) when the data comes out of a Relu, 1 (LeCun) otherwise;
- batch norm: running variance ~U(0.5, 1.5) (positive), scale ~U(0.55, 1.3), so
  E[scale^2] * E[1/var] is about 1 and a norm layer neither grows nor shrinks
  the signal; mean and bias ~N(0, 0.1);
- scales (Mul, Div) ~U(0.8, 1.2); biases (Add, Sub, Sum, Conv/Gemm bias) ~N(0, 0.02);
- a scale whose result ends in a residual sum of k activations is divided by k,
  so the sum averages its branches instead of doubling the variance per block;
- anything else ~N(0, 0.1).

The result is an ordinary ModelProto, so onnxruntime can run the very same model.
"""
from __future__ import annotations

import zlib
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

from .graph_facts import activations, consumers

FLOAT_TYPES = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}

# Ops that only move a weight's elements around: the role is decided by whoever consumes their result.
_PASS_THROUGH = {"Reshape", "Unsqueeze", "Squeeze", "Flatten", "Transpose", "Identity", "Cast"}
# Ops between a Relu and a convolution that keep the data non-negative.
_KEEPS_SIGN = _PASS_THROUGH | {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Dropout",
                               "Concat", "LRN"}

Sampler = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


# Samplers draw float32 directly: alexnet and vgg19 hold over 100M weights.
def _scaled_normal(variance: float) -> Sampler:
    std = np.float32(np.sqrt(variance))
    return lambda rng, shape: rng.standard_normal(shape, dtype=np.float32) * std


def _uniform(low: float, high: float) -> Sampler:
    return lambda rng, shape: np.float32(low) + np.float32(high - low) * rng.random(shape, dtype=np.float32)


def _times(sampler: Sampler, factor: float) -> Sampler:
    return lambda rng, shape: sampler(rng, shape) * np.float32(factor)


_BIAS = _scaled_normal(0.02 ** 2)
_OTHER = _scaled_normal(0.1 ** 2)

# (op, input index) -> distribution, for roles that do not depend on the weight's shape.
_BY_ROLE: dict[tuple[str, int], Sampler] = {
    ("BatchNormalization", 1): _uniform(0.55, 1.3),  # scale
    ("BatchNormalization", 2): _scaled_normal(0.1 ** 2),  # bias
    ("BatchNormalization", 3): _scaled_normal(0.1 ** 2),  # running mean
    ("BatchNormalization", 4): _uniform(0.5, 1.5),  # running variance: must stay positive
    ("Conv", 2): _BIAS,
    ("Gemm", 2): _BIAS,
}
_BY_OP: dict[str, Sampler] = {
    "Mul": _uniform(0.8, 1.2),  # per-channel scales: densenet and inception_v2 spell batch norm this way
    "Div": _uniform(0.8, 1.2),
    "Add": _BIAS,
    "Sub": _BIAS,
    "Sum": _BIAS,
}
# The roles that scale a signal, and so take the residual-sum factor.
_SCALES = {("BatchNormalization", 1), ("Mul", 0), ("Mul", 1)}


def _fan_in(op: onnx.NodeProto, index: int, shape: tuple[int, ...]) -> int | None:
    """The fan-in of a convolution or dense weight as its consumer sees it; None for other roles."""
    if op.op_type == "Conv" and index == 1 and len(shape) >= 2:
        return int(np.prod(shape[1:]))
    if op.op_type == "Gemm" and index == 1 and len(shape) == 2:
        trans_b = next((a.i for a in op.attribute if a.name == "transB"), 0)
        return shape[1] if trans_b else shape[0]
    if op.op_type == "MatMul" and index == 1 and len(shape) >= 2:
        return shape[-2]
    return None


def randomize_weights(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    """A copy of `model` whose float weights are seeded random values chosen by role.

    Weights are the float initializers and the outputs of ConstantOfShape nodes fed
    by an initializer shape (top-level graph only). The fills become initializers;
    their nodes and shape initializers go (from graph.input too). Each weight draws
    from its own generator seeded by `seed` and its name, so the result is
    deterministic and independent of graph order. Element types are kept.
    """
    result = onnx.ModelProto()
    result.CopyFrom(model)
    graph = result.graph
    initializers = {t.name: t for t in graph.initializer}
    weights: dict[str, tuple[tuple[int, ...], int]] = {}
    fills = []
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input and node.input[0] in initializers:
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            elem = value.data_type if value is not None else TensorProto.FLOAT
            if elem in FLOAT_TYPES:
                shape = tuple(int(d) for d in numpy_helper.to_array(initializers[node.input[0]]))
                weights[node.output[0]] = (shape, elem)
                fills.append(node)
    for tensor in graph.initializer:
        if tensor.data_type in FLOAT_TYPES:
            weights[tensor.name] = (tuple(tensor.dims), tensor.data_type)

    view = _GraphView(result)
    arrays = {}
    for name, (shape, elem) in weights.items():
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
        values = view.sampler(name, shape)(rng, shape)
        arrays[name] = values.astype(helper.tensor_dtype_to_np_dtype(elem), copy=False)

    _remove_fills(graph, fills)
    for tensor in graph.initializer:
        if tensor.name in arrays:
            tensor.CopyFrom(numpy_helper.from_array(arrays.pop(tensor.name), tensor.name))
    listed = {v.name for v in graph.input}
    for name, array in arrays.items():
        graph.initializer.append(numpy_helper.from_array(array, name))
        if result.ir_version < 4 and name not in listed:  # IR < 4 lists every initializer as an input
            shape, elem = weights[name]
            graph.input.append(helper.make_tensor_value_info(name, elem, shape))
    return result


class _GraphView:
    """Who produces and consumes what in a graph, and which values are activations."""

    def __init__(self, model: onnx.ModelProto) -> None:
        graph = model.graph
        self.shapes = _value_shapes(model)
        self.producers = {out: node for node in graph.node for out in node.output}
        self.consumers = consumers(graph)
        self.activations = activations(graph)

    def sampler(self, name: str, shape: tuple[int, ...]) -> Sampler:
        """The distribution for weight `name`, from the first real op that consumes it."""
        value, seen = name, shape
        while True:
            users = self.consumers.get(value, [])
            if not users:
                return _OTHER
            op, index = users[0]
            if op.op_type not in _PASS_THROUGH or index != 0:
                break
            value = op.output[0]
            seen = self.shapes.get(value)
        fan_in = _fan_in(op, index, seen) if seen is not None else None
        if fan_in is not None:
            gain = 2.0 if self._after_relu(op) else 1.0
            return _scaled_normal(gain / max(fan_in, 1))
        base = _BY_ROLE.get((op.op_type, index), _BY_OP.get(op.op_type, _OTHER))
        branches = self._residual_branches(op) if (op.op_type, index) in _SCALES else 1
        return _times(base, 1.0 / branches) if branches > 1 else base

    def _after_relu(self, op: onnx.NodeProto) -> bool:
        """Whether `op`'s data input is a Relu output (seen through sign-keeping ops)."""
        node = self.producers.get(op.input[0])
        while node is not None and node.op_type in _KEEPS_SIGN:
            node = self.producers.get(node.input[0])
        return node is not None and node.op_type == "Relu"

    def _residual_branches(self, op: onnx.NodeProto) -> int:
        """How many activations the residual sum fed by `op` adds up (1 when there is none)."""
        for user, _ in self.consumers.get(op.output[0], []):
            if user.op_type in _PASS_THROUGH or user.op_type == "Relu":
                return self._residual_branches(user)
            if user.op_type in ("Add", "Sum"):
                return max(1, sum(1 for name in user.input if name in self.activations))
        return 1


def _value_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Static shapes of the intermediate values onnx shape inference can work out."""
    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:  # inference is best effort: a weight whose shape is unknown keeps its own
        return {}
    shapes = {}
    for value in inferred.graph.value_info:
        tensor_type = value.type.tensor_type
        if tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in tensor_type.shape.dim):
            shapes[value.name] = tuple(d.dim_value for d in tensor_type.shape.dim)
    return shapes


def _remove_fills(graph: onnx.GraphProto, fills: list[onnx.NodeProto]) -> None:
    """Drop the ConstantOfShape nodes, and their shape initializers once nothing else reads them."""
    for node in fills:
        graph.node.remove(node)
    still_read = {name for node in graph.node for name in node.input}
    dropped = {node.input[0] for node in fills} - still_read
    kept_initializers = [t for t in graph.initializer if t.name not in dropped]
    kept_inputs = [v for v in graph.input if v.name not in dropped]
    del graph.initializer[:]
    graph.initializer.extend(kept_initializers)
    del graph.input[:]
    graph.input.extend(kept_inputs)
