"""Recurrent node kinds: one-layer LSTM, GRU and simple RNN, as ONNX defines them.

The three kinds share one record shape: the sequence `input`, per-direction
`weights` W [D, G*H, I], `recurrence` R [D, G*H, H] and optional `bias`
[D, 2*G*H] (W biases then R biases), optional per-batch `lengths`, optional
initial states. Every attribute is static and resolved: the activation list is
complete (one entry per gate function and direction, in ONNX order, forward
first) with its alpha and beta values filled in, `clip` is +inf when absent.
Layout 0 is sequence-major: input [T, B, I], output [T, D, B, H], states
[D, B, H]; layout 1 is batch-major: input [B, T, I], output [B, T, D, H], states
[B, D, H].
"""
from __future__ import annotations

from typing import Sequence

from ..kinds import define_node
from ..node import Node
from ..spec import Attr, bool_attr, float_attr, floats_attr, int_attr, str_attr, strs_attr
from ..types import ElemKind, Type
from .rules import is_float, require_elem

FAMILY = "rnn"

DIRECTIONS = ("forward", "reverse", "bidirectional")

ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh",
               "HardSigmoid", "Elu", "Softsign", "Softplus")
"""The gate activation functions ONNX recurrent ops accept, as stored (canonical case)."""

_ACTIVATION_DOC = (
    "Activations: Relu max(0,x); Tanh; Sigmoid 1/(1+e^-x); Affine alpha*x+beta; LeakyRelu x if x>=0 "
    "else alpha*x; ThresholdedRelu x if x>alpha else 0; ScaledTanh alpha*tanh(beta*x); HardSigmoid "
    "clamp(alpha*x+beta,0,1); Elu x if x>=0 else alpha*(e^x-1); Softsign x/(1+|x|); Softplus "
    "log(1+e^x). `clip` bounds every gate pre-activation to [-clip, clip]. With `lengths`, batch "
    "entry b runs only its first lengths[b] steps (a reverse pass starts at step lengths[b]-1); "
    "output steps past its length are 0 and its final states are those of its last valid step "
    "(zeros if lengths[b] is 0, as onnxruntime does).")


def num_directions(node: Node) -> int:
    return 2 if node.direction == "bidirectional" else 1


def _common_attrs(default_activations: Sequence[str]) -> list[Attr]:
    return [
        int_attr("hidden_size", doc="H"),
        str_attr("direction", "forward", doc="forward, reverse or bidirectional"),
        int_attr("layout", 0, doc="0: sequence-major, 1: batch-major"),
        strs_attr("activations", default_activations,
                  doc=f"{len(default_activations)} per direction, forward direction first"),
        floats_attr("activation_alpha", [0.0] * len(default_activations),
                    doc="one per activation (ignored by those without alpha)"),
        floats_attr("activation_beta", [0.0] * len(default_activations),
                    doc="one per activation (ignored by those without beta)"),
        float_attr("clip", float("inf"), doc="pre-activation clip threshold; +inf for none"),
    ]


def _expect(node: Node, value_name: str, type_: Type, shape: Sequence[int], elem: ElemKind) -> None:
    if tuple(type_.shape) != tuple(shape):
        raise node.fail(f"{value_name} has shape {list(type_.shape)}, expected {list(shape)}")
    if type_.elem is not elem:
        raise node.fail(f"{value_name} is {type_}, expected element kind {elem.value}")


def _rnn_types(gates: int, per_direction: int, states: int):
    """The type rule of a recurrent kind with `gates` gate blocks in W and R,
    `per_direction` activations per direction and `states` result states."""

    def rule(node: Node) -> list[Type]:
        x = node.input.type
        require_elem(node, x, is_float, "input")
        if node.direction not in DIRECTIONS:
            raise node.fail(f"direction must be one of {', '.join(DIRECTIONS)}, got '{node.direction}'")
        if node.layout not in (0, 1):
            raise node.fail(f"layout must be 0 or 1, got {node.layout}")
        if x.rank != 3:
            raise node.fail(f"input must have rank 3, got {x}")
        d, h = num_directions(node), node.hidden_size
        if h <= 0:
            raise node.fail(f"hidden_size must be positive, got {h}")
        seq, batch, size = x.shape if node.layout == 0 else (x.shape[1], x.shape[0], x.shape[2])
        _expect(node, "weights", node.weights.type, (d, gates * h, size), x.elem)
        _expect(node, "recurrence", node.recurrence.type, (d, gates * h, h), x.elem)
        if node.bias is not None:
            _expect(node, "bias", node.bias.type, (d, 2 * gates * h), x.elem)
        if node.lengths is not None:
            _expect(node, "lengths", node.lengths.type, (batch,), ElemKind.INT32)
        state = (d, batch, h) if node.layout == 0 else (batch, d, h)
        for name in ("initial_h", "initial_c")[:states]:
            value = getattr(node, name)
            if value is not None:
                _expect(node, name, value.type, state, x.elem)
        if getattr(node, "peepholes", None) is not None:
            _expect(node, "peepholes", node.peepholes.type, (d, 3 * h), x.elem)
        count = per_direction * d
        for attr in ("activations", "activation_alpha", "activation_beta"):
            if len(node.attrs[attr]) != count:
                raise node.fail(f"{attr} has {len(node.attrs[attr])} entries, expected {count} "
                                f"({per_direction} per direction)")
        unknown = [a for a in node.activations if a not in ACTIVATIONS]
        if unknown:
            raise node.fail(f"unknown activation(s) {', '.join(unknown)}")
        if not node.clip > 0:
            raise node.fail(f"clip must be positive, got {node.clip}")
        out = (seq, d, batch, h) if node.layout == 0 else (batch, seq, d, h)
        return [Type(x.elem, out)] + [Type(x.elem, state)] * states

    return rule


LSTM = define_node(
    "LSTM", "input weights recurrence bias? lengths? initial_h? initial_c? peepholes?",
    results="output hidden cell",
    attrs=_common_attrs(("Sigmoid", "Tanh", "Tanh"))
    + [bool_attr("input_forget", False, doc="couple the forget gate to the input gate: f = 1 - i")],
    infer=_rnn_types(4, 3, 2), family=FAMILY,
    doc="ONNX LSTM. Gate blocks in W, R and bias are ordered i, o, f, c; peepholes [D, 3H] are "
        "p_i, p_o, p_f. Per step: i = f(x W_i + h R_i + p_i*c + b_i), f_t = f(x W_f + h R_f + "
        "p_f*c + b_f) (1 - i when input_forget), c~ = g(x W_c + h R_c + b_c), c' = f_t*c + i*c~, "
        "o = f(x W_o + h R_o + p_o*c' + b_o), h' = o*h(c'), where (f, g, h) are the direction's "
        "three activations and b = Wb + Rb. Results: every step's h (output), final h and c. "
        + _ACTIVATION_DOC)

GRU = define_node(
    "GRU", "input weights recurrence bias? lengths? initial_h?", results="output hidden",
    attrs=_common_attrs(("Sigmoid", "Tanh"))
    + [bool_attr("linear_before_reset", False, doc="apply R_h before the reset gate")],
    infer=_rnn_types(3, 2, 1), family=FAMILY,
    doc="ONNX GRU. Gate blocks in W, R and bias are ordered z, r, h. Per step: z = f(x W_z + h R_z "
        "+ Wb_z + Rb_z), r = f(x W_r + h R_r + Wb_r + Rb_r), n = g(x W_h + (r*h) R_h + Rb_h + Wb_h) "
        "or, with linear_before_reset, n = g(x W_h + r*(h R_h + Rb_h) + Wb_h); h' = (1-z)*n + z*h, "
        "where (f, g) are the direction's two activations. Results: every step's h and the final h. "
        + _ACTIVATION_DOC)

RNN = define_node(
    "RNN", "input weights recurrence bias? lengths? initial_h?", results="output hidden",
    attrs=_common_attrs(("Tanh",)), infer=_rnn_types(1, 1, 1), family=FAMILY,
    doc="ONNX RNN (Elman): h' = f(x W + h R + Wb + Rb) with the direction's activation f. Results: "
        "every step's h and the final h. " + _ACTIVATION_DOC)
