"""Which quantized nodes the NPU runs: the forms its layers (layers.py) implement, checked per node.

Matrix work must arrive as a layer: Conv (int8 image, constant symmetric int8 filter, optional int32
bias, 2-D, any groups: grouped.py) or a 2-D MatMul by a constant int8 matrix, whose only user is a
Rescale to int8 (the MatMul possibly through one Add of a constant int32 bias row first); likewise a
Mul of an int8 image by a constant per-channel vector (a standalone BatchNorm, through a per-channel
int32 bias: affine.py). Softmax (over trailing dims) takes an int8 input to the fixed int8 type of
probabilities; LRN keeps its int8 type (lrn.py). Everything else moves or combines int8 tensors of
one quantized type per tensor (per-channel scales only on weights and accumulators). KEPT_UNLOWERED
lists the kinds the NPU takes unlowered, for the quantizer to convert.
"""
from __future__ import annotations

from typing import Callable

from ...graph.node import Constant, Node, NodeValue
from ...graph.nodes import quant
from ...graph.nodes.lrn_int8 import lrn_table
from ...graph.types import ElemKind
from .softmax import MAX_GROUP, trailing_length

Q8, Q32 = ElemKind.QINT8, ElemKind.QINT32
MAX_LRN_SIZE = 63
"""LRN windows up to this many channels (one VADD per channel of the window)."""


def _int8(value: NodeValue) -> bool:
    return value.type.elem is Q8 and not value.type.per_channel


def _constant(value: NodeValue | None) -> bool:
    """A Constant, or (while the quantizer works) the Quantize of one that constant folding will fold."""
    if value is not None and value.node.kind == "Quantize":
        value = value.node.inputs[0]
    return value is not None and isinstance(value.node, Constant)


def _rescaled(node: Node) -> bool:
    """The accumulator's only user is a Rescale to per-tensor int8."""
    users = list(node.users)
    return len(users) == 1 and users[0].kind == "Rescale" and _int8(users[0].result())


def _conv(node: Node) -> bool:
    x, w = node.input, node.filter
    return (_int8(x) and len(node.kernel) == 2 and _constant(w) and w.type.elem is Q8
            and not w.type.offsets.any() and node.type.elem is Q32
            and (node.bias is None or (_constant(node.bias) and node.bias.type.elem is Q32))
            and all(1 <= k <= 15 for k in (*node.kernel, *node.strides, *node.dilations))
            and all(0 <= p <= 255 for p in node.pads) and _rescaled(node))


def _channel_vector(value: NodeValue, rank: int) -> bool:
    """A constant broadcasting along dim 1 of a rank-`rank` tensor only (one value per channel, or one)."""
    dims = value.type.shape
    padded = (1,) * (rank - len(dims)) + tuple(dims)
    return _constant(value) and len(dims) <= rank and all(d == 1 for i, d in enumerate(padded) if i != 1)


def _bias_add(node: Node) -> bool:
    """An int32 Add of a constant to a product's accumulator, rescaled after: a row (one value per column)
    to a MatMul's, a per-channel vector to a per-channel Mul's (affine.py)."""
    if node.type.elem is not Q32:
        return False
    product, bias = (node.lhs, node.rhs) if node.lhs.node.kind in ("MatMul", "Mul") else (node.rhs, node.lhs)
    if not (_constant(bias) and bias.type.elem is Q32 and _rescaled(node)):
        return False
    if product.node.kind == "MatMul":
        return bias.type.size == node.type.shape[-1]
    return product.node.kind == "Mul" and not bias.type.per_channel and _channel_vector(bias, len(node.type.shape))


def _matmul(node: Node) -> bool:
    lhs, rhs = node.lhs, node.rhs
    if not (len(lhs.type.shape) == 2 and _int8(lhs) and _constant(rhs) and rhs.type.elem is Q8
            and not rhs.type.offsets.any() and node.type.elem is Q32 and len(node.users) == 1):
        return False
    user = next(iter(node.users))
    return _rescaled(node) or (user.kind == "Add" and _bias_add(user))


def _mul(node: Node) -> bool:
    """An NCHW int8 image times a constant per-channel int8 vector (symmetric), into int32, rescaled after
    (through a per-channel bias Add or not): a standalone BatchNorm (affine.py)."""
    x, w = (node.lhs, node.rhs) if _constant(node.rhs) else (node.rhs, node.lhs)
    if not (len(node.type.shape) == 4 and _int8(x) and x.type.shape == node.type.shape and w.type.elem is Q8
            and not w.type.per_channel and w.type.offset == 0 and _channel_vector(w, 4)
            and node.type.elem is Q32 and len(node.users) == 1):
        return False
    user = next(iter(node.users))
    return _rescaled(node) or (user.kind == "Add" and _bias_add(user))


def _same_quant(a: NodeValue, node: Node) -> bool:
    return _int8(a) and a.type.scale == node.type.scale and a.type.offset == node.type.offset


def _same_type(node: Node) -> bool:
    """int8 operands and result of one scale and offset; an operand of another shape must be a constant."""
    return _int8(node.result()) and all(
        _same_quant(v, node) and (v.type.shape == node.type.shape or _constant(v)) for v in node.inputs)


def _rescale(node: Node) -> bool:
    source = node.input
    if source.type.elem is Q32:  # an accumulator's Rescale is part of its layer
        return source.node.kind in ("Conv", "MatMul", "Mul", "Add") and quantized_form_ok(source.node)
    return _int8(source) and _int8(node.result())


def _pool(node: Node) -> bool:
    ok = (_same_quant(node.input, node) and len(node.kernel) == 2 and not any(d != 1 for d in node.dilations)
          and all(1 <= k <= 15 for k in (*node.kernel, *node.strides)) and all(0 <= p <= 15 for p in node.pads))
    if ok and node.kind == "AveragePool" and node.attrs.get("ceil_mode"):
        n, c, h, w = node.input.type.shape
        ok = all((o - 1) * s + k <= size + p0 + p1 for o, s, k, size, p0, p1 in
                 zip(node.type.shape[2:], node.strides, node.kernel, (h, w), node.pads[:2], node.pads[2:]))
    return ok


def _moves(node: Node) -> bool:
    if not all(_same_quant(v, node) for v in node.inputs):
        return False
    return node.kind != "Slice" or all(step >= 1 for step in node.steps)


def _border(node: Node) -> bool:
    """Conversions at the island borders. The quantizer also places Quantize on weights (folded into
    constants) and Dequantize -> Quantize pairs (merged into Rescale); compile checks what remains."""
    if node.kind == "Quantize":
        return node.type.elem in (Q8, Q32)
    return _int8(node.input)


def softmax_form(node: Node) -> bool:
    """Softmax over trailing dims (dense groups) short enough for REDUCE/VDIV and the fixed-point table."""
    length = trailing_length(node.input.type.shape, tuple(node.axes))
    return length is not None and length <= MAX_GROUP and 31 - length.bit_length() >= quant.SOFTMAX_SHIFT


def global_pool_form(node: Node) -> bool:
    """A 2-D GlobalAveragePool whose whole image is one POOL window (the quantizer makes it an AveragePool)."""
    shape = node.input.type.shape
    return len(shape) == 4 and all(1 <= d <= 15 for d in shape[2:])


def lrn_form(node: Node) -> bool:
    """An LRN over the channels of an NCHW image whose int8 form keeps its type and has a table (lrn_int8.py)."""
    return len(node.input.type.shape) == 4 and node.bias >= 1 and node.alpha >= 0 and node.size <= MAX_LRN_SIZE


def _lrn(node: Node) -> bool:
    x = node.input.type
    if not (_same_quant(node.input, node) and lrn_form(node)):
        return False
    try:
        lrn_table(x.scale, x.offset, node.size, node.alpha, node.beta, node.bias)
    except ValueError:
        return False
    return True


KEPT_UNLOWERED: dict[str, Callable[[Node], bool]] = {"Softmax": softmax_form, "GlobalAveragePool": global_pool_form,
                                                     "LRN": lrn_form}
"""Kinds the NPU keeps unlowered in these forms, for the shared quantizer to convert to what its layers run."""


def _softmax(node: Node) -> bool:
    return _int8(node.input) and softmax_form(node)


QUANTIZED_FORMS: dict[str, Callable[[Node], bool]] = {
    "Conv": _conv, "MatMul": _matmul, "Mul": _mul, "Rescale": _rescale, "MaxPool": _pool, "AveragePool": _pool,
    "Max": _same_type, "Min": _same_type, "Reshape": _moves, "Transpose": _moves, "Concat": _moves,
    "Slice": _moves, "Softmax": _softmax, "LRN": _lrn, "Quantize": _border, "Dequantize": _border,
}


def quantized_form_ok(node: Node) -> bool:
    """Whether the NPU runs `node` as it is (a quantized node of a form the layers implement)."""
    if node.kind == "Add":
        return _bias_add(node) if node.type.elem is Q32 else _same_type(node)
    check = QUANTIZED_FORMS.get(node.kind)
    return check is not None and check(node)
