"""Lowering rules of the rnn node kinds.

LSTM, GRU and RNN unroll over their static time steps, direction by direction,
and follow the reference kernel operation by operation (the same operand
order in every sum, so the same rounding): the whole sequence is projected
through W in one canonical MatMul, then each step adds h R^T and the R bias,
slices out the gates, clips them (Max, Min) and applies the direction's
activation kinds, which lower further. float16 and bfloat16 compute in float32
(Cast in and out), as the kernel does. A zero bias or peephole the node lacks
is left out rather than added, which only turns a -0.0 sum into +0.0 in the
kernel.

`lengths` masks every step with Where: from compile-time tables when the
lengths are a Constant (a step no batch entry reaches is not computed at all),
from Less(iota, lengths) otherwise.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ....graph.node import Node, NodeValue
from ....graph.nodes import elementwise as ew
from ....graph.nodes import linalg, rnn
from ....graph.nodes import tensor
from ....graph.types import ElemKind
from ..registry import Lowerer, lowers
from .common import cast_to, compute_elem, constant_array

Activation = Callable[[NodeValue], NodeValue]
State = tuple[NodeValue, ...]
Step = Callable[[int, State], State]


_GATE_KINDS = {"Relu": ew.Relu, "Tanh": ew.Tanh, "Sigmoid": ew.Sigmoid, "LeakyRelu": ew.LeakyRelu,
               "ThresholdedRelu": ew.ThresholdedRelu, "HardSigmoid": ew.HardSigmoid, "Elu": ew.Elu,
               "Softsign": ew.Softsign, "Softplus": ew.Softplus}
"""The gate functions that are node kinds of their own, whose alpha and beta are attributes."""


def _activation(b: Lowerer, name: str, alpha: float, beta: float) -> Activation:
    """The gate function `name` as node kinds (Affine and ScaledTanh from Mul, Add and Tanh)."""
    def scalar(value: float, x: NodeValue) -> NodeValue:
        return b.scalar(value, x.type.elem)

    if name == "Affine":
        return lambda x: b.add(ew.Add, b.add(ew.Mul, scalar(alpha, x), x), scalar(beta, x))
    if name == "ScaledTanh":
        return lambda x: b.add(ew.Mul, scalar(alpha, x), b.add(ew.Tanh, b.add(ew.Mul, scalar(beta, x), x)))
    kind = _GATE_KINDS[name]
    attrs = {a.name: {"alpha": alpha, "beta": beta}[a.name] for a in kind.spec.attrs}
    return lambda x: b.add(kind, x, **attrs)


class _Lengths:
    """The per-step masks of `lengths`: True (every batch entry runs this step), False (none
    does), or a bool [B, 1] value; and the mask of entries with any step at all."""

    def __init__(self, b: Lowerer, node: Node, seq: int, batch: int) -> None:
        self.b, self.batch = b, batch
        self.lengths = lengths = node.lengths
        self.known = constant_array(lengths)
        if self.known is not None:
            self.table = np.arange(seq)[:, None] < self.known[None, :]
        elif lengths is not None:
            iota = b.constant(np.arange(seq, dtype=np.int32)[:, None], "step_index")
            self.steps = b.add(ew.Less, iota, lengths)

    def valid(self, t: int) -> bool | NodeValue:
        if self.lengths is None:
            return True
        if self.known is not None:
            row = self.table[t]
            if row.all() or not row.any():
                return bool(row.all())
            return self.b.constant(row[:, None], "step_mask")
        row = self.b.add(tensor.Slice, self.steps, starts=[t, 0], ends=[t + 1, self.batch], steps=[1, 1])
        return self.b.add(tensor.Reshape, row, shape=[self.batch, 1])

    def started(self) -> NodeValue | None:
        """Where the final states are kept (lengths > 0); None when everywhere."""
        if self.lengths is None or (self.known is not None and (self.known > 0).all()):
            return None
        if self.known is not None:
            return self.b.constant((self.known > 0)[:, None], "started")
        zero = self.b.scalar(0, ElemKind.INT32)
        return self.b.add(tensor.Reshape, self.b.add(ew.Less, zero, self.lengths), shape=[self.batch, 1])


class _Unrolled:
    """What the three kinds share: operands in the computation kind and sequence-major,
    the input projections, gate arithmetic, and the results in the node's layout."""

    def __init__(self, b: Lowerer, node: Node, gates: int) -> None:
        self.b, self.node, self.gates = b, node, gates
        self.elem = compute_elem(node.input)
        x = self.cast(node.input)
        if node.layout == 1:
            x = b.add(tensor.Transpose, x, perm=[1, 0, 2])
        self.seq, self.batch, size = x.type.shape
        self.hidden = node.hidden_size
        self.rows = b.add(tensor.Reshape, x, shape=[self.seq * self.batch, size])
        self.lengths = _Lengths(b, node, self.seq, self.batch)
        self.one = b.scalar(1, self.elem)
        self.zero = b.scalar(0, self.elem)

    def cast(self, value: NodeValue | None) -> NodeValue | None:
        return None if value is None else cast_to(self.b, value, self.elem)

    def cut(self, value: NodeValue, axis: int, start: int, end: int) -> NodeValue:
        """value[..., start:end, ...] along `axis`."""
        shape = value.type.shape
        starts, ends = [0] * len(shape), list(shape)
        starts[axis], ends[axis] = start, end
        return self.b.add(tensor.Slice, value, starts=starts, ends=ends, steps=[1] * len(shape))

    def pick(self, value: NodeValue, axis: int, d: int) -> NodeValue:
        """Direction d's slab of `value`, without the direction axis."""
        shape = list(value.type.shape)
        del shape[axis]
        return self.b.add(tensor.Reshape, self.cut(value, axis, d, d + 1), shape=shape)

    def weights(self, d: int) -> tuple[NodeValue, NodeValue, NodeValue | None]:
        """Direction d's projected inputs x W^T + Wb for all steps [T*B, G*H], R^T and the R bias."""
        size = self.gates * self.hidden
        w = self.b.add(tensor.Transpose, self.pick(self.cast(self.node.weights), 0, d), perm=[1, 0])
        projected = self.b.add(linalg.MatMul, self.rows, w)
        rt = self.b.add(tensor.Transpose, self.pick(self.cast(self.node.recurrence), 0, d), perm=[1, 0])
        if self.node.bias is None:
            return projected, rt, None
        bias = self.pick(self.cast(self.node.bias), 0, d)
        projected = self.b.add(ew.Add, projected, self.cut(bias, 0, 0, size))
        return projected, rt, self.cut(bias, 0, size, 2 * size)

    def step_input(self, projected: NodeValue, t: int, start: int, end: int) -> NodeValue:
        """Columns start:end of step t's projected input, [B, end - start]."""
        return self.b.add(tensor.Slice, projected, starts=[t * self.batch, start],
                          ends=[(t + 1) * self.batch, end], steps=[1, 1])

    def gate_sum(self, x: NodeValue, h: NodeValue, rt: NodeValue, rb: NodeValue | None) -> NodeValue:
        """x + h R^T + Rb, summed in that order."""
        total = self.b.add(ew.Add, x, self.b.add(linalg.MatMul, h, rt))
        return total if rb is None else self.b.add(ew.Add, total, rb)

    def gate(self, gates: NodeValue, k: int) -> NodeValue:
        """Gate block k (H wide) of [B, G*H] gates."""
        return self.cut(gates, 1, k * self.hidden, (k + 1) * self.hidden)

    def clip(self, x: NodeValue) -> NodeValue:
        if np.isinf(self.node.clip):
            return x
        x = self.b.add(ew.Max, x, self.b.scalar(-self.node.clip, self.elem))
        return self.b.add(ew.Min, x, self.b.scalar(self.node.clip, self.elem))

    def activations(self, d: int, count: int) -> list[Activation]:
        node = self.node
        return [_activation(self.b, node.activations[k], node.activation_alpha[k], node.activation_beta[k])
                for k in range(d * count, (d + 1) * count)]

    def initial(self, value: NodeValue | None, d: int) -> NodeValue:
        if value is None:
            return self.b.splat(0.0, (self.batch, self.hidden), self.elem)
        return self.pick(self.cast(value), self.node.layout, d)

    def run(self, make_step: Callable[[int], Step], initial: Sequence[NodeValue | None]) -> list[NodeValue]:
        """Every direction over the sequence, masked by lengths; (output, *final states)."""
        node, b = self.node, self.b
        outputs, finals = [], []
        started = self.lengths.started()
        for d in range(rnn.num_directions(node)):
            state = tuple(self.initial(s, d) for s in initial)
            step = make_step(d)
            steps: list[NodeValue] = [None] * self.seq
            reverse = node.direction == "reverse" or d == 1
            for t in (range(self.seq - 1, -1, -1) if reverse else range(self.seq)):
                valid = self.lengths.valid(t)
                if valid is False:
                    steps[t] = b.splat(0.0, (self.batch, self.hidden), self.elem)
                    continue
                new = step(t, state)
                if valid is not True:
                    new = tuple(b.add(ew.Where, valid, n, s) for n, s in zip(new, state))
                    steps[t] = b.add(ew.Where, valid, new[0], self.zero)
                else:
                    steps[t] = new[0]
                state = new
            if started is not None:
                state = tuple(b.add(ew.Where, started, s, self.zero) for s in state)
            outputs.append(steps)
            finals.append(state)
        return [self.cast_back(v) for v in (self.output(outputs), *self.states(finals))]

    def output(self, outputs: list[list[NodeValue]]) -> NodeValue:
        """[T, D, B, H] (layout 0) or [B, T, D, H] (layout 1) from every step's h."""
        b, batch, hidden = self.b, self.batch, self.hidden
        piece, time_axis, dir_axis = ([1, 1, batch, hidden], 0, 1) if self.node.layout == 0 else \
            ([batch, 1, 1, hidden], 1, 2)
        if self.seq == 0:
            return b.splat(0.0, self.node.types[0].shape, self.elem)
        per_direction = [_join(b, [b.add(tensor.Reshape, h, shape=piece) for h in steps], time_axis)
                         for steps in outputs]
        return _join(b, per_direction, dir_axis)

    def states(self, finals: list[State]) -> list[NodeValue]:
        """Each final state, [D, B, H] (layout 0) or [B, D, H] (layout 1)."""
        piece, axis = ([1, self.batch, self.hidden], 0) if self.node.layout == 0 else \
            ([self.batch, 1, self.hidden], 1)
        return [_join(self.b, [self.b.add(tensor.Reshape, state[k], shape=piece) for state in finals], axis)
                for k in range(len(finals[0]))]

    def cast_back(self, value: NodeValue) -> NodeValue:
        return cast_to(self.b, value, self.node.input.type.elem)


def _join(b: Lowerer, parts: list[NodeValue], axis: int) -> NodeValue:
    return parts[0] if len(parts) == 1 else b.add(tensor.Concat, *parts, axis=axis)


# RNN -> per step: h' = f(clip(x_t W^T + Wb + h R^T + Rb))
@lowers(rnn.RNN)
def _rnn(b: Lowerer, node: Node) -> list[NodeValue]:
    u = _Unrolled(b, node, 1)

    def make_step(d: int) -> Step:
        projected, rt, rb = u.weights(d)
        (f,) = u.activations(d, 1)
        return lambda t, state: (f(u.clip(u.gate_sum(u.step_input(projected, t, 0, u.hidden),
                                                      state[0], rt, rb))),)

    return u.run(make_step, [node.initial_h])


# GRU -> per step: z, r = f(...); n = g(x W_h + r-gated recurrence); h' = (1 - z) * n + z * h
@lowers(rnn.GRU)
def _gru(b: Lowerer, node: Node) -> list[NodeValue]:
    u = _Unrolled(b, node, 3)
    h_size = node.hidden_size

    def make_step(d: int) -> Step:
        projected, rt, rb = u.weights(d)
        f, g = u.activations(d, 2)
        rt_zr, rt_h = u.cut(rt, 1, 0, 2 * h_size), u.cut(rt, 1, 2 * h_size, 3 * h_size)
        rb_zr, rb_h = (None, None) if rb is None else (u.cut(rb, 0, 0, 2 * h_size),
                                                       u.cut(rb, 0, 2 * h_size, 3 * h_size))

        def step(t: int, state: State) -> State:
            (hidden,) = state
            zr = f(u.clip(u.gate_sum(u.step_input(projected, t, 0, 2 * h_size), hidden, rt_zr, rb_zr)))
            z, reset = u.gate(zr, 0), u.gate(zr, 1)
            if node.linear_before_reset:
                recurrent = b.add(linalg.MatMul, hidden, rt_h)
                if rb_h is not None:
                    recurrent = b.add(ew.Add, recurrent, rb_h)
                recurrent = b.add(ew.Mul, reset, recurrent)
            else:
                recurrent = b.add(linalg.MatMul, b.add(ew.Mul, reset, hidden), rt_h)
                if rb_h is not None:
                    recurrent = b.add(ew.Add, recurrent, rb_h)
            n = g(u.clip(b.add(ew.Add, u.step_input(projected, t, 2 * h_size, 3 * h_size), recurrent)))
            kept = b.add(ew.Mul, b.add(ew.Sub, u.one, z), n)
            return (b.add(ew.Add, kept, b.add(ew.Mul, z, hidden)),)

        return step

    return u.run(make_step, [node.initial_h])


# LSTM -> per step: gates i, o, f, c~ with peepholes; c' = f*c + i*g(c~); h' = o * h(c')
@lowers(rnn.LSTM)
def _lstm(b: Lowerer, node: Node) -> list[NodeValue]:
    u = _Unrolled(b, node, 4)
    h_size = node.hidden_size

    def make_step(d: int) -> Step:
        projected, rt, rb = u.weights(d)
        f, g, h = u.activations(d, 3)
        peep = [None] * 3
        if node.peepholes is not None:
            p = u.pick(u.cast(node.peepholes), 0, d)
            peep = [u.cut(p, 0, k * h_size, (k + 1) * h_size) for k in range(3)]

        def with_peephole(x: NodeValue, k: int, cell: NodeValue) -> NodeValue:
            return x if peep[k] is None else b.add(ew.Add, x, b.add(ew.Mul, peep[k], cell))

        def step(t: int, state: State) -> State:
            hidden, cell = state
            gates = u.gate_sum(u.step_input(projected, t, 0, 4 * h_size), hidden, rt, rb)
            i = f(u.clip(with_peephole(u.gate(gates, 0), 0, cell)))
            if node.input_forget:
                forget = b.add(ew.Sub, u.one, i)
            else:
                forget = f(u.clip(with_peephole(u.gate(gates, 2), 2, cell)))
            candidate = g(u.clip(u.gate(gates, 3)))
            cell = b.add(ew.Add, b.add(ew.Mul, forget, cell), b.add(ew.Mul, i, candidate))
            o = f(u.clip(with_peephole(u.gate(gates, 1), 1, cell)))
            return b.add(ew.Mul, o, h(cell)), cell

        return step

    return u.run(make_step, [node.initial_h, node.initial_c])
