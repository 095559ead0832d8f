"""1-D convolutions and pools as 2-D ones over images of one row.

The NPU's layers take NCHW images. A 1-D window (an audio front end's Conv1d of kernel 80, stride 16, its
MaxPool1d, a mean over time that the quantizer made a whole-row AveragePool) is the same window over an
N x C x 1 x L image with a 1 x k kernel. support.py accepts the 1-D forms, so the quantizer converts them
as they are; the backend's post-lowering transform (after quantization, before scheduling) then rewrites
each into Reshape -> the 2-D node -> Reshape: the types unchanged but for their shapes, a filter given its
unit row axis. The result computes the same integers (the reference evaluator's 2-D kernel over a unit
dim is its 1-D kernel).
"""
from __future__ import annotations

from ...graph.function import Function
from ...graph.node import Constant, Node, NodeValue
from ...graph.nodes import quant, tensor

KINDS = ("Conv", "MaxPool", "AveragePool")
"""The windowed kinds the NPU runs in 2-D only."""


def _row(attrs: dict) -> dict:
    """A 1-D window's attributes as the 2-D window of one row: 1 x k kernel, no vertical stride or padding."""
    changed = dict(attrs)
    changed.update(kernel=(1, *attrs["kernel"]), strides=(1, *attrs["strides"]), dilations=(1, *attrs["dilations"]),
                   pads=(0, attrs["pads"][0], 0, attrs["pads"][1]))
    return changed


def _unit_row(function: Function, value: NodeValue) -> NodeValue:
    """`value` (N x C x L) as N x C x 1 x L: a Constant gets a new one (a filter), anything else a Reshape."""
    n, c, length = value.type.shape
    shape = (n, c, 1, length)
    if isinstance(value.node, Constant):
        data = value.node.value.reshape(shape)
        return function.module.create_constant(f"{value.name}/row", data, value.type.with_shape(shape)).result()
    return function.add(tensor.Reshape, value, name=f"{value.name}/row", shape=shape)


def is_row_window(node: Node) -> bool:
    """A 1-D window the transform turns into a 2-D one."""
    return node.kind in KINDS and len(node.kernel) == 1


def windows_as_rows(function: Function) -> bool:
    """Rewrite every 1-D Conv, MaxPool and AveragePool into its 2-D form over one row; whether any changed."""
    windows = [n for n in function.nodes if is_row_window(n)]
    for node in windows:
        # a convolution's layer is Conv -> Rescale (support.py): the Rescale moves into the row form with it
        users = list(node.users)
        rescale = users[0] if node.kind == "Conv" and len(users) == 1 and users[0].kind == "Rescale" else None
        last = rescale or node
        with function.inserting_before(last):
            # the image and a filter are N x C x L; a bias (one value per output channel) stays as it is
            inputs = [v if v is None or v.type.rank != 3 else _unit_row(function, v) for v in node.inputs]
            row = function.create(type(node), inputs, f"{node.name}/row", **_row(node.attrs)).result()
            if rescale is not None:
                row = function.add(quant.Rescale, row, name=f"{rescale.name}/row",
                                   result_type=rescale.type.with_shape(row.type.shape))
            flat = function.add(tensor.Reshape, row, name=f"{last.name}/flat", shape=last.type.shape)
        function.replace_all_uses(last.result(), flat)
        for done in (last, node) if rescale is not None else (node,):
            function.erase(done)
    function.erase_dead()
    return bool(windows)
