"""BatchNorm in training mode (ONNX BatchNormalization, training_mode=1), built from forward kinds.

While training, a BatchNorm normalises with its batch's statistics: the mean and the
biased variance over N and the spatial dims, per channel. The training function gets
that computation as ReduceMean/Sub/Mul/Add/Sqrt/Div nodes instead of the BatchNorm
node, so it lowers to plain primitives and the gradient flows through the statistics
by the rules those kinds already have. The running statistics follow the batch's
with a momentum, running * momentum + batch * (1 - momentum), saved like the
weights into `<name>__updated` outputs that the trainer binds back.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import GlowError
from ..graph.function import Function
from ..graph.node import Constant, Node, NodeValue, Placeholder
from ..graph.nodes import elementwise as ew, reduce as rd, tensor
from ..graph.nodes.nn import BatchNorm
from ..graph.types import ElemKind

DEFAULT_MOMENTUM = 0.9
"""ONNX BatchNormalization's default momentum (the importer keeps no per-node value)."""


@dataclass
class RunningStatistic:
    """A BatchNorm's running mean or variance Placeholder and the output its update is saved into."""

    placeholder: Placeholder
    updated: Placeholder

    @property
    def name(self) -> str:
        return self.placeholder.name


def running_statistics(function: Function) -> list[str]:
    """Names of the Constants holding `function`'s BatchNorm running means and variances: a trainer
    makes them Placeholders along with the weights it trains, so that it can update them."""
    names: dict[str, None] = {}
    for node in function.nodes:
        if isinstance(node, BatchNorm):
            names.update((v.node.name, None) for v in (node.mean, node.var) if isinstance(v.node, Constant))
    return list(names)


class _Builder:
    """Adds nodes named `<name>_<suffix>` to one function."""

    def __init__(self, function: Function, name: str) -> None:
        self.function, self.name = function, name

    def __call__(self, kind: type[Node], *operands: NodeValue, suffix: str, **attrs: Any) -> NodeValue:
        return self.function.add(kind, *operands, name=f"{self.name}_{suffix}", **attrs)

    def cast(self, value: NodeValue, elem: ElemKind, suffix: str) -> NodeValue:
        return value if value.type.elem == elem else self(ew.Cast, value, suffix=suffix, to=elem)

    def scalar(self, value: float, elem: ElemKind, suffix: str) -> NodeValue:
        """A rank-0 Constant, which broadcasts against anything."""
        constant = self.function.module.create_constant(f"{self.name}_{suffix}", np.array(value, elem.dtype))
        return constant.result()


def batch_norm_training(function: Function, name: str, inputs: Sequence[NodeValue], epsilon: float,
                        momentum: float, statistics: list[RunningStatistic]) -> NodeValue:
    """Add to `function` the training-mode BatchNorm of `inputs` (x, scale, bias, mean, var), its
    nodes named after `name`; returns its result, and appends to `statistics` the running-statistic
    updates for the mean and var that are Placeholders (Constant statistics stay as they are)."""
    if not 0 <= momentum <= 1:
        raise GlowError(f"the BatchNorm momentum must lie in [0, 1], got {momentum}")
    x, scale, bias, mean, var = inputs
    add, elem, rank = _Builder(function, name), x.type.elem, x.type.rank
    axes = (0,) + tuple(range(2, rank))
    per_channel = (1, x.type.shape[1]) + (1,) * (rank - 2)
    # y = (x - E[x]) / sqrt(E[(x - E[x])^2] + epsilon) * scale + bias, expectations over `axes`
    batch_mean = add(rd.ReduceMean, x, suffix="batch_mean", axes=axes, keepdims=True)
    centred = add(ew.Sub, x, batch_mean, suffix="centred")
    batch_var = add(rd.ReduceMean, add(ew.Mul, centred, centred, suffix="squared"), suffix="batch_var",
                    axes=axes, keepdims=True)
    std = add(ew.Sqrt, add(ew.Add, batch_var, add.scalar(epsilon, elem, "epsilon"), suffix="var_eps"),
              suffix="std")
    gain = add(tensor.Reshape, add.cast(scale, elem, "scale_cast"), suffix="scale_c", shape=per_channel)
    shift = add(tensor.Reshape, add.cast(bias, elem, "bias_cast"), suffix="bias_c", shape=per_channel)
    scaled = add(ew.Mul, add(ew.Div, centred, std, suffix="normalised"), gain, suffix="scaled")
    for running, batch in ((mean, batch_mean), (var, batch_var)):
        if isinstance(running.node, Placeholder):
            statistics.append(_update_running(add, running.node, batch, momentum, statistics))
    return add(ew.Add, scaled, shift, suffix="train")


def _update_running(add: _Builder, running: Placeholder, batch: NodeValue, momentum: float,
                    statistics: list[RunningStatistic]) -> RunningStatistic:
    """Save running * momentum + batch * (1 - momentum) into `<running>__updated`."""
    if any(s.placeholder is running for s in statistics):
        raise GlowError(f"running statistic '{running.name}' is read by two BatchNorms; its update "
                        f"would be ambiguous")
    elem, tag = running.type.elem, running.name
    flat = add.cast(add(tensor.Reshape, batch, suffix=f"{tag}_flat", shape=running.type.shape), elem,
                    f"{tag}_cast")
    kept = add(ew.Mul, running.result(), add.scalar(momentum, elem, "momentum"), suffix=f"{tag}_kept")
    fresh = add(ew.Mul, flat, add.scalar(1 - momentum, elem, "one_minus_momentum"), suffix=f"{tag}_fresh")
    updated = add(ew.Add, kept, fresh, suffix=f"{tag}_running")
    return RunningStatistic(running, add.function.save(updated, f"{running.name}__updated"))
