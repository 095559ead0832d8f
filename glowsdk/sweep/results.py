"""A sweep's results on disk: `results.csv`, one row per (model, point), appended as points finish.

Each row is flushed when it is written, so a sweep that is killed keeps every point it finished; `--resume`
reads them back (a last line cut short by the kill is dropped) and runs only the rest. `sweep.json` records
what the sweep is (models, their options, the grid file), so resuming a different sweep into the same
folder is refused instead of mixing two sweeps in one table.
"""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any, Iterable

from ..errors import GlowError
from ..files import write_text
from ..table import parse_number
from .point import METRICS, TIMINGS

RESULTS, SPEC, PARQUET = "results.csv", "sweep.json", "results.parquet"


def columns(parameters: Iterable[str]) -> list[str]:
    """The CSV header: who, the swept values, the outcome, the figures, the wall times."""
    return ["model", "point", *parameters, "status", "error", *METRICS, *TIMINGS]


def _cell(value: Any) -> str:
    return "" if value is None else repr(value) if isinstance(value, float) else str(value)  # repr: exact round trip


class ResultsFile:
    """The open results.csv of a sweep in `folder`."""

    def __init__(self, folder: str | Path, spec: dict[str, Any], parameters: Iterable[str], resume: bool) -> None:
        self.folder = Path(folder)
        self.path = self.folder / RESULTS
        self.columns = columns(parameters)
        self.done: dict[tuple[str, str], dict[str, str]] = {}
        spec_path = self.folder / SPEC
        if self.path.exists() and not resume:
            raise GlowError(f"-o {folder}: holds a sweep's {RESULTS} already: --resume continues it, "
                            f"or give another folder")
        if resume and self.path.exists():
            recorded = _read_spec(spec_path)
            if recorded != spec:
                raise GlowError(f"--resume: {spec_path} records another sweep (models, options or grid differ): "
                                f"give another folder")
            self.done = self._read()
        else:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_text(str(spec_path), json.dumps(spec, indent=1, sort_keys=True) + "\n", "-o")
            with open(self.path, "w", encoding="utf-8", newline="") as out:
                csv.writer(out, lineterminator="\n").writerow(self.columns)
        self._out = open(self.path, "a", encoding="utf-8", newline="")
        self._writer = csv.writer(self._out, lineterminator="\n")

    def _read(self) -> dict[tuple[str, str], dict[str, str]]:
        """The finished rows, after dropping a last line the kill cut short."""
        data = self.path.read_bytes()
        if not data.endswith(b"\n"):
            with open(self.path, "r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)
        with open(self.path, encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames != self.columns:
                raise GlowError(f"--resume: {self.path} has other columns than this sweep's: give another folder")
            return {(row["model"], row["point"]): row for row in reader}

    def write(self, row: dict[str, Any]) -> None:
        self._writer.writerow([_cell(row.get(c)) for c in self.columns])
        self._out.flush()
        os.fsync(self._out.fileno())

    def close(self) -> None:
        self._out.close()


def _read_spec(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise GlowError(f"--resume: {path} is missing or unreadable: give another folder") from None


def read_rows(folder: str | Path) -> list[dict[str, Any]]:
    """results.csv as rows with numbers as numbers (the report and the Pareto table read these)."""
    with open(Path(folder) / RESULTS, encoding="utf-8", newline="") as f:
        return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _number(text: str) -> Any:
    number = parse_number(text)
    return number if number is not None or text == "" else text


def write_parquet(folder: str | Path) -> Path | None:
    """results.parquet beside the CSV when pyarrow is installed (it is not a dependency), else None."""
    try:
        from pyarrow import csv as pacsv
        from pyarrow import parquet
    except ImportError:
        return None
    path = Path(folder) / PARQUET
    parquet.write_table(pacsv.read_csv(Path(folder) / RESULTS), path)
    return path
