"""Profiles: the numeric range of every value of a network, observed on calibration inputs (paper 4.2).

A profile is keyed by the names of the values of the lowered, optimised graph
(the graph after the post-lowering pipeline), which are the same every time the
same model is compiled with the same options for the same target.

Per value it keeps the element kind and shape, the number of elements seen, the
smallest and largest finite values, how many were NaN, +inf and -inf, and a
histogram of the finite ones (see `histogram.py`: a power-of-two grid whose
counts stay exact as the range grows).

The file is JSON, one value per line, versioned by `FORMAT` and `VERSION`:

    {"format": "glowsdk-profile", "version": 2, "glowsdk_version": "0.1.0",
     "model": {"source": "resnet50", "target": "interpreter", ...},
     "calibration": {"count": 8, "how": "random normal inputs, seed 0"},
     "graph": {"fingerprint": "3f2a...(64 hex digits)"},
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

The graph fingerprint says which graph the profile was made for, so that a profile of
another model is refused rather than applied wherever its value names (`n3`) happen to
match: a SHA-256 over each value's name, producing kind, element kind and rank (the
lowered graph the profile was collected on). Shapes beyond the rank are left out: a
profile taken at one batch size quantizes the model at another. Quantizing checks it
(`check_profile_graph`): an equal fingerprint is the same graph; otherwise the values are
compared by the input or imported node they come from (`n5`, `n5/div3`), and each must
agree, except where one target keeps a node whole (`n5`, a Softmax) that the other lowers
(`n5/exp3`, ...), which is how targets' graphs of one model differ. Version 1 files have no
"graph" key; their fingerprint is computed from their values (the same records), so they
are checked alike, with no warning.
"""
from __future__ import annotations

import hashlib
import json
import re
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import GlowError
from ..files import atomic_write
from ..graph.function import Function
from ..version import __version__
from .histogram import DEFAULT_BINS, Histogram
from .instrument import profiled_values

FORMAT = "glowsdk-profile"
VERSION = 2
READABLE_VERSIONS = (1, 2)
"""Version 1: no "graph" key (its fingerprint is computed from the values)."""


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
            self.glowsdk_version = __version__

    def __getitem__(self, name: str) -> ValueProfile:
        return self.values[name]

    def __contains__(self, name: str) -> bool:
        return name in self.values

    def __len__(self) -> int:
        return len(self.values)

    def signature(self) -> Signature:
        """What the profile records of each value of the graph it was made for."""
        return {v.name: (v.node, v.elem, len(v.shape)) for v in self.values.values()}

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the graph the profile was made for (see the module docstring)."""
        return graph_fingerprint(self.signature())

    def widest(self, n: int = 10) -> list[ValueProfile]:
        """The `n` values with the widest [min, max] ranges, widest first."""
        return sorted(self.values.values(), key=lambda v: -v.range)[:n]

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "glowsdk_version": self.glowsdk_version,
                "model": self.model, "calibration": self.calibration, "graph": {"fingerprint": self.fingerprint},
                "histogram_bins": self.bins, "values": [v.to_json() for v in self.values.values()]}


Signature = dict[str, tuple[str, str, int]]
"""Value name -> (producing node kind, "Placeholder" for an input; element kind; rank)."""


def graph_signature(function: Function) -> Signature:
    """What a profile of `function` (lowered, optimised) would record of its values: the float inputs
    and every profiled value."""
    found: Signature = {p.name: ("Placeholder", p.type.elem.value, len(p.type.shape))
                        for p in function.module.placeholders.values() if not p.is_output and p.type.elem.is_float}
    found.update({v.name: (v.node.kind, v.type.elem.value, len(v.type.shape)) for v in profiled_values(function)})
    return found


_LOWERED = re.compile(r"(/[a-z_]+\d+|\.[A-Za-z_]\w*)$")
"""A suffix lowering or a multi-result node adds to a name: `/div3` (Lowerer names), `.y` (a result)."""


def _origin(name: str, kind: str) -> str:
    """The input, or the imported node, a value comes from: `n5` for `n5`, `n5/div3` and `n5.y`; ONNX names
    hold slashes of their own (`/layers.0/Add`), so only the suffixes lowering adds are taken off."""
    if kind == "Placeholder":
        return name
    while (stripped := _LOWERED.sub("", name)) != name:
        name = stripped
    return name


def graph_fingerprint(signature: Signature) -> str:
    """SHA-256 over every value's name, producing kind, element kind and rank, in name order."""
    rows = sorted([name, kind, elem, rank] for name, (kind, elem, rank) in signature.items())
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def _by_origin(signature: Signature) -> dict[str, Signature]:
    grouped: dict[str, Signature] = {}
    for name, entry in signature.items():
        grouped.setdefault(_origin(name, entry[0]), {})[name] = entry
    return grouped


def _describe(entry: tuple[str, str, int]) -> str:
    kind, elem, rank = entry
    return f"{'an input' if kind == 'Placeholder' else kind} of {elem}, rank {rank}"


def _names(values: Signature) -> str:
    names = sorted(values)
    return ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")


def _difference(origin: str, here: Signature, there: Signature) -> str | None:
    """How the values from one input or imported node differ between the graph and the profile, or None
    when they agree: every value both sides hold is alike, and either one side keeps the node whole where
    the other lowers it, or both lower it into partly the same values (targets differ in what they keep
    below it: an LSTM's gates kept as Sigmoid on one, lowered on another)."""
    if here == there:
        return None
    if not there:
        return f"'{origin}' is in this graph and not in the profile"
    if not here:
        return f"'{origin}' is in the profile and not in this graph"
    for name in here.keys() & there.keys():
        if here[name] != there[name]:
            return f"value '{name}' is {_describe(here[name])} here, {_describe(there[name])} in the profile"
    # a node kept whole holds a value of its own name (`name.result` and the like for several results)
    kept_here, kept_there = (any(name == origin or name.startswith(origin + ".") for name in side)
                             for side in (here, there))
    if kept_here != kept_there or here.keys() & there.keys():
        return None  # one target keeps the node whole, or both lower it, differently in part: shared values agree
    return f"'{origin}' is {_names(here)} here, {_names(there)} in the profile"


def check_profile_graph(profile: Profile, function: Function) -> None:
    """GlowError (one line) if `profile` was made for another graph than `function` (lowered, optimised,
    about to be quantized). A profile naming none of its values is left to the quantizer, which says so."""
    here = graph_signature(function)
    mine, made_for = graph_fingerprint(here), profile.fingerprint
    if mine == made_for or not here.keys() & profile.values.keys():
        return
    ours, theirs = _by_origin(here), _by_origin(profile.signature())
    for origin in [*ours, *(o for o in theirs if o not in ours)]:
        why = _difference(origin, ours.get(origin, {}), theirs.get(origin, {}))
        if why is not None:
            raise GlowError(f"the profile (of {profile.model.get('source', 'a model')}) was made for another graph "
                            f"(fingerprint {made_for[:12]}, this graph's {mine[:12]}): {why}; profile this model "
                            f"with these options")


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

