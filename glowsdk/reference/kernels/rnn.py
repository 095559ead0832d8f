"""Reference kernels of the recurrent node kinds (LSTM, GRU, RNN).

One driver runs every kind: it projects the whole input sequence through W at
once, then loops over time steps (vectorised over batch and hidden units),
calling a per-kind step function, and applies `lengths` masking. Arithmetic is
float32 for float32 and narrower inputs, float64 for float64.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...graph.node import Node
from ...graph.nodes import rnn
from ..registry import kernel

Activation = Callable[[np.ndarray], np.ndarray]
Step = Callable[[int, tuple], tuple]

_ACTIVATIONS: dict[str, Callable[[np.ndarray, float, float], np.ndarray]] = {
    "Relu": lambda x, a, b: np.maximum(x, 0),
    "Tanh": lambda x, a, b: np.tanh(x),
    "Sigmoid": lambda x, a, b: 1 / (1 + np.exp(-x)),
    "Affine": lambda x, a, b: a * x + b,
    "LeakyRelu": lambda x, a, b: np.where(x >= 0, x, a * x),
    "ThresholdedRelu": lambda x, a, b: np.where(x > a, x, 0),
    "ScaledTanh": lambda x, a, b: a * np.tanh(b * x),
    "HardSigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1),
    "Elu": lambda x, a, b: np.where(x >= 0, x, a * np.expm1(x)),
    "Softsign": lambda x, a, b: x / (1 + np.abs(x)),
    "Softplus": lambda x, a, b: np.logaddexp(0, x),
}


def _activations(node: Node, direction: int, count: int) -> list[Activation]:
    """The `count` activation functions of one direction, with the result dtype kept."""
    out = []
    for k in range(direction * count, (direction + 1) * count):
        fn = _ACTIVATIONS[node.activations[k]]
        alpha, beta = node.activation_alpha[k], node.activation_beta[k]
        out.append(lambda x, fn=fn, a=alpha, b=beta: fn(x, x.dtype.type(a), x.dtype.type(b)).astype(x.dtype))
    return out


def _clipper(node: Node) -> Activation:
    if np.isinf(node.clip):
        return lambda x: x
    return lambda x: np.clip(x, -node.clip, node.clip).astype(x.dtype)


def _run(node: Node, x: np.ndarray, lengths: np.ndarray | None, initial: list[np.ndarray | None],
         make_step: Callable[[int, np.ndarray], Step]) -> tuple[np.ndarray, ...]:
    """Run every direction over the sequence; return (output, *final states) in the node's layout.

    `make_step(d, x)` returns direction d's step function, mapping a time index
    and the state tuple to the new state tuple (hidden state first); `x` is the
    sequence-major input in the computation dtype.
    """
    dtype = np.promote_types(x.dtype, np.float32)
    if node.layout == 1:
        x = x.transpose(1, 0, 2)
        initial = [None if s is None else s.transpose(1, 0, 2) for s in initial]
    seq, batch = x.shape[:2]
    dirs, hidden = rnn.num_directions(node), node.hidden_size
    x = x.astype(dtype)
    output = np.zeros((seq, dirs, batch, hidden), dtype)
    finals = [np.zeros((dirs, batch, hidden), dtype) for _ in initial]
    for d in range(dirs):
        state = tuple(np.zeros((batch, hidden), dtype) if s is None else s[d].astype(dtype) for s in initial)
        step = make_step(d, x)
        reverse = node.direction == "reverse" or d == 1
        for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
            new = step(t, state)
            if lengths is not None:
                valid = (t < lengths)[:, None]
                new = tuple(np.where(valid, n, s) for n, s in zip(new, state))
                output[t, d] = np.where(valid, new[0], 0)
            else:
                output[t, d] = new[0]
            state = new
        for final, value in zip(finals, state):
            final[d] = value if lengths is None else np.where((lengths > 0)[:, None], value, 0)
    if node.layout == 1:
        return (output.transpose(2, 0, 1, 3), *(f.transpose(1, 0, 2) for f in finals))
    return (output, *finals)


def _projections(node: Node, d: int, x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray | None,
                 gates: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Direction d's input projection x W^T + Wb for all steps [T, B, G*H], R^T, and the R bias."""
    dtype = x.dtype
    size = gates * node.hidden_size
    wb, rb = (np.zeros(size, dtype), np.zeros(size, dtype)) if b is None else \
        (b[d, :size].astype(dtype), b[d, size:].astype(dtype))
    projected = x @ w[d].astype(dtype).T + wb
    return projected, r[d].astype(dtype).T, rb


@kernel(rnn.LSTM)
def _lstm(node, x, w, r, b, lengths, initial_h, initial_c, peepholes):
    h_size = node.hidden_size
    clip = _clipper(node)

    def make_step(d: int, xs: np.ndarray) -> Step:
        projected, rt, rb = _projections(node, d, xs, w, r, b, 4)
        f, g, h = _activations(node, d, 3)
        p_i, p_o, p_f = (np.zeros(h_size, xs.dtype),) * 3 if peepholes is None else \
            np.split(peepholes[d].astype(xs.dtype), 3)

        def step(t: int, state: tuple) -> tuple:
            hidden, cell = state
            gates = projected[t] + hidden @ rt + rb
            i, o, fg, c = np.split(gates, 4, axis=-1)
            i = f(clip(i + p_i * cell))
            fg = (1 - i) if node.input_forget else f(clip(fg + p_f * cell))
            cell = fg * cell + i * g(clip(c))
            o = f(clip(o + p_o * cell))
            return o * h(cell), cell

        return step

    return _run(node, x, lengths, [initial_h, initial_c], make_step)


@kernel(rnn.GRU)
def _gru(node, x, w, r, b, lengths, initial_h):
    h_size = node.hidden_size
    clip = _clipper(node)

    def make_step(d: int, xs: np.ndarray) -> Step:
        projected, rt, rb = _projections(node, d, xs, w, r, b, 3)
        f, g = _activations(node, d, 2)
        rt_zr, rt_h = rt[:, :2 * h_size], rt[:, 2 * h_size:]
        rb_zr, rb_h = rb[:2 * h_size], rb[2 * h_size:]

        def step(t: int, state: tuple) -> tuple:
            (hidden,) = state
            z, reset = np.split(f(clip(projected[t, :, :2 * h_size] + hidden @ rt_zr + rb_zr)), 2, axis=-1)
            if node.linear_before_reset:
                recurrent = reset * (hidden @ rt_h + rb_h)
            else:
                recurrent = (reset * hidden) @ rt_h + rb_h
            n = g(clip(projected[t, :, 2 * h_size:] + recurrent))
            return ((1 - z) * n + z * hidden,)

        return step

    return _run(node, x, lengths, [initial_h], make_step)


@kernel(rnn.RNN)
def _rnn(node, x, w, r, b, lengths, initial_h):
    clip = _clipper(node)

    def make_step(d: int, xs: np.ndarray) -> Step:
        projected, rt, rb = _projections(node, d, xs, w, r, b, 1)
        (f,) = _activations(node, d, 1)
        return lambda t, state: (f(clip(projected[t] + state[0] @ rt + rb)),)

    return _run(node, x, lengths, [initial_h], make_step)
