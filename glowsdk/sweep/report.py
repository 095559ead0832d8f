"""A sweep's page, `DIR/report.html`: the Pareto fronts, every point in a sortable table, and how each
parameter moves latency and energy.

The tables need nothing; the plots are drawn with matplotlib (the optional `report` extra) when it is
installed, and the page says how to get them when it is not. One self-contained file: inline SVG, a few
lines of script to sort the table.
"""
from __future__ import annotations

import html
import math
from typing import Any, Sequence

from ..plots import figure_svg, plotting_available
from .pareto import ALL_MODELS, OBJECTIVES, aggregate, fronts

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { padding: 2px 8px; border-bottom: 1px solid #ddd; white-space: nowrap; }
th { text-align: left; background: #f3f3f3; position: sticky; top: 0; }
table.sortable th { cursor: pointer; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.legend { color: #555; font-size: 0.85em; max-width: 60em; }
"""
_SORT = """
document.querySelectorAll("table.sortable th").forEach((th, column) => th.addEventListener("click", () => {
  const body = th.closest("table").tBodies[0], rows = Array.from(body.rows);
  const up = th.dataset.up !== "1"; th.dataset.up = up ? "1" : "0";
  const key = r => { const t = r.cells[column].textContent, n = parseFloat(t); return isNaN(n) ? t : n; };
  rows.sort((a, b) => (key(a) > key(b) ? 1 : key(a) < key(b) ? -1 : 0) * (up ? 1 : -1));
  rows.forEach(r => body.appendChild(r));
}));
"""
_LABELS = {"latency_s": "latency (ms)", "energy_uj": "energy (uJ)", "area_mm2": "area (mm2)"}


def _shown(key: str, value: Any) -> str:
    if value is None:
        return ""
    if key == "latency_s":
        return f"{value * 1e3:.4f}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _table(headers: Sequence[str], rows: Sequence[dict[str, Any]], sortable: bool = False) -> str:
    head = "".join(f"<th>{html.escape(_LABELS.get(h, h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(
        f'<td class="n">{html.escape(_shown(h, r.get(h)))}</td>' if isinstance(r.get(h), (int, float))
        else f"<td>{html.escape(_shown(h, r.get(h)))}</td>" for h in headers) + "</tr>\n" for r in rows)
    kind = ' class="sortable"' if sortable else ""
    return f"<table{kind}>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody></table>"


def pareto_svg(rows: Sequence[dict[str, Any]], front: Sequence[dict[str, Any]], title: str) -> str:
    """Latency against energy, every point coloured by its area; the front ringed."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(5.5, 3.8))
    ax = figure.subplots()
    dots = ax.scatter([r["latency_s"] * 1e3 for r in rows], [r["energy_uj"] for r in rows],
                      c=[r["area_mm2"] for r in rows], cmap="viridis", s=18)
    ax.scatter([r["latency_s"] * 1e3 for r in front], [r["energy_uj"] for r in front], s=70,
               facecolors="none", edgecolors="crimson", label="Pareto front")
    figure.colorbar(dots, ax=ax, label="area (mm2)")
    ax.set(xlabel="latency (ms)", ylabel="energy (uJ)", title=title)
    ax.legend(loc="best", fontsize="small")
    return figure_svg(figure)


def sensitivity_svg(rows: Sequence[dict[str, Any]], parameter: str) -> str:
    """Per model, the geometric mean of latency and of energy over the points at each value of `parameter`,
    relative to the model's mean over all points: what the parameter alone is worth."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 3), layout="constrained")
    axes = figure.subplots(1, 2)
    values = sorted({r[parameter] for r in rows}, key=lambda v: (isinstance(v, str), v))
    for model in sorted({r["model"] for r in rows}):
        mine = [r for r in rows if r["model"] == model]
        for ax, key in zip(axes, ("latency_s", "energy_uj")):
            whole = _geomean([r[key] for r in mine])
            ys = [_geomean([r[key] for r in mine if r[parameter] == v]) / whole for v in values]
            ax.plot(range(len(values)), ys, marker="o", label=model)
    for ax, key in zip(axes, ("latency_s", "energy_uj")):
        ax.set_xticks(range(len(values)), [str(v) for v in values])
        ax.set(xlabel=parameter, ylabel=f"{_LABELS[key].split(' ')[0]} / model mean")
    axes[1].legend(loc="best", fontsize="small")
    return figure_svg(figure)


def _geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def format_report(rows: Sequence[dict[str, Any]], parameters: Sequence[str], title: str) -> str:
    """The page of a sweep's rows (results.csv read back)."""
    plotting = plotting_available()
    ok = [r for r in rows if r["status"] == "ok"]
    failed = [r for r in rows if r["status"] != "ok"]
    columns = ["model", *parameters, *OBJECTIVES, "cycles", "utilisation", "dram_read_bytes",
               "dram_written_bytes", "pj_per_mac", "compile_s", "simulate_s", "point"]
    parts = [f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
             f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>",
             f"<h1>{html.escape(title)}</h1>",
             f"<p>{len(rows)} points: {len({r['model'] for r in rows})} model(s) x "
             f"{len({r['point'] for r in rows})} configurations; {len(failed)} failed.</p>"]
    if not plotting:
        parts.append("<p>No plots: they need matplotlib (<code>pip install 'glowsdk[report]'</code>).</p>")
    parts.append("<h2>Pareto fronts</h2>")
    parts.append('<p class="legend">A point is on the front when no other point is at once faster, more '
                 'frugal and smaller. (all models): each configuration\'s geometric-mean latency and energy '
                 'over the models, for the configurations that ran every model.</p>')
    for model, front in fronts(rows).items():
        parts.append(f"<h3>{html.escape(model)}</h3>")
        if plotting and front:
            population = aggregate(rows) if model == ALL_MODELS else [r for r in ok if r["model"] == model]
            parts.append(f"<figure>{pareto_svg(population, front, model)}</figure>")
        parts.append(_table(["model", *parameters, *OBJECTIVES, "point"], front))
    if plotting and ok:
        parts.append("<h2>Sensitivity</h2>")
        parts.append('<p class="legend">Each parameter alone: per model, the geometric mean of latency and '
                     'of energy over the points at each of its values, relative to the model\'s mean.</p>')
        for parameter in parameters:
            parts.append(f"<figure>{sensitivity_svg(ok, parameter)}</figure>")
    parts.append("<h2>Every point</h2><p class=\"legend\">Click a heading to sort by it.</p>")
    parts.append(_table(columns, ok, sortable=True))
    if failed:
        parts.append("<h2>Failed points</h2>")
        parts.append(_table(["model", *parameters, "error", "point"], failed))
    parts.append(f"<script>{_SORT}</script>\n</body>\n</html>\n")
    return "\n".join(parts)
