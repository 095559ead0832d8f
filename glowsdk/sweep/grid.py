"""A sweep's grid file: a base configuration and, under `[grid]`, lists of values to cross.

```toml
preset = "default"                 # the base (optional, default "default"); fixed parameters may follow
[grid]
array_rows = [16, 32]
dram_bytes_per_cycle = [16, 32]
```

Every point is built and validated when the file is read (by `isa.config`, which owns the parameters and
their ranges), so a bad value stops the sweep before anything runs or is written, with one line naming
the file and the key.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib

from isa.config import PARAMETERS, ArchConfig, config_from_mapping, config_hash

from ..errors import GlowError
from ..files import read_text_file

_KNOWN = {p.name for p in PARAMETERS}
MAX_POINTS = 100_000
"""More points than anyone runs: a grid past this is a typo (a list pasted twice), refused before building."""


@dataclass(frozen=True)
class Point:
    """One configuration of the grid: its swept values (in the grid's order) and the configuration they make."""

    values: tuple[tuple[str, Any], ...]
    config: ArchConfig

    @property
    def key(self) -> str:
        """What a result is filed under: the configuration's hash, the machine whatever the grid calls it."""
        return config_hash(self.config)[:16]

    @property
    def settings(self) -> dict[str, Any]:
        """The swept parameters as the configuration holds them (sizes in bytes: '256 KiB' sorts as a number)."""
        return {name: getattr(self.config, name) for name, _ in self.values}


@dataclass(frozen=True)
class Grid:
    """The parsed grid file: the swept parameter names, the points, and the text (recorded with the results)."""

    parameters: tuple[str, ...]
    points: tuple[Point, ...]
    text: str


def _point_name(values: tuple[tuple[str, Any], ...]) -> str:
    return ",".join(f"{name}={value}" for name, value in values)


def load_grid(path: str | Path) -> Grid:
    """Read and validate a grid file; GlowError naming the file and the key on any problem."""
    where = str(path)
    text = read_text_file(path, "grid file", "a grid is TOML", GlowError)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GlowError(f"{where}: not valid TOML: {exc}") from None
    except (ValueError, RecursionError):  # an integer of over 4300 digits, arrays nested too deeply
        raise GlowError(f"{where}: not a usable TOML file (values too large or nested too deeply)") from None
    grid = data.pop("grid", None)
    if not isinstance(grid, dict) or not grid:
        raise GlowError(f"{where}: key 'grid': expected a [grid] table with at least one parameter, "
                        f"each a list of values")
    base = dict(data)
    for key in base:
        if key not in _KNOWN and key not in ("preset", "name"):
            raise GlowError(f"{where}: unknown key {key!r} (known: preset, name, {', '.join(sorted(_KNOWN))})")
    config_from_mapping(base, where)  # the base alone: its errors name the top-level key
    axes = []
    count = 1
    for key, values in grid.items():
        if key not in _KNOWN:
            raise GlowError(f"{where}: unknown key 'grid.{key}' (parameters: {', '.join(sorted(_KNOWN))})")
        if key in base:
            raise GlowError(f"{where}: key 'grid.{key}' is also fixed at the top level: give it once")
        if not isinstance(values, list) or not values:
            raise GlowError(f"{where}: key 'grid.{key}': expected a non-empty list of values")
        if len(set(map(repr, values))) != len(values):
            raise GlowError(f"{where}: key 'grid.{key}': a value is listed twice")
        count *= len(values)
        if count > MAX_POINTS:
            raise GlowError(f"{where}: key 'grid.{key}': the grid has over {MAX_POINTS:,} points")
        axes.append([(key, value) for value in values])
    points = []
    for values in itertools.product(*axes):
        name = _point_name(values)
        config = config_from_mapping({**base, "name": name, **dict(values)}, f"{where} [grid] point {name}")
        points.append(Point(tuple(values), config))
    hashes = {}
    for point in points:  # '256 KiB' and 262144 are one machine: running it twice would say nothing
        if point.key in hashes:
            raise GlowError(f"{where}: points {hashes[point.key]} and {_point_name(point.values)} are the same "
                            f"configuration")
        hashes[point.key] = _point_name(point.values)
    return Grid(tuple(grid), tuple(points), text)
