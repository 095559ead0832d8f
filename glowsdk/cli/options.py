"""The options and inputs the glowsdk commands share: argument types, model loading, .npy inputs."""
from __future__ import annotations

import argparse
import re

import numpy as np

from ..errors import GlowError
from ..files import load_npy


def parse_shape(text: str) -> tuple[str, tuple[int, ...]]:
    name, _, dims = text.rpartition("=")
    if not name or not re.fullmatch(r"\d+(x\d+)*|", dims):
        raise GlowError(f"--input-shape '{text}': expected NAME=DxDx... (e.g. data=1x3x224x224)")
    return name, tuple(int(d) for d in dims.split("x")) if dims else ()


def load_input(text: str) -> tuple[str, np.ndarray]:
    name, _, path = text.rpartition("=")
    if not name or not path:
        raise GlowError(f"--input '{text}': expected NAME=file.npy")
    return name, load_npy(path, f"--input {name}: ")


def seed_number(text: str) -> int:
    """argparse type: a seed is a whole number from 0 (numpy's generators take no negative seed)."""
    if not re.fullmatch(r"\d+", text.strip()):
        raise argparse.ArgumentTypeError(f"'{text}' is not a seed (a whole number >= 0)")
    return int(text)


def positive_count(text: str) -> int:
    """argparse type: a count of at least 1."""
    if not re.fullmatch(r"\d+", text.strip()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number >= 1")
    return int(text)


def add_model_args(p: argparse.ArgumentParser, optional: bool = False) -> None:
    p.add_argument("model", nargs="?" if optional else None,
                   help="an .onnx file or a bundled model name (see `glowsdk models`)")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=DxD...",
                   help="bind the shape of an input with symbolic dims")
    p.add_argument("--batch", type=positive_count, help="re-batch the model to N (bundled-style models)")
    p.add_argument("--random-weights", type=seed_number, metavar="SEED",
                   help="replace float weights with seeded random ones (the bundled models' are constant)")


def load_network(args: argparse.Namespace):
    from .. import api

    shapes = dict(parse_shape(s) for s in args.input_shape)
    return api.load(args.model, input_shapes=shapes, batch=args.batch, random_weights=args.random_weights)
