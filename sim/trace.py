"""A run as Chrome-trace JSON (opens in Perfetto and chrome://tracing): a track per unit, counters.

Each unit is a thread of one process: an 'X' (complete) event per instruction, named by its
mnemonic, with the instruction's index, layer and assembly text as arguments. Two counter tracks
sample the run in up to `SAMPLES` buckets: DRAM bandwidth (bytes per cycle read and written) and
live SRAM (bytes of scratchpad and accumulator holding data still to be read). Timestamps are in
microseconds of the configuration's clock, as the format requires.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from isa.asm import format_instr
from isa.schema import Engine

from .errors import SimInputError
from .results import UNIT_NAMES, SimResult
from .steps import ENGINES

SAMPLES = 2000
TRACKS = (Engine.CONTROL, *ENGINES)


def _dram_rates(groups: list[tuple[int, int, int, bool]], edges: np.ndarray, write: bool) -> np.ndarray:
    """Bytes per cycle in each bucket between `edges`, spreading each request group evenly over its data phase."""
    chosen = [(s, e, b) for s, e, b, w in groups if w == write and e > s]
    if not chosen:
        return np.zeros(len(edges) - 1)
    start, end, size = (np.array(c, np.float64) for c in zip(*chosen))
    rate = size / (end - start)
    # Bytes moved by time t: the integral of the summed rates of the groups under way.
    points = np.concatenate((start, end))
    slope_change = np.concatenate((rate, -rate))
    order = np.argsort(points, kind="stable")
    points, slope = points[order], np.cumsum(slope_change[order])
    moved = np.concatenate(([0.0], np.cumsum(slope[:-1] * np.diff(points))))
    total = np.interp(edges, points, moved)
    return np.diff(total) / np.diff(edges)


def _levels(times: np.ndarray, level: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The highest value of a step function within each bucket between `edges`."""
    at_edge = np.searchsorted(times, edges[:-1], "right") - 1
    out = np.where(at_edge >= 0, level[np.maximum(at_edge, 0)], 0).astype(np.float64)
    inside = np.searchsorted(edges, times, "right") - 1
    keep = (inside >= 0) & (inside < len(out))
    np.maximum.at(out, inside[keep], level[keep])
    return out


def chrome_trace(result: SimResult) -> dict[str, Any]:
    """The trace as a JSON-ready object."""
    us_per_cycle = 1e-3 / result.config.clock_ghz
    tids = {unit: k for k, unit in enumerate(TRACKS)}
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": 0, "name": "process_name", "args": {"name": f"NPU '{result.config.name}'"}}]
    for unit, tid in tids.items():
        events.append({"ph": "M", "pid": 0, "tid": tid, "name": "thread_name", "args": {"name": UNIT_NAMES[unit]}})
        events.append({"ph": "M", "pid": 0, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}})
    start, end = result.timeline.start, result.timeline.end
    for step in result.steps:
        args = {"index": step.index, "asm": format_instr(step.instr)}
        if step.layer:
            args["layer"] = step.layer
        events.append({"ph": "X", "pid": 0, "tid": tids[step.engine], "name": step.mnemonic, "cat": step.engine.value,
                       "ts": int(start[step.index]) * us_per_cycle,
                       "dur": int(end[step.index] - start[step.index]) * us_per_cycle, "args": args})
    cycles = max(result.cycles, 1)
    edges = np.linspace(0, cycles, min(SAMPLES, cycles) + 1)
    reads = _dram_rates(result.timeline.dram_groups, edges, write=False)
    writes = _dram_rates(result.timeline.dram_groups, edges, write=True)
    usage = result.timeline.usage
    live = {memory: _levels(u.times, u.live_bytes, edges) for memory, u in usage.items()}
    for k in range(len(edges) - 1):
        ts = float(edges[k]) * us_per_cycle
        events.append({"ph": "C", "pid": 0, "name": "DRAM bandwidth (B/cycle)", "ts": ts,
                       "args": {"read": round(float(reads[k]), 3), "write": round(float(writes[k]), 3)}})
        events.append({"ph": "C", "pid": 0, "name": "SRAM live bytes", "ts": ts,
                       "args": {memory: int(values[k]) for memory, values in live.items()}})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"config": result.config.name, "cycles": result.cycles}}


def write_trace(result: SimResult, path: str | Path) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(chrome_trace(result), f, separators=(",", ":"))
    except OSError as err:
        raise SimInputError(f"--trace {path}: cannot write ({err.strerror or err})") from None
