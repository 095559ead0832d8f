"""A small seeded MLP as an ONNX model: the light network the cache and bundle tests compile."""
from __future__ import annotations

import itertools

import numpy as np
import onnx
from onnx import helper, numpy_helper


def mlp(sizes: tuple[int, ...] = (16, 32, 5), batch: int = 2, seed: int = 0, input_name: str = "x",
        output_name: str = "y") -> onnx.ModelProto:
    """Gemm layers of `sizes` (input width first) with Relu between them, weights drawn from `seed`."""
    rng = np.random.default_rng(seed)
    nodes, weights, last = [], [], input_name
    for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        weights += [numpy_helper.from_array(rng.standard_normal((n_in, n_out)).astype(np.float32), f"w{i}"),
                    numpy_helper.from_array(rng.standard_normal(n_out).astype(np.float32), f"b{i}")]
        final = i == len(sizes) - 2
        nodes.append(helper.make_node("Gemm", [last, f"w{i}", f"b{i}"], [output_name if final else f"g{i}"]))
        if not final:
            nodes.append(helper.make_node("Relu", [f"g{i}"], [f"h{i}"]))
            last = f"h{i}"
    inputs = [helper.make_tensor_value_info(input_name, onnx.TensorProto.FLOAT, [batch, sizes[0]])]
    outputs = [helper.make_tensor_value_info(output_name, onnx.TensorProto.FLOAT, [batch, sizes[-1]])]
    graph = helper.make_graph(nodes, "mlp", inputs, outputs, initializer=weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
