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
    _join_rows(function)
    function.erase_dead()
    return bool(windows)


UNARY = ("Rescale", "TableLookup")
"""Element-wise kinds of one image operand, indifferent to its shape: a row's Reshape moves past them."""


def _join_rows(function: Function) -> None:
    """Between two windows, Reshape to N x C x L then back to N x C x 1 x L cancels, so the layers pass images
    without the copies a change of layout costs: each unary step moves before the first Reshape, then a Reshape
    of a Reshape reads the first one's input."""
    for node in list(function.nodes):
        # Reshape(x) -> U  becomes  U(x) -> Reshape
        step = _only_user(node) if node.kind == "Reshape" else None
        if step is None or step.kind not in UNARY or step.inputs[0] != node.result():
            continue
        attrs = dict(step.attrs)
        if "result_type" in attrs:
            attrs["result_type"] = step.type.with_shape(node.input.type.shape)
        with function.inserting_before(step):
            moved = function.create(type(step), [node.input, *step.inputs[1:]], f"{step.name}/row", **attrs)
            flat = function.add(tensor.Reshape, moved.result(), name=f"{step.name}/flat", shape=step.type.shape)
        function.replace_all_uses(step.result(), flat)
        function.erase(step)
    for node in list(function.nodes):
        # Reshape(Reshape(x)) -> x, or Reshape(x)
        if node.kind != "Reshape" or node.input.node.kind != "Reshape":
            continue
        source = node.input.node.input
        if source.type.shape == node.type.shape:
            function.replace_all_uses(node.result(), source)
        else:
            function.set_input(node, 0, source)


def _only_user(node: Node) -> Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 else None
