"""The training function of a module: the forward pass, a loss, its gradient and SGD (paper 3.2).

Weights are Placeholders while training. `make_trainable` turns the float Constants
an inference function reads into Placeholders of the same names; `build_training`
adds a second function to the module that recomputes the forward pass, applies
the loss, differentiates it and updates every weight with an SGD node; its BatchNorms
normalise with batch statistics and update their running ones (`batch_norm`). The updated
weights (and momentum velocities) are saved into paired output Placeholders, which
the runtime binds back into the weights' tensors before the next step: a Save into
an input Placeholder would need every backend's scheduler and allocator to order
the weight's last read before its write. `freeze` turns the trained Placeholders
back into Constants so the inference function compiles for any backend.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np

from ..errors import GlowError, GraphError
from ..graph.function import Function
from ..graph.node import Constant, NodeValue, Placeholder
from ..graph.nodes import elementwise as ew, nn, reduce as rd, training as tr
from ..graph.nodes.core import Save
from ..graph.types import ElemKind, Type
from .autodiff import differentiate
from .batch_norm import DEFAULT_MOMENTUM, RunningStatistic, batch_norm_training

LOSSES = ("cross_entropy", "regression")
"""cross_entropy: SoftmaxCrossEntropy of N x K logits against int64 labels N;
regression: squared error 1/2 sum (output - target)^2 through a Regression node."""


@dataclass(frozen=True)
class SGDConfig:
    """The SGD node's attributes: g = grad + weight_decay * w; v = momentum * v + g; w -= learning_rate * v."""

    learning_rate: float
    momentum: float = 0.0
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        # NaN fails every comparison and inf passes `> 0`: finiteness is checked on its own
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise GlowError(f"the learning rate must be a finite number > 0, got {self.learning_rate}")
        if not (math.isfinite(self.momentum) and 0 <= self.momentum < 1):
            raise GlowError(f"momentum must be a finite number in [0, 1), got {self.momentum}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise GlowError(f"weight decay must be a finite number >= 0, got {self.weight_decay}")


@dataclass
class Parameter:
    """One trained weight: its Placeholder and the outputs its SGD node is saved into."""

    placeholder: Placeholder
    updated: Placeholder | None = None
    velocity: Placeholder | None = None
    velocity_updated: Placeholder | None = None

    @property
    def name(self) -> str:
        return self.placeholder.name


@dataclass
class TrainingGraph:
    """What `build_training` added to the module: the function and the names the runtime binds."""

    function: Function
    inference: Function
    target: Placeholder
    loss: Placeholder
    parameters: list[Parameter] = field(default_factory=list)
    statistics: list[RunningStatistic] = field(default_factory=list)


def make_trainable(function: Function, names: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """Turn the float Constants `function` reads (rank >= 1, or those in `names`) into Placeholders
    of the same names; returns their values, the initial weights."""
    module = function.module
    used = {id(v.node): v.node for n in function.nodes for v in n.present_inputs() if isinstance(v.node, Constant)}
    wanted = None if names is None else set(names)
    chosen = [c for c in used.values() if c.type.elem.is_float and
              (c.name in wanted if wanted is not None else c.type.rank >= 1)]
    if wanted is not None and wanted - {c.name for c in chosen}:
        raise GlowError(f"no float constant(s) {', '.join(sorted(wanted - {c.name for c in chosen}))} "
                        f"in function '{function.name}'")
    values = {}
    for const in chosen:
        name, value = const.name, np.array(const.value)
        stand_in = module.create_placeholder(f"{name}__training", const.type)
        function.replace_all_uses(const.result(), stand_in.result())
        module.erase_unused_storage()  # frees the constant's name for the placeholder
        weight = module.create_placeholder(name, const.type)
        function.replace_all_uses(stand_in.result(), weight.result())
        del module.placeholders[stand_in.name]
        values[weight.name] = value
    return values


def _single_output(function: Function) -> NodeValue:
    saves = [n for n in function.nodes if isinstance(n, Save)]
    if len(saves) != 1:
        raise GlowError(f"training needs a function with one output, '{function.name}' has {len(saves)}")
    return saves[0].input


def build_training(function: Function, weights: Iterable[str], loss: str, sgd: SGDConfig,
                   name: str = "train", batch_norm_momentum: float | None = DEFAULT_MOMENTUM) -> TrainingGraph:
    """Add to `function`'s module a function training the Placeholders `weights` on `loss` with `sgd`.

    BatchNorms run in training mode, their running statistics following the batch's with
    `batch_norm_momentum`; None keeps them in inference mode (frozen statistics, as for fine-tuning).
    """
    if loss not in LOSSES:
        raise GlowError(f"unknown loss '{loss}' (expected one of {', '.join(LOSSES)})")
    module = function.module
    train = module.create_function(name)
    mapping: dict[NodeValue, NodeValue] = {}
    output = _single_output(function)
    statistics: list[RunningStatistic] = []
    for node in function.nodes:
        if isinstance(node, Save):
            continue
        inputs = [None if v is None else mapping.get(v, v) for v in node.inputs]
        if isinstance(node, nn.BatchNorm) and batch_norm_momentum is not None:
            mapping[node.result()] = batch_norm_training(train, node.name, inputs, node.epsilon,
                                                         batch_norm_momentum, statistics)
            continue
        twin = train.create(type(node), inputs, node.name, **node.attrs)
        mapping.update(zip(node.results, twin.results))
    prediction = mapping[output]
    if loss == "cross_entropy":
        target = module.create_placeholder("target", Type(ElemKind.INT64, prediction.type.shape[:1]))
        objective = train.add(tr.SoftmaxCrossEntropy, prediction, target.result(), name="loss")
        reported = objective
    else:
        target = module.create_placeholder("target", prediction.type)
        objective = train.add(tr.Regression, prediction, target.result(), name="regression")
        reported = _half_squared_error(train, prediction, target.result())
    placeholders = [module.placeholders[w] for w in weights]
    grads = differentiate(train, objective, placeholders)
    graph = TrainingGraph(train, function, target, train.save(reported, "loss"), statistics=statistics)
    for weight in placeholders:
        grad = grads[weight.name]
        if grad is None:
            continue
        param = Parameter(weight)
        if sgd.momentum:
            param.velocity = module.create_placeholder(f"{weight.name}__velocity", weight.type)
        step = train.create(tr.SGD, [weight.result(), grad, param.velocity and param.velocity.result()],
                            f"{weight.name}_sgd", learning_rate=sgd.learning_rate, momentum=sgd.momentum,
                            weight_decay=sgd.weight_decay)
        param.updated = train.save(step.result(0), f"{weight.name}__updated")
        if param.velocity is not None:
            param.velocity_updated = train.save(step.result(1), f"{weight.name}__velocity__updated")
        graph.parameters.append(param)
    if not graph.parameters:
        raise GlowError(f"the loss does not depend on any weight of '{function.name}'")
    train.erase_dead()
    train.verify()
    return graph


def _half_squared_error(train: Function, prediction: NodeValue, target: NodeValue) -> NodeValue:
    """1/2 sum (prediction - target)^2, the loss a Regression node's gradient descends."""
    error = train.add(ew.Sub, prediction, target)
    total = train.add(rd.ReduceSum, train.add(ew.Mul, error, error),
                      axes=tuple(range(error.type.rank)), keepdims=False)
    return train.add(ew.Mul, total, train.module.create_constant("half", np.array(0.5, error.type.dtype)).result())


def discard(graph: TrainingGraph) -> None:
    """Remove the training function, and the placeholders and constants only it used, from the module."""
    module, train = graph.function.module, graph.function
    for node in reversed(list(train.nodes)):
        train.erase(node)
    del module.functions[train.name]
    own = [graph.target, graph.loss] + [ph for p in graph.parameters
                                        for ph in (p.updated, p.velocity, p.velocity_updated) if ph is not None]
    own += [s.updated for s in graph.statistics]
    for ph in own:
        del module.placeholders[ph.name]
    module.erase_unused_storage()


def freeze(function: Function, weights: Mapping[str, np.ndarray]) -> None:
    """Replace each Placeholder of `function` named in `weights` by a Constant holding its value
    (paper 3.2: the trained inference function then optimises knowing its weights)."""
    module = function.module
    for name, value in weights.items():
        weight = module.placeholders.get(name)
        if weight is None or weight.is_output:
            raise GlowError(f"'{name}' is not an input placeholder of the module")
        if any(user.function is not function for user in weight.users):
            raise GraphError(f"placeholder '{name}' is still read outside '{function.name}'")
        const = module.create_constant(f"{name}__trained", np.asarray(value, weight.type.dtype), weight.type)
        function.replace_all_uses(weight.result(), const.result())
        del module.placeholders[name]
