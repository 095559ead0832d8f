"""The untuned model set (scripts/export_bench_models.py) as benchmarks use it.

Every benchmark that claims something about networks glowsdk was not tuned on reads its models
through `ensure()`, which exports missing files (torch and torchvision needed, see the script)
and returns their manifest records, so that all benchmarks judge the same bytes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS_DIR = os.path.join(ROOT, "bench", "models")
EXPORTER = os.path.join(ROOT, "scripts", "export_bench_models.py")


def names() -> list[str]:
    """Every model of the set, in the exporter's order."""
    out = subprocess.run([sys.executable, EXPORTER, "--list"], check=True, capture_output=True, text=True)
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


def ensure(wanted: list[str] | None = None) -> dict[str, dict]:
    """The manifest records of `wanted` (default: the whole set), exporting any that are missing."""
    wanted = wanted or names()
    manifest_path = os.path.join(MODELS_DIR, "manifest.json")
    manifest = {}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
    missing = [n for n in wanted
               if n not in manifest or not os.path.exists(os.path.join(MODELS_DIR, manifest[n]["file"]))]
    if missing:
        subprocess.run([sys.executable, EXPORTER, "--only", ",".join(missing)], check=True)
        with open(manifest_path) as f:
            manifest = json.load(f)
    for n in wanted:
        manifest[n]["path"] = os.path.join(MODELS_DIR, manifest[n]["file"])
    return {n: manifest[n] for n in wanted}


def example_input(record: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """A seeded input for one model: standard normal floats, or token ids below the vocabulary."""
    rng = np.random.default_rng(seed)
    shape = tuple(record["shape"])
    if record["dtype"] == "int64":
        return {record["input"]: rng.integers(0, 1000, size=shape, dtype=np.int64)}
    return {record["input"]: rng.standard_normal(shape).astype(np.float32)}
