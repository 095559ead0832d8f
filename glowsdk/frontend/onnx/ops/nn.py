"""Converters of the ONNX neural-network ops: convolution, pooling, normalisation, matrix
products, softmax and inference-mode dropout.

Window geometry is resolved here: default strides and dilations, auto_pad turned
into explicit pads, ConvTranspose's output_shape turned into pads, so the node
kinds in `graph/nodes/nn.py` only see explicit, static values.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ....graph.node import NodeValue
from ....graph.nodes import linalg, nn
from ....graph.nodes.core import Splat
from ....graph.types import ElemKind
from ..context import OnnxNode, elem_of_onnx
from ..registry import converter


def _ints(node: OnnxNode, name: str, count: int, default: int) -> list[int]:
    """An ints attribute with one entry per spatial dim (`default` each when absent)."""
    values = [int(v) for v in node.attr(name, [default] * count)]
    if len(values) != count:
        raise node.error(f"{name} {values} needs {count} entries, one per spatial dim")
    return values


def _auto_pads(node: OnnxNode, spatial: Sequence[int], kernel: Sequence[int],
               strides: Sequence[int], dilations: Sequence[int]) -> list[int] | None:
    """Explicit pads for auto_pad SAME_* and VALID; None when auto_pad is NOTSET.

    SAME makes the output ceil(D / stride) long; the odd pad goes at the end (SAME_UPPER)
    or at the beginning (SAME_LOWER).
    """
    auto_pad = node.attr("auto_pad", "NOTSET") or "NOTSET"
    k = len(spatial)
    if auto_pad == "NOTSET":
        return None
    if auto_pad == "VALID":
        return [0] * (2 * k)
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise node.unsupported(f"auto_pad '{auto_pad}' is not an ONNX padding mode")
    begins, ends = [], []
    for i in range(k):
        out = -(-spatial[i] // strides[i])
        total = max(0, (out - 1) * strides[i] + nn.window_extent(kernel[i], dilations[i]) - spatial[i])
        small, large = total // 2, total - total // 2
        begins.append(small if auto_pad == "SAME_UPPER" else large)
        ends.append(large if auto_pad == "SAME_UPPER" else small)
    return begins + ends


def window_attrs(node: OnnxNode, image: NodeValue, kernel: Sequence[int]) -> dict:
    """kernel, strides, pads and dilations of a Conv or pooling node, all explicit."""
    spatial = image.type.shape[2:]
    k = len(spatial)
    if len(kernel) != k:
        raise node.error(f"kernel {list(kernel)} needs {k} entries for the input {image.type}")
    strides = _ints(node, "strides", k, 1)
    dilations = _ints(node, "dilations", k, 1)
    pads = _auto_pads(node, spatial, kernel, strides, dilations)
    if pads is None:
        pads = [int(p) for p in node.attr("pads", [0] * (2 * k))]
    return dict(kernel=tuple(kernel), strides=strides, pads=pads, dilations=dilations)


def _image(node: OnnxNode, index: int = 0) -> NodeValue:
    image = node.input(index)
    if not 3 <= image.type.rank <= 5:
        raise node.unsupported(f"input {image.type} must be N x C x D.. with 1 to 3 spatial dims")
    return image


# -- convolution ---------------------------------------------------------------------------------
@converter("Conv")
def _conv(node: OnnxNode):
    image, filt = _image(node), node.input(1)
    kernel = node.attr("kernel_shape") or filt.type.shape[2:]
    return node.add(nn.Conv, image, filt, node.input(2), group=int(node.attr("group", 1)),
                    **window_attrs(node, image, kernel))


@converter("ConvTranspose")
def _conv_transpose(node: OnnxNode):
    image, filt = _image(node), node.input(1)
    spatial = image.type.shape[2:]
    k = len(spatial)
    kernel = node.attr("kernel_shape") or filt.type.shape[2:]
    strides = _ints(node, "strides", k, 1)
    dilations = _ints(node, "dilations", k, 1)
    output_padding = _ints(node, "output_padding", k, 0)
    auto_pad = node.attr("auto_pad", "NOTSET") or "NOTSET"
    output_shape = node.attr("output_shape")
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = _transpose_pads(node, spatial, kernel, strides, dilations, output_padding, output_shape)
    elif auto_pad == "VALID":
        pads = [0] * (2 * k)
    elif auto_pad == "NOTSET":
        pads = [int(p) for p in node.attr("pads", [0] * (2 * k))]
    else:
        raise node.unsupported(f"auto_pad '{auto_pad}' is not an ONNX padding mode")
    return node.add(nn.ConvTranspose, image, filt, node.input(2), group=int(node.attr("group", 1)),
                    kernel=tuple(kernel), strides=strides, pads=pads, dilations=dilations,
                    output_padding=output_padding)


def _transpose_pads(node: OnnxNode, spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                    dilations: Sequence[int], output_padding: Sequence[int],
                    output_shape: Sequence[int] | None) -> list[int]:
    """Pads giving the requested output shape (D * stride for SAME), as the ONNX spec derives them.

    The surplus total padding splits with the odd one at the end for SAME_UPPER, at the
    beginning otherwise; a negative total (output larger than natural) extends the end.
    """
    k = len(spatial)
    if output_shape is None:
        target = [spatial[i] * strides[i] for i in range(k)]
    else:
        target = [int(d) for d in output_shape][-k:]
        if len(output_shape) not in (k, k + 2):
            raise node.error(f"output_shape {list(output_shape)} needs {k} spatial entries")
    begins, ends = [], []
    for i in range(k):
        total = strides[i] * (spatial[i] - 1) + output_padding[i] \
            + nn.window_extent(kernel[i], dilations[i]) - target[i]
        if node.attr("auto_pad") == "SAME_UPPER":
            begins.append(total // 2)
            ends.append(total - total // 2)
        else:
            begins.append(total - total // 2)
            ends.append(total // 2)
    return begins + ends


# -- pooling ------------------------------------------------------------------------------------
def _pool_attrs(node: OnnxNode, image: NodeValue) -> dict:
    kernel = node.attr("kernel_shape")
    if kernel is None:
        raise node.error("kernel_shape is required")
    attrs = window_attrs(node, image, kernel)
    # SAME fixes the output at ceil(D / stride) whatever ceil_mode says (as onnxruntime does)
    same = (node.attr("auto_pad") or "NOTSET").startswith("SAME")
    attrs["ceil_mode"] = bool(node.attr("ceil_mode", 0)) and not same
    return attrs


@converter("MaxPool")
def _max_pool(node: OnnxNode):
    image = _image(node)
    order = int(node.attr("storage_order", 0))
    if order not in (0, 1):
        raise node.error(f"storage_order must be 0 or 1, got {order}")
    if len(node.output_names) > 1 and node.output_names[1]:
        pool = node.create(nn.MaxPoolWithIndices, [image], column_major=bool(order), **_pool_attrs(node, image))
        return pool.results
    return node.add(nn.MaxPool, image, **_pool_attrs(node, image))


@converter("AveragePool")
def _average_pool(node: OnnxNode):
    image = _image(node)
    return node.add(nn.AveragePool, image, count_include_pad=bool(node.attr("count_include_pad", 0)),
                    **_pool_attrs(node, image))


converter("GlobalAveragePool")(lambda node: node.add(nn.GlobalAveragePool, _image(node)))
converter("GlobalMaxPool")(lambda node: node.add(nn.GlobalMaxPool, _image(node)))


# -- normalisation ------------------------------------------------------------------------------
@converter("BatchNormalization")
def _batch_norm(node: OnnxNode):
    if node.attr("training_mode", 0):
        raise node.unsupported("training_mode=1 (batch statistics) is not supported; only inference")
    if node.opset < 9 and node.attr("spatial", 1) == 0:
        raise node.unsupported("spatial=0 (per-activation statistics) is not supported")
    if any(node.output_names[1:]):
        raise node.unsupported("the running/saved statistics outputs exist only in training mode")
    return node.add(nn.BatchNorm, *node.inputs()[:5], epsilon=float(node.attr("epsilon", 1e-5)))


@converter("InstanceNormalization")
def _instance_norm(node: OnnxNode):
    return node.add(nn.InstanceNorm, *node.inputs()[:3], epsilon=float(node.attr("epsilon", 1e-5)))


@converter("GroupNormalization")
def _group_norm(node: OnnxNode):
    # stash_type (opset 21) only sets the precision of the statistics; the kernels use float32 or wider
    image, scale, bias = node.inputs()[:3]
    groups = int(node.attr("num_groups"))
    channels = image.type.shape[1] if image.type.rank >= 2 else 0
    if node.opset < 21 and groups > 0 and channels % groups == 0:
        # opset 18 scales per group: repeat each value over the group's channels
        per = channels // groups
        scale = node.constant(np.repeat(node.const(1, "GroupNormalization-18's per-group scale"), per), "scale")
        bias = node.constant(np.repeat(node.const(2, "GroupNormalization-18's per-group bias"), per), "bias")
    return node.add(nn.GroupNorm, image, scale, bias, groups=groups,
                    epsilon=float(node.attr("epsilon", 1e-5)))


def _norm_axis(node: OnnxNode, rank: int) -> int:
    axis = int(node.attr("axis", -1))
    if not -rank <= axis < rank:
        raise node.error(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


@converter("LayerNormalization")
def _layer_norm(node: OnnxNode):
    image = node.input(0)
    stats_elem = elem_of_onnx(int(node.attr("stash_type", 1)), f"node '{node.name}' stash_type")
    norm = node.create(nn.LayerNorm, [image, node.input(1), node.input(2)],
                       axis=_norm_axis(node, image.type.rank), epsilon=float(node.attr("epsilon", 1e-5)),
                       stats_elem=stats_elem)
    return norm.results


@converter("RMSNormalization")
def _rms_norm(node: OnnxNode):
    # stash_type only sets the precision of the statistics; the kernels use float32 or wider
    image = node.input(0)
    return node.add(nn.RMSNorm, image, node.input(1), axis=_norm_axis(node, image.type.rank),
                    epsilon=float(node.attr("epsilon", 1e-5)))


@converter("LRN")
def _lrn(node: OnnxNode):
    if node.attr("size") is None:
        raise node.error("size is required")
    return node.add(nn.LRN, node.input(0), size=int(node.attr("size")),
                    alpha=float(node.attr("alpha", 1e-4)), beta=float(node.attr("beta", 0.75)),
                    bias=float(node.attr("bias", 1.0)))


# -- matrix products ----------------------------------------------------------------------------
@converter("Gemm")
def _gemm(node: OnnxNode):
    return node.add(linalg.Gemm, node.input(0), node.input(1), node.input(2),
                    alpha=float(node.attr("alpha", 1.0)), beta=float(node.attr("beta", 1.0)),
                    trans_a=bool(node.attr("transA", 0)), trans_b=bool(node.attr("transB", 0)))


converter("MatMul")(lambda node: node.add(linalg.MatMul, node.input(0), node.input(1)))


def explicit_equation(equation: str) -> str:
    """An einsum equation without spaces and with its output spelled out.

    The implicit output (no '->') is '...' if any operand has it, then the labels that
    occur exactly once, in alphabetical order (numpy and ONNX agree).
    """
    equation = equation.replace(" ", "")
    if "->" in equation:
        return equation
    labels = equation.replace("...", "").replace(",", "")
    once = sorted(c for c in set(labels) if labels.count(c) == 1)
    return f"{equation}->{'...' if '...' in equation else ''}{''.join(once)}"


@converter("Einsum")
def _einsum(node: OnnxNode):
    return node.add(linalg.Einsum, *node.inputs(), equation=explicit_equation(node.attr("equation", "")))


# -- softmax ------------------------------------------------------------------------------------
def _softmax(kind):
    def convert(node: OnnxNode):
        image = node.input(0)
        rank = image.type.rank
        axis = _norm_axis(node, rank) if "axis" in node.attrs else (rank - 1 if node.opset >= 13 else 1 % rank)
        # before opset 13 the input is flattened to 2-D at `axis`: every trailing dim normalises
        axes = (axis,) if node.opset >= 13 else tuple(range(axis, rank))
        return node.add(kind, image, axes=axes)
    return convert


converter("Softmax")(_softmax(nn.Softmax))
converter("LogSoftmax")(_softmax(nn.LogSoftmax))


# -- dropout ------------------------------------------------------------------------------------
@converter("Dropout")
def _dropout(node: OnnxNode):
    """Inference dropout is the identity; its mask keeps everything."""
    data = node.input(0)
    if node.opset >= 12 and node.has_input(2) and np.any(node.const(2, "Dropout's training_mode")):
        ratio = node.const(1, "Dropout's ratio") if node.has_input(1) else 0.5
        if np.any(np.asarray(ratio) != 0):
            raise node.unsupported("training_mode=true drops random elements; only inference is supported")
    if len(node.output_names) < 2 or not node.output_names[1]:
        return [data]
    elem = ElemKind.BOOL if node.opset >= 10 else data.type.elem
    mask = node.add(Splat, shape=data.type.shape, value=1.0, elem=elem, suffix="mask")
    return [data, mask]
