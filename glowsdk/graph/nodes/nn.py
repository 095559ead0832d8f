"""Neural-network node kinds: convolution, pooling, normalisation, softmax.

Layout is NCHW generalised to N x C x D1..Dk (k = 1, 2 or 3 spatial dims). Window
geometry is static and explicit: `kernel`, `strides`, `dilations` (one entry per
spatial dim) and `pads` as [begin_1..begin_k, end_1..end_k]; the importer resolves
defaults and auto_pad, so type rules compute exact result shapes. Axis attributes
are stored normalised (0 <= axis < rank).
"""
from __future__ import annotations

from typing import Sequence

from ..kinds import define_node
from ..node import Node
from ..spec import bool_attr, elem_attr, float_attr, int_attr, ints_attr
from ..types import ElemKind, Type, broadcast_shapes
from .rules import (accumulator_type, is_float, is_numeric_or_quantized, is_quantized_byte, require_elem,
                    require_same_elem, same_as)

FAMILY = "nn"


def _window(prefix: str = "") -> list:
    """The attributes describing a sliding window over the spatial dims."""
    return [ints_attr("kernel", doc="window size per spatial dim"),
            ints_attr("strides", doc="step per spatial dim"),
            ints_attr("pads", doc=f"{prefix}padding: begin per spatial dim, then end per spatial dim"),
            ints_attr("dilations", doc="distance between window taps per spatial dim")]


def window_extent(kernel: int, dilation: int) -> int:
    """How many input positions one dilated window spans."""
    return (kernel - 1) * dilation + 1


def pooled_size(size: int, kernel: int, stride: int, begin: int, end: int, dilation: int,
                ceil_mode: bool = False) -> int:
    """Output length of a sliding window along one dim (ONNX/PyTorch rule).

    With ceil_mode the last, partial window counts, unless it would start past the
    input and its begin padding (then it is dropped).
    """
    span = size + begin + end - window_extent(kernel, dilation)
    if span < 0:
        return 0
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + begin:
        out -= 1
    return out


def check_window(node: Node, spatial: Sequence[int], negative_pads: bool = False) -> None:
    """GraphError unless kernel/strides/dilations/pads fit `spatial` (shared by every windowed kind)."""
    k = len(spatial)
    for name in ("kernel", "strides", "dilations"):
        values = getattr(node, name)
        if len(values) != k:
            raise node.fail(f"{name} {list(values)} needs {k} entries, one per spatial dim")
        if any(v < 1 for v in values):
            raise node.fail(f"{name} {list(values)} must be positive")
    if len(node.pads) != 2 * k:
        raise node.fail(f"pads {list(node.pads)} needs {2 * k} entries (begins, then ends)")
    if not negative_pads and any(p < 0 for p in node.pads):
        raise node.fail(f"pads {list(node.pads)} must not be negative")


def windowed_shape(node: Node, spatial: Sequence[int], ceil_mode: bool = False) -> tuple[int, ...]:
    """Output spatial dims; GraphError if a window does not fit the padded input."""
    k = len(spatial)
    check_window(node, spatial)
    out = []
    for i, size in enumerate(spatial):
        n = pooled_size(size, node.kernel[i], node.strides[i], node.pads[i], node.pads[i + k],
                        node.dilations[i], ceil_mode)
        if n < 1:
            raise node.fail(f"window of {node.kernel[i]} (dilation {node.dilations[i]}) does not fit "
                            f"spatial dim {i} of size {size} padded by {node.pads[i]}+{node.pads[i + k]}")
        out.append(n)
    return tuple(out)


def _require_float(node: Node, *names: str) -> None:
    for name in names:
        value = getattr(node, name)
        if value is not None:
            require_elem(node, value.type, is_float, name)



def _require_shape(node: Node, name: str, shape: tuple[int, ...]) -> None:
    value = getattr(node, name)
    if value is not None and value.type.shape != shape:
        raise node.fail(f"{name} must have shape {list(shape)}, got {value.type}")


def _image(node: Node, name: str = "input") -> Type:
    """The N x C x D.. operand; GraphError unless it has 1 to 3 spatial dims."""
    image = getattr(node, name).type
    if not 3 <= image.rank <= 5:
        raise node.fail(f"{name} must be N x C x D1..Dk with 1 to 3 spatial dims, got {image}")
    return image


# -- convolution ---------------------------------------------------------------------------------
def _conv_type(node: Node) -> Type:
    image, filt = _image(node), node.filter.type
    n, c, spatial = image.shape[0], image.shape[1], image.shape[2:]
    if filt.rank != image.rank:
        raise node.fail(f"filter {filt} must have the rank of the input {image}")
    if node.group < 1 or c % node.group or filt.shape[0] % node.group:
        raise node.fail(f"group {node.group} must divide the input channels ({c}) "
                        f"and the filters ({filt.shape[0]})")
    if filt.shape[1] != c // node.group:
        raise node.fail(f"filter {filt} must have {c // node.group} channels (input channels / group)")
    if tuple(node.kernel) != filt.shape[2:]:
        raise node.fail(f"kernel {list(node.kernel)} does not match the filter {filt}")
    shape = (n, filt.shape[0]) + windowed_shape(node, spatial)
    if image.elem.is_quantized or filt.elem.is_quantized:
        return accumulator_type(node, image, filt, shape, (0, 1))
    return image.with_shape(shape)


def quantized_bias_type(image: Type, filt: Type) -> Type:
    """The type a quantized Conv's bias has: int32 at the accumulator's scale s_x * s_w (one per filter
    when the filter is quantized per channel), offset 0."""
    filters = filt.shape[0]
    if filt.per_channel:
        return Type(ElemKind.QINT32, (filters,), tuple(image.scale * s for s in filt.scale), (0,) * filters, 0)
    return Type(ElemKind.QINT32, (filters,), image.scale * filt.scale, 0)


def _verify_conv(node: Node) -> None:
    _require_shape(node, "bias", (node.type.shape[1],))
    if node.type.elem.is_quantized:
        expected = quantized_bias_type(node.input.type, node.filter.type)
        if node.bias is not None and node.bias.type != expected:
            raise node.fail(f"the bias of a quantized Conv must have the accumulator's scale and offset "
                            f"({expected}), got {node.bias.type}")
        return
    _require_float(node, "input")
    require_same_elem(node, "input", "filter", "bias")


Conv = define_node(
    "Conv", "input filter bias?", attrs=[*_window(), int_attr("group", 1)],
    infer=_conv_type, verify=_verify_conv, family=FAMILY,
    doc="""Grouped N-d cross-correlation (ONNX Conv): input N x C x D.., filter M x C/group x K..,
    optional bias M; result N x M x O.. with O = floor((D + begin + end - ((K-1)*dilation+1)) / stride) + 1.
    Input channels [g*C/group, (g+1)*C/group) feed filters [g*M/group, (g+1)*M/group); padding is zeros.
    8-bit quantized input and filter give the exact int32 accumulator sum (q_x - offset_x)(q_w - offset_w)
    + bias, of scale s_x * s_w and offset 0 (the bias must have that type); padding is the real value 0
    (q_x = offset_x); sums wrap modulo 2^32 as the NPU's array does.""")


def _conv_transpose_type(node: Node) -> Type:
    image, filt = _image(node), node.filter.type
    n, c, spatial = image.shape[0], image.shape[1], image.shape[2:]
    k = len(spatial)
    if filt.rank != image.rank or filt.shape[0] != c:
        raise node.fail(f"filter {filt} must be C x M/group x K.. with C = {c} input channels")
    if node.group < 1 or c % node.group:
        raise node.fail(f"group {node.group} must divide the input channels ({c})")
    if tuple(node.kernel) != filt.shape[2:]:
        raise node.fail(f"kernel {list(node.kernel)} does not match the filter {filt}")
    check_window(node, spatial, negative_pads=True)
    if len(node.output_padding) != k or any(p < 0 for p in node.output_padding):
        raise node.fail(f"output_padding {list(node.output_padding)} needs {k} non-negative entries")
    out = []
    for i, size in enumerate(spatial):
        dim = node.strides[i] * (size - 1) + node.output_padding[i] \
            + window_extent(node.kernel[i], node.dilations[i]) - node.pads[i] - node.pads[i + k]
        if dim < 1:
            raise node.fail(f"pads {list(node.pads)} leave no output along spatial dim {i}")
        out.append(dim)
    return image.with_shape((n, filt.shape[1] * node.group) + tuple(out))


ConvTranspose = define_node(
    "ConvTranspose", "input filter bias?",
    attrs=[*_window("cropping "), int_attr("group", 1),
           ints_attr("output_padding", doc="zeros added after the end of each spatial dim")],
    infer=_conv_transpose_type, verify=_verify_conv, family=FAMILY,
    doc="""Transposed convolution (ONNX ConvTranspose, the gradient of Conv): input N x C x D..,
    filter C x M/group x K.., optional bias; result N x M x O.. with
    O = stride*(D-1) + output_padding + (K-1)*dilation + 1 - begin - end. Each input element scatters
    input * filter into the output at position d*stride + k*dilation - begin; pads crop the result
    (a negative pad extends it with zeros, as an output_shape larger than the natural one does).""")


# -- pooling ------------------------------------------------------------------------------------
def _pool_type(node: Node) -> Type:
    image = _image(node)
    return image.with_shape(image.shape[:2] + windowed_shape(node, image.shape[2:], node.ceil_mode))


def _max_pool_types(node: Node) -> list[Type]:
    result = _pool_type(node)
    return [result, Type(ElemKind.INT64, result.shape)]


def _verify_max_pool(node: Node) -> None:
    require_elem(node, node.input.type, is_numeric_or_quantized, "input")


MaxPool = define_node(
    "MaxPool", "input", attrs=[*_window(), bool_attr("ceil_mode", False)],
    infer=_pool_type, verify=_verify_max_pool, family=FAMILY,
    doc="""Maximum over each window (ONNX MaxPool); padding never wins. Output dims as for Conv, or
    rounded up with ceil_mode (a last window starting past the input and its begin padding is dropped).""")

MaxPoolWithIndices = define_node(
    "MaxPoolWithIndices", "input", results="result indices",
    attrs=[*_window(), bool_attr("ceil_mode", False),
           bool_attr("column_major", False, doc="indices count the spatial dims column-major")],
    infer=_max_pool_types, verify=_verify_max_pool, family=FAMILY,
    doc="""MaxPool that also returns where each maximum came from (ONNX MaxPool's Indices output):
    `indices` (int64) holds the flat position of each maximum in the unpadded input,
    ((n*C + c)*D1 + d1)*D2 + d2.. (spatial dims reversed when column_major); the first maximum in
    window order wins ties. The importer uses it only when a model reads the indices, so a backend
    that has no index output in hardware still runs every other MaxPool.""")

def _float_or_quantized_byte(kind: ElemKind) -> bool:
    """a float or 8-bit quantized kind"""
    return kind.is_float or is_quantized_byte(kind)


def _verify_average_pool(node: Node) -> None:
    require_elem(node, node.input.type, _float_or_quantized_byte, "input")


AveragePool = define_node(
    "AveragePool", "input",
    attrs=[*_window(), bool_attr("ceil_mode", False), bool_attr("count_include_pad", False)],
    infer=_pool_type, verify=_verify_average_pool, family=FAMILY,
    doc="""Mean over each window (ONNX AveragePool), output dims as for MaxPool. The divisor counts
    the window taps inside the input, plus those inside the explicit pads when count_include_pad;
    taps in the extension that ceil_mode adds are never counted. An 8-bit quantized input keeps its
    type: the sum of the raw q (padding worth the offset) divided by the count, rounded half to even
    (the NPU's POOL avg).""")


def _global_pool_type(node: Node) -> Type:
    image = _image(node)
    return image.with_shape(image.shape[:2] + (1,) * (image.rank - 2))


GlobalAveragePool = define_node(
    "GlobalAveragePool", "input", infer=_global_pool_type, family=FAMILY,
    verify=lambda node: _require_float(node, "input"),
    doc="Mean over all spatial dims: N x C x D.. -> N x C x 1..")

GlobalMaxPool = define_node(
    "GlobalMaxPool", "input", infer=_global_pool_type, family=FAMILY,
    verify=lambda node: _require_float(node, "input"),
    doc="Maximum over all spatial dims: N x C x D.. -> N x C x 1..")


# -- normalisation ------------------------------------------------------------------------------
def _channel_params(*names: str):
    """Verify rule: float operands, each of shape (C,) for an N x C x .. input."""

    def verify(node: Node) -> None:
        if node.input.type.rank < 2:
            raise node.fail(f"input must be N x C x .., got {node.input.type}")
        _require_float(node, "input", *names)
        for name in names:
            _require_shape(node, name, (node.input.type.shape[1],))

    return verify


BatchNorm = define_node(
    "BatchNorm", "input scale bias mean var", attrs=[float_attr("epsilon", 1e-5)],
    infer=same_as(0), verify=_channel_params("scale", "bias", "mean", "var"), family=FAMILY,
    doc="""Inference batch normalisation over channel dim 1 (ONNX BatchNormalization, training_mode=0):
    y = (x - mean[c]) / sqrt(var[c] + epsilon) * scale[c] + bias[c]. The per-channel operands may
    be of another float kind than x.""")

InstanceNorm = define_node(
    "InstanceNorm", "input scale bias", attrs=[float_attr("epsilon", 1e-5)],
    infer=same_as(0), verify=_channel_params("scale", "bias"), family=FAMILY,
    doc="""Normalise each (n, c) slice over its spatial dims: y = (x - mean) / sqrt(var + epsilon)
    * scale[c] + bias[c], with the biased (population) variance.""")


def _verify_group_norm(node: Node) -> None:
    _channel_params("scale", "bias")(node)
    channels = node.input.type.shape[1]
    if node.groups < 1 or channels % node.groups:
        raise node.fail(f"groups {node.groups} must divide the {channels} channels")


GroupNorm = define_node(
    "GroupNorm", "input scale bias", attrs=[int_attr("groups"), float_attr("epsilon", 1e-5)],
    infer=same_as(0), verify=_verify_group_norm, family=FAMILY,
    doc="""Split the C channels into `groups` consecutive groups; normalise each (n, group) over its
    channels and spatial dims with the biased variance, then y = x_hat * scale[c] + bias[c].""")


def _check_trailing(node: Node, name: str) -> None:
    """`name` broadcasts unidirectionally onto the normalised dims input.shape[axis:]."""
    value = getattr(node, name)
    if value is None:
        return
    inner = node.input.type.shape[node.axis:]
    try:
        fits = broadcast_shapes(value.type.shape, inner) == inner
    except ValueError:
        fits = False
    if not fits:
        raise node.fail(f"{name} {value.type} does not broadcast to the normalised dims {list(inner)}")


def _check_norm_axis(node: Node) -> None:
    rank = node.input.type.rank
    if not 0 <= node.axis < rank:
        raise node.fail(f"axis {node.axis} is out of range for {node.input.type}")


def _layer_norm_types(node: Node) -> list[Type]:
    _check_norm_axis(node)
    image = node.input.type
    stats = image.shape[:node.axis] + (1,) * (image.rank - node.axis)
    return [image, Type(node.stats_elem, stats), Type(node.stats_elem, stats)]


def _verify_layer_norm(node: Node) -> None:
    _require_float(node, "input")
    require_same_elem(node, "input", "scale", "bias")
    if not node.stats_elem.is_float:
        raise node.fail(f"stats_elem must be a float kind, got {node.stats_elem.value}")
    _check_trailing(node, "scale")
    _check_trailing(node, "bias")


LayerNorm = define_node(
    "LayerNorm", "input scale bias?", results="result mean inv_std_dev",
    attrs=[int_attr("axis"), float_attr("epsilon", 1e-5),
           elem_attr("stats_elem", ElemKind.FLOAT32, doc="element kind of mean and inv_std_dev")],
    infer=_layer_norm_types, verify=_verify_layer_norm, family=FAMILY,
    doc="""Normalise over dims [axis, rank) jointly (ONNX LayerNormalization):
    y = (x - mean) * inv_std_dev * scale + bias, inv_std_dev = 1 / sqrt(var + epsilon) with the
    biased variance; scale and bias broadcast onto the normalised dims. `mean` and `inv_std_dev`
    keep the normalised dims as 1s.""")


def _rms_norm_type(node: Node) -> Type:
    _check_norm_axis(node)
    return node.input.type.with_elem(node.scale.type.elem)


def _verify_rms_norm(node: Node) -> None:
    _require_float(node, "input", "scale")
    _check_trailing(node, "scale")


RMSNorm = define_node(
    "RMSNorm", "input scale", attrs=[int_attr("axis"), float_attr("epsilon", 1e-5)],
    infer=_rms_norm_type, verify=_verify_rms_norm, family=FAMILY,
    doc="""y = x / sqrt(mean(x^2 over dims [axis, rank)) + epsilon) * scale (ONNX RMSNormalization);
    scale broadcasts onto the normalised dims and gives the result its element kind.""")


def _verify_lrn(node: Node) -> None:
    x = node.input.type
    if x.elem is ElemKind.QINT8:
        if x.per_channel:
            raise node.fail(f"an int8 LRN needs one scale for its input, got {x}")
    else:
        _require_float(node, "input")
    if node.input.type.rank < 3:
        raise node.fail(f"input must be N x C x D.., got {node.input.type}")
    if node.size < 1:
        raise node.fail(f"size {node.size} must be positive")


LRN = define_node(
    "LRN", "input",
    attrs=[int_attr("size"), float_attr("alpha", 1e-4), float_attr("beta", 0.75), float_attr("bias", 1.0)],
    infer=same_as(0), verify=_verify_lrn, family=FAMILY,
    doc="""Local response normalisation across channels: y = x / (bias + alpha/size * s)^beta where
    s sums x^2 over channels [c - floor((size-1)/2), c + ceil((size-1)/2)] clipped to [0, C). On int8q x
    (scale s, offset z; bias > 0, alpha >= 0) the result keeps x's type (|y| <= |x| when bias >= 1) and is
    computed on raw integers: u = q - z, S = the window's sum of u^2, and with the table of
    lrn_int8.lrn_table (k, F, T: the normaliser at the middle of S's bucket S >> k, times 2^F),
    y = clamp(round(u * T[S >> k] / 2^F) + z, -128, 127), rounding half to even.""")


# -- softmax ------------------------------------------------------------------------------------
SOFTMAX_SCALE, SOFTMAX_ZERO = 1 / 256, -128
"""An int8 Softmax's result type: [0, 1) in steps of 1/256 (onnxruntime's and TFLite's choice)."""


def _verify_softmax(node: Node) -> None:
    x = node.input.type
    if node.kind == "Softmax" and x.elem is ElemKind.QINT8:
        if x.per_channel:
            raise node.fail(f"an int8 Softmax needs one scale for its input, got {x}")
    else:
        _require_float(node, "input")
    rank = x.rank
    if not node.axes or any(not 0 <= a < rank for a in node.axes) or len(set(node.axes)) != len(node.axes):
        raise node.fail(f"axes {list(node.axes)} must be distinct dims of {x}")


SOFTMAX_WIDE_BITS = 16
"""A wide int8 Softmax's result: int32q of scale 2^-16, offset 0 (probabilities to 1/65536)."""


def _softmax_type(node: Node) -> Type:
    x = node.input.type
    if x.elem is ElemKind.QINT8 and node.attrs.get("wide"):
        return Type(ElemKind.QINT32, x.shape, 2.0 ** -SOFTMAX_WIDE_BITS, 0)
    if x.elem is ElemKind.QINT8:
        return Type(ElemKind.QINT8, x.shape, SOFTMAX_SCALE, SOFTMAX_ZERO)
    return x


def _softmax(name: str, doc: str, masked: bool = False) -> type[Node]:
    attrs = [ints_attr("axes", doc="the dims normalised jointly")]
    if masked:
        attrs.append(bool_attr("masked", False, doc="int8: the input code -128 stands for -inf (a mask)"))
        attrs.append(bool_attr("wide", False, doc="int8 input: an int32q result of scale 2^-16 (a network's output)"))
    return define_node(name, "input", attrs=attrs, infer=_softmax_type, verify=_verify_softmax, family=FAMILY,
                       doc=doc)


Softmax = _softmax("Softmax", """exp(x) / sum(exp(x)) over `axes` jointly (one axis since opset 13, the flattened
    trailing dims before). On int8q x (scale s) the result is int8q with scale 1/256 and offset -128, computed
    on raw integers: with L elements per group, k = min(30, 31 - bit_length(L)) and the table
    T[j] = round(2^k * exp(-s * j)) for j < 256, e = T[min(max(x) - x, 255)], S = sum(e), and
    y = clamp(round(256 * e / S) - 128, -128, 127), both roundings half to even (vendor_guide/quantization.md).
    With `masked` (set by the quantizer where an attention mask's -inf reaches the Softmax as int8's saturated
    minimum), an input code of -128 is -inf: its e is 0 and S = max(sum(e), 1), so it gets probability 0.
    With `wide` (the quantizer's choice where the probabilities leave the network: int8's 1/256 steps tie
    near-equal classes and flip a top-1) the result is int32q of scale 2^-16, offset 0: y = round(2^16 * e / S).""",
                   masked=True)
LogSoftmax = _softmax("LogSoftmax", "x - log(sum(exp(x))) over `axes` jointly.")
