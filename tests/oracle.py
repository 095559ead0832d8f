"""Test helpers: build small ONNX models and run them in glowsdk and in the oracles."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from glowsdk.backends import get_backend
from glowsdk.compiler.pipeline import compile_function
from glowsdk.frontend.onnx.importer import import_model


def single_op_model(op: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str] = ("y",),
                    opset: int = 21, initializers: Mapping[str, np.ndarray] | None = None,
                    **attrs) -> onnx.ModelProto:
    """A model of one node `op` whose graph inputs have the given arrays' types and shapes."""
    node = helper.make_node(op, list(inputs) + list(initializers or {}), list(outputs), **attrs)
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                    for n, a in inputs.items()]
    graph_outputs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in outputs]
    inits = [numpy_helper.from_array(a, n) for n, a in (initializers or {}).items()]
    graph = helper.make_graph([node], op.lower(), graph_inputs, graph_outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def reference_run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """The onnx package's reference implementation: an oracle glowsdk did not write."""
    return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, dict(feeds))]


def glow_run(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], target: str = "interpreter",
             constants: Sequence[str] = ()) -> list[np.ndarray]:
    """Import, compile and run in glowsdk; inputs named in `constants` are bound at compile time."""
    bound = {n: feeds[n] for n in constants}
    shapes = {n: a.shape for n, a in feeds.items() if n not in bound}
    module = import_model(model, input_shapes=shapes, constants=bound)
    compiled = compile_function(module.functions["main"], get_backend(target))
    outputs = compiled.execute({n: a for n, a in feeds.items() if n not in bound})
    return [outputs[o.name] for o in model.graph.output]
