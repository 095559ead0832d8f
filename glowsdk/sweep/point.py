"""One point of a sweep: compile a model for one configuration, simulate it, and keep the figures.

This is all an executor runs, in whatever process or machine it has; it needs only its arguments (the
model's description and its quantization, prepared once by the caller) and returns one plain row. It never
raises: a point that fails records its one-line error and the sweep goes on.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

from sim.binding import run_binary

from .. import api
from ..backends.npu.backend import NpuFunction
from ..backends.registry import get_backend
from ..compiler.backend import CompileOptions
from ..compiler.pipeline import compile_function
from ..errors import GlowError
from ..quantization import QuantizationConfig
from .grid import Point

METRICS = ("cycles", "latency_s", "utilisation", "dram_read_bytes", "dram_written_bytes", "energy_uj",
           "pj_per_mac", "area_mm2")
"""What a point measures; the same whichever executor ran it (compile and simulation are deterministic)."""
TIMINGS = ("compile_s", "simulate_s")
"""Wall seconds, which depend on the machine and its load: never compared across runs."""


@dataclass(frozen=True)
class ModelSpec:
    """A model as the sweep loads it: the options `glowsdk run` takes."""

    name: str
    batch: int | None = None
    random_weights: int | None = None


@dataclass(frozen=True)
class PreparedModel:
    """A model and the quantization every point compiles it with (calibrated once, not once per point)."""

    spec: ModelSpec
    quantization: QuantizationConfig


@functools.lru_cache(maxsize=4)
def load_model(spec: ModelSpec):
    """The imported model, once per worker process (the compile works on a copy)."""
    return api.load(spec.name, batch=spec.batch, random_weights=spec.random_weights)


def run_point(model: PreparedModel, point: Point) -> dict[str, Any]:
    """The row of (model, point): its figures, or its error; `status` says which."""
    row: dict[str, Any] = {"model": model.spec.name, "point": point.key, **point.settings}
    try:
        row.update(_measure(model, point))
        row["status"], row["error"] = "ok", ""
    except GlowError as err:
        row["status"], row["error"] = "error", str(err)
    except Exception as err:  # a bug on one point must not end the sweep; the row names it as one
        row["status"], row["error"] = "error", f"internal error: {type(err).__name__}: {err}"
    return row


def _measure(model: PreparedModel, point: Point) -> dict[str, Any]:
    network = load_model(model.spec)
    start = time.perf_counter()
    # no fallback: a point whose model does not run whole on the NPU has no NPU figures to compare
    compiled = compile_function(network.function, get_backend("npu"), CompileOptions(extra={"config": point.config}),
                                quantization=model.quantization)
    compiled_at = time.perf_counter()
    if not isinstance(compiled, NpuFunction):
        raise GlowError(f"{model.spec.name} did not compile to one NPU binary")
    result = run_binary(compiled.binary, compiled.config, {}).result
    simulated_at = time.perf_counter()
    total = result.total_row()
    architect = result.architect()
    return {"cycles": result.cycles, "latency_s": result.seconds, "utilisation": total.utilisation,
            "dram_read_bytes": total.dram_read, "dram_written_bytes": total.dram_written,
            "energy_uj": architect["energy_pj"]["total"] / 1e6, "pj_per_mac": architect["pj_per_mac"],
            "area_mm2": architect["area_mm2"]["total"],
            "compile_s": compiled_at - start, "simulate_s": simulated_at - compiled_at}
