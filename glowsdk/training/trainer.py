"""Running training on a backend: the host side of the training function.

    trainer = Trainer(network.function, loss="cross_entropy", sgd=SGDConfig(0.05, momentum=0.9),
                      backend="cpu")
    for epoch in range(10):
        trainer.epoch(Batches({"image": x}, y, batch=32, seed=epoch))
    weights = trainer.freeze()          # the inference function now holds Constants

The trainer owns the tensors behind the weight Placeholders: each step feeds them
to the compiled training function and binds the saved updates back (paper 3.2).
A step whose loss or updates are NaN or infinite raises `DivergedError` and binds
nothing, so the weights stay the last finite ones. `train(...)` is the one-call form.
"""
from __future__ import annotations

from typing import Callable, Iterable, Iterator, Mapping

import numpy as np

from ..backends.registry import get_backend
from ..compiler.backend import CompiledFunction
from ..compiler.pipeline import compile_function
from ..errors import GlowError
from ..graph.function import Function
from .batch_norm import DEFAULT_MOMENTUM, running_statistics
from .graph import SGDConfig, TrainingGraph, build_training, discard, freeze, make_trainable

Batch = tuple[Mapping[str, np.ndarray], np.ndarray]
DEFAULT_SGD = SGDConfig(0.01)


class DivergedError(GlowError):
    """A training step made the loss or an updated weight NaN or infinite (the learning rate is too
    large for the data); `what` says which value, `epoch` and `step` (from 1) where, when known."""

    def __init__(self, what: str, learning_rate: float, epoch: int | None = None, step: int | None = None) -> None:
        self.what, self.learning_rate, self.epoch, self.step = what, learning_rate, epoch, step
        super().__init__(f"training diverged{self.where}: {what}; try a learning rate smaller than {learning_rate:g}")

    @property
    def where(self) -> str:
        """' at epoch E, step S', as much of it as is known."""
        parts = [f"{label} {n}" for label, n in (("epoch", self.epoch), ("step", self.step)) if n is not None]
        return f" at {', '.join(parts)}" if parts else ""

    def at(self, epoch: int, step: int) -> DivergedError:
        return DivergedError(self.what, self.learning_rate, epoch, step)


def _non_finite(label: str, value: np.ndarray) -> str | None:
    """What is wrong with `value` if it holds NaN or infinities, else None."""
    bad = np.size(value) - np.count_nonzero(np.isfinite(value))
    return f"{label} became NaN or infinite in {bad} of {np.size(value)} values" if bad else None


class Batches:
    """Mini-batches of (inputs, target), reshuffled with a seeded generator on every pass.

    The compiled functions have a static batch size, so a last partial batch is left out
    (each pass shuffles anew, so every example is seen).
    """

    def __init__(self, inputs: Mapping[str, np.ndarray], target: np.ndarray, batch: int, seed: int = 0) -> None:
        sizes = {len(a) for a in inputs.values()} | {len(target)}
        if len(sizes) != 1:
            raise GlowError(f"inputs and target must have one length, got {sorted(sizes)}")
        if not 1 <= batch <= len(target):
            raise GlowError(f"batch {batch} must lie in [1, {len(target)}] (the number of examples)")
        self.inputs, self.target, self.batch = dict(inputs), target, batch
        self._rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return len(self.target) // self.batch

    def __iter__(self) -> Iterator[Batch]:
        order = self._rng.permutation(len(self.target))
        for start in range(0, len(self) * self.batch, self.batch):
            chosen = order[start:start + self.batch]
            yield {k: v[chosen] for k, v in self.inputs.items()}, self.target[chosen]


class Trainer:
    """A function's training function compiled for `backend`, with the weights it updates.

    `self.weights` also holds the BatchNorm running statistics (unless `batch_norm_momentum` is None,
    which keeps BatchNorm in inference mode): each step replaces them by their momentum updates.
    """

    def __init__(self, function: Function, loss: str = "cross_entropy", sgd: SGDConfig = DEFAULT_SGD,
                 backend: str = "interpreter", trainable: Iterable[str] | None = None,
                 batch_norm_momentum: float | None = DEFAULT_MOMENTUM) -> None:
        self.function = function
        self.backend = backend
        if trainable is not None and batch_norm_momentum is not None:
            trainable = {*trainable, *running_statistics(function)}
        self.weights = make_trainable(function, trainable)
        self.graph: TrainingGraph = build_training(function, self.weights, loss, sgd,
                                                   batch_norm_momentum=batch_norm_momentum)
        self.velocities = {p.velocity.name: np.zeros(p.velocity.type.shape, p.velocity.type.dtype)
                           for p in self.graph.parameters if p.velocity is not None}
        self.compiled = compile_function(self.graph.function, get_backend(backend))
        self.learning_rate = sgd.learning_rate
        self.epochs_run = 0
        self._inference: CompiledFunction | None = None

    def step(self, inputs: Mapping[str, np.ndarray], target: np.ndarray) -> float:
        """One SGD step on one batch; returns the batch's loss (before the update).

        DivergedError, with the weights left as they were, if the loss or an update is not finite.
        """
        feeds = {**inputs, self.graph.target.name: target, **self.weights, **self.velocities}
        outputs = self.compiled.execute(feeds)
        self._check_finite(outputs)
        for param in self.graph.parameters:
            self.weights[param.name] = outputs[param.updated.name]
            if param.velocity is not None:
                self.velocities[param.velocity.name] = outputs[param.velocity_updated.name]
        for stat in self.graph.statistics:
            self.weights[stat.name] = outputs[stat.updated.name]
        return float(outputs[self.graph.loss.name])

    def _check_finite(self, outputs: Mapping[str, np.ndarray]) -> None:
        """DivergedError naming the loss, else the first update, that holds NaN or infinities."""
        loss = float(outputs[self.graph.loss.name])
        if not np.isfinite(loss):
            raise DivergedError(f"the loss is {loss}", self.learning_rate)
        updates = [(f"weight '{p.name}'", p.updated) for p in self.graph.parameters]
        updates += [(f"the velocity of '{p.name}'", p.velocity_updated)
                    for p in self.graph.parameters if p.velocity_updated is not None]
        updates += [(f"running statistic '{s.name}'", s.updated) for s in self.graph.statistics]
        for label, placeholder in updates:
            problem = _non_finite(label, outputs[placeholder.name])
            if problem:
                raise DivergedError(f"{problem} (loss {loss:g})", self.learning_rate)

    def epoch(self, batches: Iterable[Batch], progress: Callable[[int, float], None] | None = None) -> float:
        """One pass over `batches`; returns the mean batch loss. DivergedError names the epoch
        (counting this trainer's epochs from 1) and the step in it."""
        self.epochs_run += 1
        losses = []
        for inputs, target in batches:
            try:
                losses.append(self.step(inputs, target))
            except DivergedError as err:
                raise err.at(self.epochs_run, len(losses) + 1) from None
            if progress is not None:
                progress(len(losses), losses[-1])
        if not losses:
            raise GlowError("an epoch needs at least one batch")
        return float(np.mean(losses))

    def predict(self, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
        """The inference function's output on any number of examples, with the current weights
        (run in chunks of its static batch size, the last one padded with zeros)."""
        if self._inference is None:
            self._inference = compile_function(self.function, get_backend(self.backend))
        info = self._inference.inputs
        batch = next(i.shape[0] for i in info if i.name in inputs)
        total = len(next(iter(inputs.values())))
        output = self._inference.outputs[0].name
        chunks = []
        for start in range(0, total, batch):
            feeds = dict(self.weights)
            for name, array in inputs.items():
                piece = array[start:start + batch]
                if len(piece) < batch:
                    piece = np.concatenate([piece, np.zeros((batch - len(piece),) + piece.shape[1:], piece.dtype)])
                feeds[name] = piece
            chunks.append(self._inference.execute(feeds)[output])
        return np.concatenate(chunks)[:total]

    def freeze(self) -> dict[str, np.ndarray]:
        """Drop the training function and make the trained weights Constants of the inference
        function; returns the weights."""
        discard(self.graph)
        freeze(self.function, self.weights)
        self._inference = None
        return dict(self.weights)


def train(function: Function, loss: str, batches: Iterable[Batch], epochs: int, lr: float, *,
          momentum: float = 0.0, weight_decay: float = 0.0, backend: str = "interpreter",
          trainable: Iterable[str] | None = None, batch_norm_momentum: float | None = DEFAULT_MOMENTUM,
          on_epoch: Callable[[int, float], None] | None = None) -> list[float]:
    """Train `function`'s float Constants (or `trainable`) with SGD for `epochs` passes over `batches`
    on `backend` (BatchNorms in training mode unless `batch_norm_momentum` is None), then freeze them
    back into Constants; returns the mean loss of each epoch."""
    if epochs < 1:
        raise GlowError(f"epochs must be at least 1, got {epochs}")
    trainer = Trainer(function, loss, SGDConfig(lr, momentum, weight_decay), backend, trainable,
                      batch_norm_momentum)
    history = []
    for epoch in range(epochs):
        history.append(trainer.epoch(batches))
        if on_epoch is not None:
            on_epoch(epoch, history[-1])
    trainer.freeze()
    return history
