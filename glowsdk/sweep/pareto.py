"""The Pareto front of a sweep: the points no other point beats on latency, energy and area at once.

Per model, a point's figures are its own; over all models (the aggregate), a point's latency and energy are
their geometric means over the models (so no one model's scale dominates), and it counts only if it ran
every model.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

OBJECTIVES = ("latency_s", "energy_uj", "area_mm2")
"""What an architect minimises, in this order in every table."""
ALL_MODELS = "(all models)"


def _dominates(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a[k] <= b[k] for k in OBJECTIVES) and any(a[k] < b[k] for k in OBJECTIVES)


def front(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows no other row dominates, fastest first (ties broken by the point's key, so the order is stable)."""
    best = [r for r in rows if not any(_dominates(o, r) for o in rows)]
    return sorted(best, key=lambda r: (*(r[k] for k in OBJECTIVES), r["point"]))


def aggregate(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per point that ran every model: geometric-mean latency and energy, the point's area."""
    models = {r["model"] for r in rows}
    by_point: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row["status"] == "ok":
            by_point.setdefault(row["point"], []).append(row)
    merged = []
    for point, group in by_point.items():
        if {r["model"] for r in group} != models:
            continue
        row = {**group[0], "model": ALL_MODELS}
        for key in ("latency_s", "energy_uj"):
            row[key] = math.exp(sum(math.log(r[key]) for r in group) / len(group))
        merged.append(row)
    return merged


def fronts(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The front of each model, then the aggregate's (when there are several models)."""
    ok = [r for r in rows if r["status"] == "ok"]
    models = sorted({r["model"] for r in rows})
    result = {m: front([r for r in ok if r["model"] == m]) for m in models}
    if len(models) > 1:
        result[ALL_MODELS] = front(aggregate(rows))
    return result
