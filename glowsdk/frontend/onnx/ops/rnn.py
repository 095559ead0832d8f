"""Converters of the ONNX recurrent ops: LSTM, GRU and RNN (opsets 7..22).

Each becomes one node of the same kind with every attribute resolved: the
activation list is expanded to one entry per gate function and direction, and
activation_alpha/beta are handed out as onnxruntime does (each activation that
takes an alpha, or a beta, consumes the next value in order, else takes its
ONNX default). A compile-time `sequence_lens` equal to the sequence length
everywhere is dropped.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from ....graph.nodes import rnn
from ..context import OnnxNode
from ..registry import converter

_KINDS = {
    "LSTM": (rnn.LSTM, ("Sigmoid", "Tanh", "Tanh")),
    "GRU": (rnn.GRU, ("Sigmoid", "Tanh")),
    "RNN": (rnn.RNN, ("Tanh",)),
}
"""ONNX op -> (node kind, default activations of one direction)."""

_PARAMS: dict[str, tuple[float | None, float | None]] = {
    "Affine": (None, None), "LeakyRelu": (0.01, None), "ThresholdedRelu": (1.0, None),
    "ScaledTanh": (None, None), "HardSigmoid": (0.2, 0.5), "Elu": (1.0, None),
}
"""Activations that take alpha and/or beta, with their ONNX defaults (None: no default)."""

_CANONICAL = {name.lower(): name for name in rnn.ACTIVATIONS}


def _take(node: OnnxNode, values: Iterator[float], default: float | None, what: str, activation: str) -> float:
    value = next(values, default)
    if value is None:
        raise node.error(f"activation {activation} needs an {what} value, and none is left")
    return float(value)


def _activations(node: OnnxNode, defaults: tuple[str, ...], dirs: int) -> dict:
    """activations, activation_alpha and activation_beta, resolved for every direction."""
    names = node.attr("activations")
    if names is None:
        names = list(defaults) * dirs
    if len(names) != len(defaults) * dirs:
        raise node.error(f"activations lists {len(names)} functions, expected {len(defaults)} per direction "
                         f"for {dirs} direction(s)")
    resolved = []
    for name in names:
        if name.lower() not in _CANONICAL:
            raise node.unsupported(f"activation '{name}' is not one ONNX defines for recurrent ops")
        resolved.append(_CANONICAL[name.lower()])
    given_alpha = [float(v) for v in node.attr("activation_alpha", [])]
    given_beta = [float(v) for v in node.attr("activation_beta", [])]
    alphas, betas = iter(given_alpha), iter(given_beta)
    alpha_out, beta_out = [], []
    for name in resolved:
        alpha_default, beta_default = _PARAMS.get(name, (0.0, 0.0))
        takes_alpha, takes_beta = name in _PARAMS, name in ("Affine", "ScaledTanh", "HardSigmoid")
        alpha_out.append(_take(node, alphas, alpha_default, "activation_alpha", name) if takes_alpha else 0.0)
        beta_out.append(_take(node, betas, beta_default, "activation_beta", name) if takes_beta else 0.0)
    for what, rest in (("activation_alpha", alphas), ("activation_beta", betas)):
        if next(rest, None) is not None:
            raise node.unsupported(f"{what} has more values than the activations {resolved} take")
    return {"activations": resolved, "activation_alpha": alpha_out, "activation_beta": beta_out}


def _lengths(node: OnnxNode, seq: int, batch: int):
    """The sequence_lens operand: None if absent or a constant full length, else the value."""
    if not node.has_input(4):
        return None
    if not node.is_const(4):
        return node.input(4)
    lengths = node.const(4, "sequence_lens")
    if lengths.shape != (batch,):
        raise node.error(f"sequence_lens has shape {list(lengths.shape)}, expected [{batch}]")
    if np.all(lengths == seq):
        return None
    if np.any(lengths < 0) or np.any(lengths > seq):
        raise node.error(f"sequence_lens {lengths.tolist()} must lie in [0, {seq}]")
    return node.input(4)


def _convert(node: OnnxNode):
    kind, defaults = _KINDS[node.op_type]
    x, recurrence = node.input(0), node.input(2)
    direction = node.attr("direction", "forward")
    if direction not in rnn.DIRECTIONS:
        raise node.error(f"direction must be one of {', '.join(rnn.DIRECTIONS)}, got '{direction}'")
    dirs = 2 if direction == "bidirectional" else 1
    layout = int(node.attr("layout", 0))
    if x.type.rank != 3:
        raise node.error(f"X must have rank 3, got {x.type}")
    for what, value in (("W", node.input(1)), ("R", recurrence)):
        if value.type.rank != 3:
            raise node.error(f"{what} must have rank 3, got {value.type}")
    seq, batch = x.type.shape[:2] if layout == 0 else x.type.shape[1::-1]
    attrs = dict(_activations(node, defaults, dirs), direction=direction, layout=layout,
                 hidden_size=int(node.attr("hidden_size", recurrence.type.shape[-1])))
    if node.attr("clip") is not None:
        attrs["clip"] = float(node.attr("clip"))
    inputs = [x, node.input(1), recurrence, node.input(3), _lengths(node, seq, batch), node.input(5)]
    if kind is rnn.LSTM:
        inputs += [node.input(6), node.input(7)]
        attrs["input_forget"] = bool(node.attr("input_forget", 0))
    elif kind is rnn.GRU:
        attrs["linear_before_reset"] = bool(node.attr("linear_before_reset", 0))
    return node.create(kind, inputs, **attrs).results


for _op in _KINDS:
    converter(_op)(_convert)
