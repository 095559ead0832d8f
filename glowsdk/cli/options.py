"""The options and inputs the glowsdk commands share: argument types, model loading, .npy inputs."""
from __future__ import annotations

import argparse
import re
import sys
from typing import TYPE_CHECKING

from ..errors import GlowError
from ..files import load_npy
from ..progress import Progress
from ..table import parse_number

if TYPE_CHECKING:
    import numpy as np


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


def add_quantization_args(p: argparse.ArgumentParser, required: bool = False) -> None:
    """The options that quantize a model from a profile (`glowsdk profile` writes one)."""
    from ..quantization import CALIBRATIONS, SCHEMAS

    p.add_argument("--load-profile", metavar="FILE", required=required,
                   help="quantize to int8 with this profile (from `glowsdk profile`)")
    p.add_argument("--schema", choices=SCHEMAS, help="how a range maps to int8 (default asymmetric)")
    p.add_argument("--calibration", choices=CALIBRATIONS,
                   help="how the profile's histograms give each range (default minmax)")
    p.add_argument("--per-channel", action="store_true",
                   help="one scale per output channel for Conv filters and MatMul weights")
    p.add_argument("--keep-float", metavar="OP[,OP]",
                   help="node kinds (Conv, MatMul, Add, ...) or node names to keep in float")
    p.add_argument("--calibration-random", type=positive_count, metavar="N",
                   help="without --load-profile: profile on N seeded random inputs first (accuracy unknown); "
                        f"targets that run only int8 (npu) do this with N={RANDOM_CALIBRATION_DEFAULT} unasked")


RANDOM_CALIBRATION_DEFAULT = 8
"""Random calibration samples for a target that runs only quantized code when no profile is given."""


def quantization_config(args: argparse.Namespace, network):
    """The QuantizationConfig the options ask for, or None; GlowError for options given without a profile.

    Without a profile, `--calibration-random N` (or a target whose backend requires
    quantization) profiles `network` on seeded random inputs first, with a warning on
    stderr that accuracy is then unknown.
    """
    from ..backends.registry import get_backend
    from ..quantization import QuantizationConfig, calibration_random, collect_profile, load_profile

    count = args.calibration_random
    if args.load_profile is None and not count and get_backend(args.target).requires_quantization:
        count = RANDOM_CALIBRATION_DEFAULT
    if args.load_profile is not None:
        profile = load_profile(args.load_profile)
    elif count:
        print(f"warning: quantizing with a profile of {count} random inputs (no --load-profile): "
              f"accuracy is unknown", file=sys.stderr)
        with Progress("calibrating", count, "sample") as bar:
            profile = collect_profile(network, calibration_random(network, count), progress=bar)
    else:
        given = [flag for flag, value in (("--schema", args.schema), ("--calibration", args.calibration),
                                          ("--per-channel", args.per_channel or None),
                                          ("--keep-float", args.keep_float)) if value is not None]
        if given:
            raise GlowError(f"{given[0]} needs --load-profile FILE (quantization starts from a profile)")
        return None
    keep = frozenset(k.strip() for k in (args.keep_float or "").split(",") if k.strip())
    return QuantizationConfig(profile, schema=args.schema or "asymmetric", calibration=args.calibration or "minmax",
                              per_channel=args.per_channel, keep_float=keep)


def check_config(text: str) -> None:
    """GlowError (isa's ConfigError) now if `--config` names no preset and no readable configuration file."""
    from isa.config import resolve_config

    resolve_config(text)


def add_fallback_args(p: argparse.ArgumentParser) -> None:
    """--fallback and --backend-opt: where what the target cannot run goes, and target-specific options."""
    p.add_argument("--fallback", default="cpu", metavar="DEVICE",
                   help="run the nodes the target cannot on this backend (default cpu; interpreter; "
                        "none refuses them)")
    p.add_argument("--backend-opt", action="append", default=[], metavar="KEY=VALUE",
                   help="a backend-specific option (see `glowsdk backends`), checked by the backend")


def parse_backend_opt(text: str) -> tuple[str, object]:
    """KEY=VALUE with the value read as a bool, an int, a float or else a string."""
    key, sep, raw = text.partition("=")
    if not key or not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        raise GlowError(f"--backend-opt '{text}': expected KEY=VALUE (e.g. threads=2)")
    if raw.lower() in ("true", "false"):
        return key, raw.lower() == "true"
    number = parse_number(raw)
    return key, raw if number is None else number


def fallback_name(args: argparse.Namespace) -> str | None:
    """The --fallback backend, None for `none`."""
    return None if args.fallback == "none" else args.fallback


def load_network(args: argparse.Namespace):
    from .. import api

    shapes = dict(parse_shape(s) for s in args.input_shape)
    with Progress("loading", None, "") as bar:
        bar.label(args.model)
        return api.load(args.model, input_shapes=shapes, batch=args.batch, random_weights=args.random_weights)
