"""Which quantized nodes the NPU runs: the forms its layers (layers.py) implement, checked per node.

Matrix work must arrive as a layer: Conv (int8 image, constant symmetric int8 filter, optional int32 bias, 2-D,
any groups: grouped.py) or a 2-D MatMul by a constant int8 matrix, whose only user is a Rescale to int8 (the
MatMul possibly through one Add of a constant int32 bias row first), or a MatMul of two int8 activations of one
batch shape (attention's products, bmm.py) rescaled to int8; likewise a Mul of an int8 image by a constant per-
channel vector (a standalone BatchNorm, through a per-channel int32 bias: affine.py), or by an N x C x 1 x 1
int8 tensor computed at run time (a channel gate: gate.py), or two int8 tensors of its shape (a recurrent cell's
gates: product.py). Softmax (over trailing dims) takes an int8 input to the fixed int8 type of probabilities
(or, `wide`, int32 of scale 2^-16), its input code -128 meaning -inf when `masked`; LRN keeps its int8 type
(lrn.py); IntegerLayerNorm normalises the last dim (layernorm.py); Gather picks int8 rows by host or constant
indices (gather.py); a TableLookup maps int8 to int8 through a constant table (lut.py), the int8 form of the
unary functions the NPU keeps unlowered (Sigmoid, GELU...). Everything else moves or combines int8 tensors of
one quantized type per tensor (per-channel scales only on weights and accumulators).

SUPPORT is the one table of it, a row per kind: the quantized form the layers implement, the element
kinds the backend declares for the kind as a primitive, the device's limits (window fields, group and
channel counts: what keeps a node off the NPU whatever its types, so `unsupported_reason` can say so),
the limits that depend on the architecture configuration (SRAM sizes), and the form in which the NPU
keeps the kind unlowered for the shared quantizer to convert. The backend (backend.py) reads it all here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from isa.config import ArchConfig

from ...graph.node import Constant, Node, NodeValue, Placeholder
from ...graph.nodes import quant
from ...graph.nodes.layernorm_int8 import statistics_unused
from ...graph.nodes.lrn_int8 import lrn_table
from ...graph.types import ElemKind
from .bmm import bmm_limits
from .broadcast import row_length
from .gather import gather_limits
from .layernorm import layernorm_limits
from .softmax import MAX_GROUP, fits, trailing_length

Q8, Q32 = ElemKind.QINT8, ElemKind.QINT32
MAX_LRN_SIZE = 63
"""LRN windows up to this many channels (one VADD per channel of the window)."""
MAX_WINDOW, MAX_DILATION = 255, 15
"""Kernel and stride fields of CONFIG_MATMUL and CONFIG_POOL (8 bits since ISA 2.0), and the dilation fields
(a global pool's image may be larger: globalpool.py)."""
MAX_CONV_PAD, MAX_POOL_PAD = 255, 255
"""The padding fields of CONFIG_PAD and CONFIG_POOL."""


# -- the device's limits, whatever the types --------------------------------------------------------
def _outside(what: str, values, low: int, high: int) -> list[str]:
    """`kernel 80 > 15` for each distinct value outside [low, high]."""
    return [f"{what} {v} > {high}" if v > high else f"{what} {v} < {low}" for v in dict.fromkeys(values)
            if not low <= v <= high]


def _image_2d(node: Node, what: str) -> list[str]:
    """A 2-D image, or a 1-D one (the backend's transform makes it an image of one row: one_row.py)."""
    spatial = len(node.kernel)
    return [] if spatial in (1, 2) else [f"{spatial}-D (the NPU {what} 1-D and 2-D images only)"]


def conv_limits(node: Node) -> list[str]:
    """CONV's fields: a 2-D image, kernel and stride 1..255, dilation 1..15, padding 0..255."""
    return [*_image_2d(node, "convolves"), *_outside("kernel", node.kernel, 1, MAX_WINDOW),
            *_outside("stride", node.strides, 1, MAX_WINDOW), *_outside("dilation", node.dilations, 1, MAX_DILATION),
            *_outside("pad", node.pads, 0, MAX_CONV_PAD)]


def whole_image_window(node: Node) -> bool:
    """A 2-D pool whose one window is the whole unpadded image (global pooling: globalpool.py, any size)."""
    shape = node.input.type.shape
    return (len(shape) in (3, 4) and tuple(node.kernel) == tuple(shape[2:]) and not any(node.pads)
            and all(d == 1 for d in node.type.shape[2:]) and all(d == 1 for d in node.dilations))


def pool_limits(node: Node) -> list[str]:
    """POOL's fields: a 2-D image, kernel and stride 1..255, no dilation, padding 0..255; an AveragePool's
    ceil_mode windows must end inside the padding. A window over the whole image has no limit."""
    if whole_image_window(node):
        return []
    problems = [*_image_2d(node, "pools"), *_outside("kernel", node.kernel, 1, MAX_WINDOW),
                *_outside("stride", node.strides, 1, MAX_WINDOW), *_outside("dilation", node.dilations, 1, 1),
                *_outside("pad", node.pads, 0, MAX_POOL_PAD)]
    if not problems and node.kind == "AveragePool" and node.attrs.get("ceil_mode"):
        h, w = node.input.type.shape[2:]
        if not all((o - 1) * s + k <= size + p0 + p1 for o, s, k, size, p0, p1 in
                   zip(node.type.shape[2:], node.strides, node.kernel, (h, w), node.pads[:2], node.pads[2:])):
            problems.append("ceil_mode windows reach past the padding")
    return problems


def softmax_limits(node: Node) -> list[str]:
    """Softmax over trailing dims (dense groups) short enough for REDUCE/VDIV and the fixed-point table."""
    length = trailing_length(node.input.type.shape, tuple(node.axes))
    if length is None:
        return [f"axes {sorted(node.axes)} are not the trailing dims of {list(node.input.type.shape)}"]
    if length > MAX_GROUP or 31 - length.bit_length() < quant.SOFTMAX_SHIFT:
        return [f"a group of {length} elements > {MAX_GROUP}"]
    return []


def global_pool_limits(node: Node) -> list[str]:
    """A 1-D or 2-D GlobalAveragePool, of any size (the quantizer makes it an AveragePool of the whole image)."""
    shape = node.input.type.shape
    return [] if len(shape) in (3, 4) else [f"{len(shape) - 2}-D (the NPU pools 1-D and 2-D images only)"]


def lrn_limits(node: Node) -> list[str]:
    """An LRN over the channels of an NCHW image whose int8 form keeps its type (lrn_int8.py)."""
    rank = len(node.input.type.shape)
    return [*([] if rank == 4 else [f"rank {rank}, not an NCHW image"]),
            *_outside("size", [node.size], 1, MAX_LRN_SIZE),
            *([] if node.bias >= 1 else [f"bias {node.bias} < 1"]),
            *([] if node.alpha >= 0 else [f"alpha {node.alpha} < 0"])]


def matmul_limits(node: Node) -> list[str]:
    """The matrix engine multiplies a 2-D matrix by constant weights it pre-tiles (gemm.py), or two run-time
    operands of one batch shape (bmm.py)."""
    if not _constant(node.rhs):
        return bmm_limits(node.lhs.type.shape, node.rhs.type.shape)
    rank = len(node.lhs.type.shape)
    return [] if rank == 2 else [f"a left operand of rank {rank}, not 2 (with constant weights)"]


def _softmax_fits(node: Node, config: ArchConfig) -> list[str]:
    length = trailing_length(node.input.type.shape, tuple(node.axes))
    if length is None or length > MAX_GROUP or fits(length, config, bool(node.attrs.get("masked", False))):
        return []
    return [f"a group of {length} elements does not fit the '{config.name}' configuration's scratchpad "
            f"({config.scratchpad_bytes} B) and accumulator ({config.accumulator_bytes} B)"]


def _pool_fits(node: Node, config: ArchConfig) -> list[str]:
    """A windowed pool's smallest tile (one output row of one channel, with its window's input rows) must fit a
    quarter of the scratchpad (vector.PoolLayer); a window over the whole image streams (globalpool.py)."""
    if pool_limits(node) or whole_image_window(node) or len(node.kernel) != 2:
        return []
    width, out_width = node.input.type.shape[-1], node.type.shape[-1]
    if node.kernel[0] * width + out_width <= config.scratchpad_bytes // 4:
        return []
    return [f"a {node.kernel[0]}x{node.kernel[1]} window over {width}-pixel rows does not fit the "
            f"'{config.name}' configuration's scratchpad ({config.scratchpad_bytes} B)"]


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
    return (_int8(x) and _constant(w) and w.type.elem is Q8
            and not w.type.offsets.any() and node.type.elem is Q32
            and (node.bias is None or (_constant(node.bias) and node.bias.type.elem is Q32))
            and not conv_limits(node) and _rescaled(node))


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
    if not _constant(rhs):  # two activations: int8 per tensor each, the product rescaled (bmm.py)
        return not matmul_limits(node) and _int8(lhs) and _int8(rhs) and node.type.elem is Q32 and _rescaled(node)
    if not (not matmul_limits(node) and _int8(lhs) and rhs.type.elem is Q8
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


def _gate(node: Node) -> bool:
    """An NCHW int8 image times an int8 N x C x 1 x 1 tensor computed at run time (a squeeze-and-excitation
    gate), into int32, rescaled after (gate.py)."""
    shape = node.type.shape
    if len(shape) != 4 or node.type.elem is not Q32 or not (_int8(node.lhs) and _int8(node.rhs)):
        return False
    x, s = (node.lhs, node.rhs) if node.lhs.type.shape == shape else (node.rhs, node.lhs)
    return (x.type.shape == shape and tuple(s.type.shape) == (*shape[:2], 1, 1) and not _constant(s)
            and _rescaled(node))


def product_form(node: Node) -> bool:
    """Two int8 tensors of the result's shape, one at least computed at run time (the other may be a constant of
    any broadcastable shape, made whole), into int32, rescaled after (product.py), where the per-channel forms
    (affine.py, gate.py) do not apply."""
    computed = [v for v in node.inputs if not _constant(v)]
    return (node.type.elem is Q32 and bool(computed) and all(_int8(v) for v in node.inputs)
            and all(v.type.shape == node.type.shape for v in computed) and _rescaled(node)
            and not _mul(node) and not _gate(node))


def _mul_or_gate(node: Node) -> bool:
    return _mul(node) or _gate(node) or product_form(node)


def _same_quant(a: NodeValue, node: Node) -> bool:
    return _int8(a) and a.type.scale == node.type.scale and a.type.offset == node.type.offset


def _same_type(node: Node) -> bool:
    """int8 operands and result of one scale and offset; an operand of another shape must be a constant, or one row
    of the result broadcast over its other rows (a padding mask: broadcast.py)."""
    return _int8(node.result()) and all(
        _same_quant(v, node) and (v.type.shape == node.type.shape or _constant(v)
                                  or row_length(v.type.shape, node.type.shape) is not None) for v in node.inputs)


def _rescale(node: Node) -> bool:
    source = node.input
    if source.type.elem is Q32:  # an accumulator's Rescale is part of its layer
        return source.node.kind in ("Conv", "MatMul", "Mul", "Add") and quantized_form_ok(source.node)
    return _int8(source) and _int8(node.result())


def _pool(node: Node) -> bool:
    return _same_quant(node.input, node) and not pool_limits(node)


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
    return not softmax_limits(node)


def global_pool_form(node: Node) -> bool:
    return not global_pool_limits(node)


def spatial_mean_form(node: Node) -> bool:
    """A ReduceMean over H and W of an NCHW image, or over L of an NCL one: global average pooling (the quantizer's
    ReduceMean rule)."""
    spatial = tuple(range(2, len(node.input.type.shape)))
    return spatial in ((2,), (2, 3)) and tuple(node.axes) == spatial


def lrn_form(node: Node) -> bool:
    return not lrn_limits(node)


def _lrn(node: Node) -> bool:
    x = node.input.type
    if not (_same_quant(node.input, node) and lrn_form(node)):
        return False
    try:
        lrn_table(x.scale, x.offset, node.size, node.alpha, node.beta, node.bias)
    except ValueError:
        return False
    return True


def any_form(node: Node) -> bool:
    return True


def layernorm_form(node: Node) -> bool:
    """A LayerNorm over the last dim whose statistics nobody reads: the quantizer's IntegerLayerNorm."""
    rank = node.input.type.rank
    return node.axis in (rank - 1, -1) and statistics_unused(node) and not layernorm_limits(
        node.input.type.shape[-1] if rank else 0)


def _integer_layernorm(node: Node) -> bool:
    return (_int8(node.input) and _int8(node.result()) and _constant(node.gamma) and _constant(node.beta)
            and not layernorm_limits(node.input.type.shape[-1]))


TABLE_KINDS = ("Sigmoid", "Gelu", "HardSigmoid", "HardSwish", "Silu")
"""Unary kinds that lower to several primitives on other targets; the quantizer makes each one TableLookup (Tanh,
Erf and Exp are primitives: no lowering to refuse)."""

def _softmax(node: Node) -> bool:
    return _int8(node.input) and softmax_form(node)


def _reinterpret(node: Node) -> bool:
    """int8 bytes relabelled with another per-tensor scale and offset: a view of the same bytes."""
    return _int8(node.input) and _int8(node.result())


def _gather(node: Node) -> bool:
    """Rows of an int8 table picked by integer indices that the host gives or a constant holds (gather.py)."""
    indices = node.indices
    return (_int8(node.data) and _same_quant(node.data, node) and not gather_limits(node)
            and indices.type.elem in (ElemKind.INT64, ElemKind.INT32)
            and (isinstance(indices.node, Placeholder) or _constant(indices)))


def _table_lookup(node: Node) -> bool:
    return _int8(node.input) and _int8(node.result()) and _constant(node.table)


def _add(node: Node) -> bool:
    return _bias_add(node) if node.type.elem is Q32 else _same_type(node)


def _sub(node: Node) -> bool:
    """saturate(a - b + zero) in one type (vector.py), no run-time broadcast."""
    return _same_type(node) and all(v.type.shape == node.type.shape or _constant(v) for v in node.inputs)


@dataclass(frozen=True)
class Support:
    """What the NPU runs of one node kind, and its limits."""

    form: Callable[[Node], bool] | None = None
    """The quantized form the layers implement (layers.LAYERS has the kind's builder); None: never as it is."""
    elems: frozenset[ElemKind] = frozenset()
    """The element kinds the backend declares for the kind as a primitive (Backend.primitives); empty: none."""
    limits: Callable[[Node], list[str]] | None = None
    """What keeps a node off the NPU whatever its element kinds (empty: within the limits)."""
    config_limits: Callable[[Node, ArchConfig], list[str]] | None = None
    """The limits that depend on the architecture configuration compiled for."""
    unlowered: Callable[[Node], bool] | None = None
    """The form in which the NPU keeps the kind unlowered, for the shared quantizer to convert to what its layers
    run; None: lowered as usual."""


_Q8_Q32 = frozenset({Q8, Q32})
_INT8 = frozenset({Q8})

SUPPORT: dict[str, Support] = {
    # products: a matrix layer, or the vector engine's per-channel and element-wise ones
    "Conv": Support(_conv, _Q8_Q32, conv_limits),
    "MatMul": Support(_matmul, _Q8_Q32, matmul_limits),
    "Mul": Support(_mul_or_gate, _Q8_Q32),
    "Add": Support(_add, _Q8_Q32),
    "Rescale": Support(_rescale, _Q8_Q32),
    # element-wise and pooling in one int8 type
    "Sub": Support(_sub, _INT8),
    "Max": Support(_same_type, _INT8),
    "Min": Support(_same_type, _INT8),
    "MaxPool": Support(_pool, _INT8, pool_limits, _pool_fits),
    "AveragePool": Support(_pool, _INT8, pool_limits, _pool_fits),
    # data movement
    "Reshape": Support(_moves, _INT8),
    "Transpose": Support(_moves, _INT8),
    "Concat": Support(_moves, _INT8),
    "Slice": Support(_moves, _INT8),
    "Reinterpret": Support(_reinterpret, _INT8),
    "Gather": Support(_gather, frozenset({Q8, ElemKind.INT64, ElemKind.INT32}), gather_limits),
    "IntegerLayerNorm": Support(_integer_layernorm, frozenset({Q8, ElemKind.INT32})),
    # the border: the host binding quantizes the inputs and dequantizes the outputs
    "Quantize": Support(_border, frozenset({Q8, Q32, ElemKind.FLOAT32})),
    "Dequantize": Support(_border, frozenset({Q8, ElemKind.FLOAT32})),
    # kept unlowered, for the quantizer to convert (into themselves, an AveragePool, an IntegerLayerNorm, a table)
    "Softmax": Support(_softmax, limits=softmax_limits, config_limits=_softmax_fits, unlowered=softmax_form),
    "LRN": Support(_lrn, limits=lrn_limits, unlowered=lrn_form),
    "TableLookup": Support(_table_lookup, unlowered=any_form),
    "GlobalAveragePool": Support(limits=global_pool_limits, unlowered=global_pool_form),
    "ReduceMean": Support(unlowered=spatial_mean_form),
    "LayerNorm": Support(unlowered=layernorm_form),
    **{kind: Support(unlowered=any_form) for kind in TABLE_KINDS},
}
"""Node kind -> what the NPU runs of it and its limits; a kind not here the NPU does not run."""

PRIMITIVES: dict[str, frozenset[ElemKind]] = {kind: s.elems for kind, s in SUPPORT.items() if s.elems}
"""The primitives the backend declares, with their element kinds (Backend.primitives)."""


def device_limits(node: Node, config: ArchConfig) -> list[str]:
    """Every limit of the device `node` exceeds, in the user's terms (empty: none)."""
    support = SUPPORT.get(node.kind)
    if support is None:
        return []
    return [*(support.limits(node) if support.limits else []),
            *(support.config_limits(node, config) if support.config_limits else [])]


def kept_unlowered(node: Node) -> bool:
    """Whether the NPU keeps `node` unlowered, in a form for the quantizer to convert."""
    support = SUPPORT.get(node.kind)
    return support is not None and support.unlowered is not None and support.unlowered(node)


def quantized_form_ok(node: Node) -> bool:
    """Whether the NPU runs `node` as it is (a quantized node of a form the layers implement)."""
    support = SUPPORT.get(node.kind)
    return support is not None and support.form is not None and support.form(node)
