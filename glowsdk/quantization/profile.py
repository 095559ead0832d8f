"""Profiles: the numeric range of every value of a network, observed on calibration inputs (paper 4.2).

A profile is keyed by the names of the values of the lowered, optimised graph
(the graph after the post-lowering pipeline), which are the same every time the
same model is compiled with the same options for the same target.

Per value it keeps the element kind and shape, the number of elements seen, the
smallest and largest finite values, how many were NaN, +inf and -inf, and a
histogram of the finite ones (see `histogram.py`: a power-of-two grid whose
counts stay exact as the range grows).

The file is JSON, one value per line, versioned by `FORMAT` and `VERSION`:

    {"format": "glowsdk-profile", "version": 1, "glowsdk_version": "0.1.0",
     "model": {"source": "resnet50", "target": "interpreter", ...},
     "calibration": {"count": 8, "how": "random normal inputs, seed 0"},
     "histogram_bins": 2048,
     "values": [
      {"name": "n0", "node": "Conv", "elem": "float32", "shape": [1, 64, 112, 112],
       "count": 6422528, "min": -3.1, "max": 2.9, "nan": 0, "pos_inf": 0, "neg_inf": 0,
       "histogram": {"edge": -3.125, "width": 0.00390625, "counts": [2048 integers]}},
      ...]}

Bin i of a histogram covers [edge + i*width, edge + (i+1)*width); its counts add
up to count - nan - pos_inf - neg_inf. `min` and `max` are null when no finite
value was seen. Loading reads JSON only (never pickle) and reports the first
problem in one line naming the file and the key.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import GlowError
from ..files import atomic_write
from .histogram import DEFAULT_BINS, Histogram

FORMAT = "glowsdk-profile"
VERSION = 1


class ValueProfile:
    """The statistics of one value, accumulated over calibration runs."""

    def __init__(self, name: str, node: str, elem: str, shape: tuple[int, ...], bins: int = DEFAULT_BINS) -> None:
        self.name = name
        self.node = node  # the kind of the node producing it ("Placeholder" for a network input)
        self.elem = elem
        self.shape = tuple(shape)
        self.count = 0
        self.nan = 0
        self.pos_inf = 0
        self.neg_inf = 0
        self.histogram = Histogram(bins)

    @property
    def min(self) -> float | None:
        return self.histogram.low

    @property
    def max(self) -> float | None:
        return self.histogram.high

    @property
    def range(self) -> float:
        """max - min (0 when nothing finite was seen)."""
        return 0.0 if self.min is None else self.max - self.min

    def add(self, array: np.ndarray) -> None:
        """Account for one observed tensor of this value."""
        values = np.asarray(array).ravel()
        self.count += values.size
        finite = np.isfinite(values)
        if not finite.all():
            self.nan += int(np.isnan(values).sum())
            self.pos_inf += int(np.isposinf(values).sum())
            self.neg_inf += int(np.isneginf(values).sum())
            values = values[finite]
        self.histogram.add(values)

    def to_json(self) -> dict[str, Any]:
        hist = self.histogram
        return {"name": self.name, "node": self.node, "elem": self.elem, "shape": list(self.shape),
                "count": self.count, "min": self.min, "max": self.max,
                "nan": self.nan, "pos_inf": self.pos_inf, "neg_inf": self.neg_inf,
                "histogram": {"edge": hist.edge, "width": hist.width, "counts": hist.grid_counts().tolist()}}


@dataclass
class Profile:
    """The value profiles of one network; `model` and `calibration` say where they came from."""

    model: dict[str, Any]
    calibration: dict[str, Any]
    bins: int = DEFAULT_BINS
    values: dict[str, ValueProfile] = field(default_factory=dict)
    glowsdk_version: str = ""

    def __post_init__(self) -> None:
        if not self.glowsdk_version:
            from .. import __version__

            self.glowsdk_version = __version__

    def __getitem__(self, name: str) -> ValueProfile:
        return self.values[name]

    def __contains__(self, name: str) -> bool:
        return name in self.values

    def __len__(self) -> int:
        return len(self.values)

    def widest(self, n: int = 10) -> list[ValueProfile]:
        """The `n` values with the widest [min, max] ranges, widest first."""
        return sorted(self.values.values(), key=lambda v: -v.range)[:n]

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "glowsdk_version": self.glowsdk_version,
                "model": self.model, "calibration": self.calibration, "histogram_bins": self.bins,
                "values": [v.to_json() for v in self.values.values()]}


def format_profile(profile: Profile) -> str:
    """The profile's JSON text: the header indented, then one line per value."""
    payload = profile.to_json()
    values = [json.dumps(v, allow_nan=False) for v in payload.pop("values")]
    head = json.dumps(payload, indent=1, allow_nan=False)
    body = "[\n  " + ",\n  ".join(values) + "\n ]" if values else "[]"
    return f'{head[:-2]},\n "values": {body}\n}}\n'


def save_profile(profile: Profile, path: str | os.PathLike) -> None:
    """Write `profile` to `path` completely or not at all."""
    try:
        atomic_write(path, format_profile(profile))
    except OSError as err:
        raise GlowError(f"{os.fspath(path)}: cannot write the profile ({err.strerror or err})") from None


def load_profile(path: str | os.PathLike) -> Profile:
    """Read a profile file; GlowError naming the file and the offending key on any problem."""
    from .profile_reader import read_profile

    return read_profile(os.fspath(path))
