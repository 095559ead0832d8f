"""Training node kinds: losses, the MaxPool gradient scatter and the SGD update (paper 3.2, 3.4).

These are the kinds automatic differentiation (`glowsdk.training`) adds where no
forward kind expresses a loss or a gradient exactly. Each has a reference kernel
and a lowering rule onto primitives, so no backend implements a gradient kernel.
"""
from __future__ import annotations

from ..kinds import define_node
from ..node import Node
from ..spec import bool_attr, float_attr, ints_attr
from ..types import Type
from .nn import windowed_shape
from .rules import is_float, is_index, require_elem, require_same_elem, same_as

FAMILY = "training"


def _cross_entropy_type(node: Node) -> Type:
    logits, labels = node.logits.type, node.labels.type
    require_elem(node, logits, is_float, "logits")
    require_elem(node, labels, is_index, "labels")
    if logits.rank != 2 or labels.shape != logits.shape[:1]:
        raise node.fail(f"needs logits N x K and labels N, got {logits} and {labels}")
    return logits.with_shape(())


SoftmaxCrossEntropy = define_node(
    "SoftmaxCrossEntropy", "logits labels", infer=_cross_entropy_type, family=FAMILY,
    doc="""Mean softmax cross-entropy of a batch (ONNX SoftmaxCrossEntropyLoss, reduction mean):
    -mean_n log softmax(logits[n])[labels[n]] for logits N x K and int labels N in [0, K); a scalar.""")


def _verify_regression(node: Node) -> None:
    require_elem(node, node.input.type, is_float, "input")
    if node.expected.type != node.input.type:
        raise node.fail(f"expected {node.expected.type} must have the type of input {node.input.type}")


Regression = define_node(
    "Regression", "input expected", infer=same_as(0), verify=_verify_regression, family=FAMILY,
    doc="""The input itself (inference lowers it to nothing); differentiated, it is the end of a
    squared-error loss 1/2 sum (input - expected)^2, whose input gradient is input - expected
    (paper 3.4: differentiation comes before lowering for this reason).""")


def _max_pool_grad_type(node: Node) -> Type:
    image = node.input.type
    if not 3 <= image.rank <= 5:
        raise node.fail(f"input must be N x C x D1..Dk with 1 to 3 spatial dims, got {image}")
    require_elem(node, image, is_float, "input")
    require_same_elem(node, "input", "pooled", "pooled_grad")
    pooled = image.shape[:2] + windowed_shape(node, image.shape[2:], node.ceil_mode)
    for name in ("pooled", "pooled_grad"):
        if getattr(node, name).type.shape != pooled:
            raise node.fail(f"{name} must have the pooled shape {list(pooled)}, got {getattr(node, name).type}")
    return image


MaxPoolGrad = define_node(
    "MaxPoolGrad", "input pooled pooled_grad",
    attrs=[ints_attr("kernel"), ints_attr("strides"), ints_attr("pads"), ints_attr("dilations"),
           bool_attr("ceil_mode", False)],
    infer=_max_pool_grad_type, family=FAMILY,
    doc="""The gradient of MaxPool(input) = pooled with the same window: each window's pooled_grad
    goes to the input element that is its maximum (the first in window order on ties, as
    MaxPoolWithIndices picks it); overlapping windows add up.""")


def _sgd_types(node: Node) -> list[Type]:
    weight = node.weight.type
    require_elem(node, weight, is_float, "weight")
    for name in ("grad", "velocity"):
        value = getattr(node, name)
        if value is not None and value.type != weight:
            raise node.fail(f"{name} {value.type} must have the type of weight {weight}")
    if node.momentum != 0.0 and node.velocity is None:
        raise node.fail(f"momentum {node.momentum} needs a velocity operand")
    return [weight, weight]


SGD = define_node(
    "SGD", "weight grad velocity?", results="updated velocity_updated",
    attrs=[float_attr("learning_rate"), float_attr("momentum", 0.0),
           float_attr("weight_decay", 0.0, doc="L2 decay: adds weight_decay * weight to the gradient")],
    infer=_sgd_types, family=FAMILY,
    doc="""One stochastic gradient descent step: g = grad + weight_decay * weight,
    velocity_updated = momentum * velocity + g (just g without momentum),
    updated = weight - learning_rate * velocity_updated. The training function saves both results
    back into the weight's and the velocity's tensors.""")


def adjoint_pads(spatial: tuple[int, ...], out_spatial: tuple[int, ...], kernel: tuple[int, ...],
                 strides: tuple[int, ...], pads: tuple[int, ...],
                 dilations: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(pads, output_padding) of the ConvTranspose that scatters a window op's `out_spatial` result
    back onto its `spatial` input: the begin pads stay, the end is cropped or extended to fit.

    Window o reads input o*stride + t*dilation - begin; ConvTranspose writes there, and its
    natural extent stride*(O-1) + (K-1)*dilation + 1 - begin is cut or zero-extended to D.
    """
    k = len(spatial)
    ends, extra = [], []
    for i in range(k):
        natural = strides[i] * (out_spatial[i] - 1) + (kernel[i] - 1) * dilations[i] + 1 - pads[i]
        ends.append(max(natural - spatial[i], 0))
        extra.append(max(spatial[i] - natural, 0))
    return tuple(pads[:k]) + tuple(ends), tuple(extra)
