"""`glowsdk train`: train an ONNX model's weights with SGD on a target, write the trained ONNX model.

    glowsdk train model.onnx --data data.npz --epochs 10 [--lr 0.05 --momentum 0.9 --batch 32
                  --target cpu --loss cross_entropy --random-weights 0] -o trained.onnx

data.npz holds one array per model input (by input name, examples along dim 0) and
`target`: int labels for cross_entropy, arrays shaped like the output for regression.

Bad hyper-parameters are refused as the arguments are parsed, data holding NaN or
infinities as it is read, and a run whose loss or weights stop being finite stops
with the epoch and step; in every case before anything is written.
"""
from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable

import numpy as np

from ..errors import GlowError
from ..files import atomic_write, check_writable_file
from ..progress import Progress
from . import options

TARGET_KEY = "target"


def _finite_number(text: str, accepts: Callable[[float], bool], wanted: str) -> float:
    """`text` as a float if it is finite and `accepts` it; else argparse's one-line error saying `wanted`."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and accepts(value)):
        raise argparse.ArgumentTypeError(f"'{text}' is not {wanted}")
    return value


def learning_rate(text: str) -> float:
    """argparse type: a finite number > 0."""
    return _finite_number(text, lambda v: v > 0, "a finite number > 0")


def momentum(text: str) -> float:
    """argparse type: a finite number in [0, 1)."""
    return _finite_number(text, lambda v: 0 <= v < 1, "a finite number in [0, 1)")


def weight_decay(text: str) -> float:
    """argparse type: a finite number >= 0."""
    return _finite_number(text, lambda v: v >= 0, "a finite number >= 0")


def _check_finite(path: str, arrays: dict[str, np.ndarray]) -> None:
    """GlowError naming the first float array that holds NaN or infinities."""
    for name, array in arrays.items():
        if array.dtype.kind in "fc":
            bad = array.size - np.count_nonzero(np.isfinite(array))
            if bad:
                raise GlowError(f"--data {path}: array '{name}' holds {bad} NaN or infinite value(s) "
                                f"of {array.size}; training needs finite data")


def _read_data(path: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The inputs and target of an .npz file (no pickled objects are loaded)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except FileNotFoundError:
        raise GlowError(f"--data {path}: no such file") from None
    except (OSError, ValueError) as err:
        raise GlowError(f"--data {path}: not a readable .npz archive ({err})") from None
    if TARGET_KEY not in arrays:
        raise GlowError(f"--data {path}: needs an array named '{TARGET_KEY}' besides the inputs")
    _check_finite(path, arrays)
    target = arrays.pop(TARGET_KEY)
    return arrays, target


def _batched_shapes(proto, inputs: dict[str, np.ndarray], batch: int) -> dict[str, list[int]]:
    """Each data input's shape with the batch dim bound to `batch`; GlowError for names the model lacks."""
    declared = {i.name for i in proto.graph.input} - {t.name for t in proto.graph.initializer}
    unknown = sorted(set(inputs) - declared)
    if unknown:
        raise GlowError(f"--data has array(s) {', '.join(unknown)} that are not model inputs "
                        f"({', '.join(sorted(declared))})")
    return {name: [batch, *array.shape[1:]] for name, array in inputs.items()}


def cmd_train(args: argparse.Namespace) -> int:
    from .. import api, zoo
    from ..training import LOSSES, Batches, DivergedError, SGDConfig, Trainer, export_onnx

    check_writable_file(args.o, "-o")
    inputs, target = _read_data(args.data)
    if args.loss == "cross_entropy":
        target = target.astype(np.int64).reshape(-1)
    proto, source = api.read_model(args.model)
    if args.random_weights is not None:
        proto = zoo.randomize_weights(proto, args.random_weights)
    batches = Batches(inputs, target, args.batch, seed=args.seed)
    network = api.load(proto, input_shapes=_batched_shapes(proto, inputs, args.batch))
    trainer = Trainer(network.function, args.loss, SGDConfig(args.lr, args.momentum, args.weight_decay),
                      backend=args.target)
    print(f"training {len(trainer.graph.parameters)} weights of {source} on {args.target}: "
          f"{len(batches)} batches of {args.batch} per epoch, loss {args.loss} (one of {', '.join(LOSSES)})")
    for epoch in range(args.epochs):
        start = time.perf_counter()
        try:
            with Progress(f"epoch {epoch + 1}/{args.epochs}", len(batches), "batch") as bar:
                loss = trainer.epoch(batches, lambda done, last: bar(done, label=f"loss {last:.4g}"))
        except DivergedError as err:
            raise GlowError(f"training diverged{err.where}: {err.what}; nothing written, "
                            f"try a smaller --lr than {args.lr:g}") from None
        print(f"epoch {epoch + 1}: mean loss {loss:.6g} ({time.perf_counter() - start:.2f}s)")
    trained = export_onnx(proto, trainer.freeze())
    try:
        atomic_write(args.o, trained.SerializeToString())
    except OSError as err:
        raise GlowError(f"-o {args.o}: cannot write ({err.strerror or err})") from None
    print(f"wrote {args.o}")
    return 0


def add_train_args(train: argparse.ArgumentParser) -> None:
    from ..training import LOSSES

    train.add_argument("model", help="an .onnx file or a bundled model name (see `glowsdk models`)")
    train.add_argument("--data", required=True, metavar="FILE.npz",
                       help=f"one array per model input and '{TARGET_KEY}' (labels or expected outputs)")
    train.add_argument("--epochs", type=options.positive_count, default=1)
    train.add_argument("--lr", type=learning_rate, default=0.01, help="learning rate > 0 (default 0.01)")
    train.add_argument("--momentum", type=momentum, default=0.0, help="SGD momentum in [0, 1) (default 0)")
    train.add_argument("--weight-decay", type=weight_decay, default=0.0, help="L2 decay >= 0 (default 0)")
    train.add_argument("--batch", type=options.positive_count, default=32, help="examples per step (default 32)")
    train.add_argument("--loss", choices=LOSSES, default="cross_entropy")
    train.add_argument("--target", default="interpreter", help="the backend to train on")
    train.add_argument("--seed", type=options.seed_number, default=0, help="seed of the batch shuffling")
    train.add_argument("--random-weights", type=options.seed_number, metavar="SEED",
                       help="start from seeded random weights instead of the model's")
    train.add_argument("-o", metavar="FILE", required=True, help="write the trained ONNX model to FILE")
    train.set_defaults(func=cmd_train)


SUBCOMMANDS = {"train": add_train_args}
"""The command's arguments and handler, added when it is the one run (main.COMMANDS)."""
