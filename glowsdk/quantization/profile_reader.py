"""Reading a profile file: JSON only, every key checked, the first problem in one line.

Messages name the file and the key, e.g.
`profile.json: values[3] ('n1/max2'): missing key 'max'`.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any

import numpy as np

from ..errors import GlowError
from .histogram import Histogram
from .profile import FORMAT, READABLE_VERSIONS, Profile, ValueProfile

_HEADER_KEYS = ("format", "version", "glowsdk_version", "model", "calibration", "histogram_bins", "values")
_GRAPH_KEYS = ("fingerprint",)
"""Version 2 adds "graph" to the header (version 1 files have none)."""
_VALUE_KEYS = ("name", "node", "elem", "shape", "count", "min", "max", "nan", "pos_inf", "neg_inf", "histogram")
_HISTOGRAM_KEYS = ("edge", "width", "counts")
_INT64_MAX = (1 << 63) - 1


class _Reader:
    """Checks the parts of one file, naming `path` and the key being read in every error."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, where: str, message: str) -> GlowError:
        return GlowError(f"{self.path}: {where}: {message}" if where else f"{self.path}: {message}")

    def keys(self, obj: Any, keys: tuple[str, ...], where: str) -> dict:
        if not isinstance(obj, dict):
            raise self.fail(where, f"expected a JSON object, got {_json_kind(obj)}")
        for key in keys:
            if key not in obj:
                raise self.fail(where, f"missing key '{key}'")
        return obj

    def integer(self, value: Any, where: str, minimum: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(where, f"expected an integer, got {_json_kind(value)}")
        if value < minimum:
            raise self.fail(where, f"expected an integer of at least {minimum}, got {value}")
        if value > _INT64_MAX:  # counts are held in int64 arrays
            raise self.fail(where, f"expected an integer of at most {_INT64_MAX}, got one of {value.bit_length()} bits")
        return value

    def number(self, value: Any, where: str, optional: bool = False) -> float | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(where, f"expected a number{' or null' if optional else ''}, got {_json_kind(value)}")
        try:
            return float(value)
        except OverflowError:  # an integer of over 308 digits
            raise self.fail(where, f"the integer of {value.bit_length()} bits is past the range of a double") from None

    def string(self, value: Any, where: str) -> str:
        if not isinstance(value, str):
            raise self.fail(where, f"expected a string, got {_json_kind(value)}")
        return value


def _json_kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "true/false", type(None): "null",
             int: "an integer", float: "a number"}
    return names.get(type(value), type(value).__name__)


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def load_profile(path: str | os.PathLike) -> Profile:
    """The Profile in the file at `path` (see `profile.py` for the format); GlowError naming the file and the
    offending key on any problem."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise GlowError(f"{path}: no such profile file") from None
    except IsADirectoryError:
        raise GlowError(f"{path}: is a directory, not a profile file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise GlowError(f"{path}: cannot read the profile ({err})") from None
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as err:
        raise GlowError(f"{path}: not valid JSON (line {err.lineno} column {err.colno}: {err.msg})") from None
    except RecursionError:
        raise GlowError(f"{path}: not a profile (JSON nested too deeply)") from None
    except ValueError as err:
        raise GlowError(f"{path}: not valid JSON ({err})") from None
    reader = _Reader(path)
    if not isinstance(data, dict):
        raise reader.fail("", f"expected a JSON object, got {_json_kind(data)}")
    if data.get("format") != FORMAT:
        raise reader.fail("format", f"expected '{FORMAT}', got {json.dumps(data.get('format'))}: not a profile")
    version = data.get("version")
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise reader.fail("version", f"profile format version {json.dumps(version)}; this glowsdk reads "
                                     f"versions {', '.join(map(str, READABLE_VERSIONS))}")
    reader.keys(data, _HEADER_KEYS + (("graph",) if version >= 2 else ()), "")
    for key in ("model", "calibration"):
        reader.keys(data[key], (), key)
    bins = reader.integer(data["histogram_bins"], "histogram_bins", minimum=2)
    if not isinstance(data["values"], list):
        raise reader.fail("values", f"expected an array, got {_json_kind(data['values'])}")
    profile = Profile(model=data["model"], calibration=data["calibration"], bins=bins,
                      glowsdk_version=reader.string(data["glowsdk_version"], "glowsdk_version"))
    for i, entry in enumerate(data["values"]):
        value = _read_value(reader, entry, f"values[{i}]", bins)
        if value.name in profile.values:
            raise reader.fail(f"values[{i}]", f"value {value.name!r} appears twice")
        profile.values[value.name] = value
    if version >= 2:
        graph = reader.keys(data["graph"], _GRAPH_KEYS, "graph")
        recorded = reader.string(graph["fingerprint"], "graph.fingerprint")
        if recorded != profile.fingerprint:
            raise reader.fail("graph.fingerprint", f"{recorded[:12]}... is not the fingerprint of the graph its "
                                                   f"values describe ({profile.fingerprint[:12]}...): the file was "
                                                   f"edited or assembled from several profiles")
    return profile


def _read_value(reader: _Reader, entry: Any, where: str, bins: int) -> ValueProfile:
    reader.keys(entry, ("name",), where)
    name = reader.string(entry["name"], f"{where}.name")
    where = f"{where} ({name!r})"  # repr: a name's line breaks stay escaped
    reader.keys(entry, _VALUE_KEYS, where)
    shape = entry["shape"]
    if not isinstance(shape, list):
        raise reader.fail(f"{where}.shape", f"expected an array, got {_json_kind(shape)}")
    shape = tuple(reader.integer(d, f"{where}.shape") for d in shape)
    node = reader.string(entry["node"], f"{where}.node")
    elem = reader.string(entry["elem"], f"{where}.elem")
    count = reader.integer(entry["count"], f"{where}.count")
    nan, pos_inf, neg_inf = (reader.integer(entry[k], f"{where}.{k}") for k in ("nan", "pos_inf", "neg_inf"))
    low = reader.number(entry["min"], f"{where}.min", optional=True)
    high = reader.number(entry["max"], f"{where}.max", optional=True)
    if (low is None) != (high is None) or (low is not None and low > high):
        raise reader.fail(where, f"min {json.dumps(low)} and max {json.dumps(high)} do not form a range")
    # The histogram first: it checks `bins` against the counts in the file before a ValueProfile allocates them.
    histogram = _read_histogram(reader, entry["histogram"], f"{where}.histogram", bins, low, high)
    value = ValueProfile(name, node, elem, shape, bins)
    value.count, value.nan, value.pos_inf, value.neg_inf = count, nan, pos_inf, neg_inf
    value.histogram = histogram
    finite = value.count - value.nan - value.pos_inf - value.neg_inf
    if value.histogram.total != finite:
        raise reader.fail(f"{where}.histogram.counts",
                          f"add up to {value.histogram.total}, but count - nan - pos_inf - neg_inf is {finite}")
    if (finite == 0) != (low is None):
        raise reader.fail(where, "min and max must be null exactly when no finite value was seen")
    return value


def _read_histogram(reader: _Reader, entry: Any, where: str, bins: int, low: float | None,
                    high: float | None) -> Histogram:
    reader.keys(entry, _HISTOGRAM_KEYS, where)
    edge = reader.number(entry["edge"], f"{where}.edge")
    width = reader.number(entry["width"], f"{where}.width")
    counts = entry["counts"]
    if not isinstance(counts, list) or len(counts) != bins:
        got = f"{len(counts)} entries" if isinstance(counts, list) else _json_kind(counts)
        raise reader.fail(f"{where}.counts", f"expected an array of histogram_bins = {bins} counts, got {got}")
    counts = np.array([reader.integer(c, f"{where}.counts") for c in counts], dtype=np.int64)
    try:
        hist = Histogram.from_grid(edge, width, counts, low, high)
    except ValueError as err:
        raise reader.fail(where, str(err)) from None
    if low is not None and not (edge <= low and high < edge + bins * width and math.isfinite(edge + bins * width)):
        raise reader.fail(where, f"bins [{edge!r}, {edge + bins * width!r}) do not cover [min, max] = "
                                 f"[{low!r}, {high!r}]")
    return hist
