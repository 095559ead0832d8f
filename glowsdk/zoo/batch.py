"""Running the bundled models at another batch size.

The light models declare batch 1 on their input and output, and hard-code it in
the shape constants of the Reshapes that flatten features before the classifier
(or shuffle channels, in shufflenet). `rebatch` rewrites both, as an ONNX-level
transform, so glowsdk and onnxruntime run exactly the same batched model.
"""
from __future__ import annotations


import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import GlowError
from .graph_facts import activations, consumers


def rebatch(model: onnx.ModelProto, batch: int) -> onnx.ModelProto:
    """A copy of `model` whose run-time inputs and outputs have batch dimension `batch`.

    Reshapes of activations whose shape is an initializer starting with 1 get
    `batch` in its place. Intermediate value_info is dropped, since it records
    the old batch; an initializer shared between such a Reshape and any other
    reader is refused rather than silently changed for both.
    """
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise GlowError(f"rebatch: batch must be a positive integer, got {batch!r}")
    result = onnx.ModelProto()
    result.CopyFrom(model)
    graph = result.graph
    initializers = {t.name: t for t in graph.initializer}
    for value in graph.input:
        dims = value.type.tensor_type.shape.dim
        first = dims[0] if len(dims) else None
        if value.name not in initializers and (first is None or (first.HasField("dim_value") and
                                                                  first.dim_value != 1)):
            shown = "a scalar" if first is None else f"dim 0 = {first.dim_value}"
            raise GlowError(f"rebatch: input '{value.name}' has {shown}, not a batch of 1 or a symbolic "
                            f"batch; only such models can be re-batched")
    for value in list(graph.input) + list(graph.output):
        dims = value.type.tensor_type.shape.dim
        if value.name not in initializers and len(dims) > 0:
            dims[0].dim_value = int(batch)
    del graph.value_info[:]

    live = activations(graph)
    users = consumers(graph)
    for node in graph.node:
        if node.op_type != "Reshape" or node.input[0] not in live or node.input[1] not in initializers:
            continue
        tensor = initializers[node.input[1]]
        shape = numpy_helper.to_array(tensor).copy()
        if shape.size == 0 or shape[0] != 1:
            continue
        readers = {id(user) for user, _ in users[tensor.name]
                   if user.op_type == "Reshape" and user.input[0] in live}
        if len(readers) != len(users[tensor.name]):
            raise GlowError(f"rebatch: shape initializer '{tensor.name}' of Reshape "
                            f"'{node.name or node.output[0]}' is also read by other nodes")
        shape[0] = batch
        tensor.CopyFrom(numpy_helper.from_array(shape, tensor.name))
    return result
