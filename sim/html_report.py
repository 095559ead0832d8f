"""A simulation as one self-contained HTML page: the roofline plot, engine utilisation, stall causes, the
per-layer table and the architect's view (energy, accesses, stalls by root cause), layers named after the
model's (ONNX) nodes, with a link to the Perfetto trace.

The plots are drawn with matplotlib (the optional `report` extra: `pip install 'glowsdk[report]'`)
into inline SVG, so the page needs no network and no other file; `require_plotting` says in one
line what to install before any work is done.
"""
from __future__ import annotations

import html
import os
from typing import Sequence

from glowsdk.errors import GlowError
from glowsdk.plots import figure_svg, plotting_available
from glowsdk.table import format_bytes, format_count

from .architect import format_architect
from .machine import STALLS
from .results import SimResult

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { padding: 2px 8px; border-bottom: 1px solid #ddd; white-space: nowrap; }
th { text-align: left; background: #f3f3f3; position: sticky; top: 0; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.legend { color: #555; font-size: 0.85em; max-width: 60em; }
figure { margin: 0; }
"""


def require_plotting() -> None:
    """GlowError unless matplotlib (the `report` extra) is installed: checked before a long run."""
    if not plotting_available():
        raise GlowError("--report html draws its plots with matplotlib, which is not installed: "
                        "pip install 'glowsdk[report]'")


def roofline_svg(result: SimResult, labelled: int = 8) -> str:
    """Each layer with multiply-adds a point (intensity, attained ops/cycle) under the machine's roofline;
    the `labelled` slowest layers carry their ONNX node name."""
    import numpy as np
    from matplotlib.figure import Figure

    cfg = result.config
    peak, bandwidth = 2.0 * cfg.macs_per_cycle, float(cfg.dram_bytes_per_cycle)
    points = [(row, result.origins.get(row.name, (row.name, row.kind))) for row in result.layer_rows()
              if row.macs and row.cycles and row.intensity]
    figure = Figure(figsize=(8, 5))
    axes = figure.add_subplot()
    xs = [row.intensity for row, _ in points] or [peak / bandwidth]
    grid = np.logspace(np.log10(min(min(xs), peak / bandwidth) / 2), np.log10(max(max(xs), peak / bandwidth) * 2))
    axes.plot(grid, np.minimum(peak, grid * bandwidth), color="black", linewidth=1.5,
              label=f"roofline: min({peak:,.0f} ops/cycle, intensity x {bandwidth:g} B/cycle)")
    for bound, colour in (("compute", "tab:blue"), ("memory", "tab:orange")):
        chosen = [(row, name) for row, name in points if row.bound == bound]
        if chosen:
            axes.scatter([r.intensity for r, _ in chosen], [2 * r.macs / r.cycles for r, _ in chosen],
                         color=colour, s=18, label=f"{bound}-bound layers")
    others = [(row, name) for row, name in points if row.bound not in ("compute", "memory")]
    if others:
        axes.scatter([r.intensity for r, _ in others], [2 * r.macs / r.cycles for r, _ in others],
                     color="grey", s=18, label="layers without a recorded bound")
    for row, (node, _) in sorted(points, key=lambda p: -p[0].cycles)[:labelled]:
        axes.annotate(node, (row.intensity, 2 * row.macs / row.cycles), fontsize=7, xytext=(4, 2),
                      textcoords="offset points")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("arithmetic intensity (ops per DRAM byte)")
    axes.set_ylabel("attained throughput (ops per cycle)")
    axes.set_title(f"roofline of '{cfg.name}': each point a layer")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8, loc="lower right")
    return figure_svg(figure)


def units_svg(result: SimResult) -> str:
    """Each unit's cycles as one bar: busy, then stalled split by cause, then idle."""
    from matplotlib.figure import Figure

    rows = result.unit_rows()
    figure = Figure(figsize=(8, 0.5 * len(rows) + 1.2))
    axes = figure.add_subplot()
    names = [r.unit for r in rows]
    left = [0.0] * len(rows)
    parts = [("busy", [r.busy for r in rows]), *((f"stalled: {s}", [r.stalls[s] for r in rows]) for s in STALLS),
             ("idle", [r.idle for r in rows])]
    for label, values in parts:
        if any(values):
            axes.barh(names, values, left=left, label=label)
            left = [a + b for a, b in zip(left, values)]
    axes.invert_yaxis()
    axes.set_xlabel("cycles")
    axes.set_title("engine utilisation and stall causes")
    axes.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=4)
    return figure_svg(figure)


def _table(headers: Sequence[str], rows: Sequence[Sequence], numeric: Sequence[bool]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td class="n">{html.escape(str(c))}</td>' if numeric[i]
                                    else f"<td>{html.escape(str(c))}</td>" for i, c in enumerate(row)) + "</tr>\n"
                   for row in rows)
    return f"<table>\n<tr>{head}</tr>\n{body}</table>"


def layer_rows(result: SimResult) -> list[list[str]]:
    """The per-layer table's cells, the whole run last."""
    rows = []
    for row in [*result.layer_rows(), result.total_row()]:
        node, op = result.origins.get(row.name, ("-", "")) if row.name != "(total)" else ("(total)", "")
        rows.append([node, op, "" if row.name == "(total)" else row.name, row.kind, f"{row.cycles:,}",
                     f"{row.macs:,}", f"{row.utilisation:.1%}", f"{row.dram_read:,}", f"{row.dram_written:,}",
                     "-" if row.intensity is None else f"{row.intensity:.1f}", row.bound,
                     "-" if row.roofline_cycles is None else f"{row.roofline_cycles:,.0f}",
                     "-" if row.ratio is None else f"{row.ratio:.3f}"])
    return rows


def format_html(result: SimResult, title: str, trace: str | None = None,
                sections: Sequence[tuple[str, str]] = ()) -> str:
    """The page; `trace` is the Chrome-trace file to link (relative to the page), `sections` more
    (heading, HTML) parts, such as the compiler's tiling decisions."""
    require_plotting()
    cfg = result.config
    total = result.total_row()
    facts = [("cycles", f"{result.cycles:,} ({result.seconds * 1e3:.4g} ms at {cfg.clock_ghz:g} GHz)"),
             ("instructions", f"{len(result.steps):,}"),
             ("MACs", f"{format_count(total.macs)} ({total.utilisation:.1%} of the array's "
                      f"{cfg.macs_per_cycle:,} MAC/cycle)"),
             ("roofline bound", "unknown (no layer workloads recorded)" if total.roofline_cycles is None else
              f"{total.roofline_cycles:,.0f} cycles; the run takes "
              f"{'-' if total.ratio is None else f'{total.ratio:.3f}x'} the bound"),
             ("DRAM", f"read {format_bytes(total.dram_read)}, written {format_bytes(total.dram_written)}")]
    summary = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in facts)
    units = [[r.unit, f"{r.instructions:,}", f"{r.busy:,}", f"{r.stalled:,}", f"{r.idle:,}",
              f"{r.busy / result.cycles:.1%}" if result.cycles else "-",
              *(f"{r.stalls[s]:,}" for s in STALLS)] for r in result.unit_rows()]
    headers = ["ONNX node", "op", "layer", "kind", "cycles", "MACs", "util", "DRAM read (B)", "DRAM written (B)",
               "ops/B", "bound", "bound (cycles)", "cycles / bound"]
    if trace:
        link = html.escape(trace)
        trace_html = (f'<p>Timeline of every instruction on every engine: <a href="{link}">{link}</a> '
                      f'(a Chrome trace: open it in <a href="https://ui.perfetto.dev">Perfetto</a> or '
                      f'chrome://tracing).</p>')
    else:
        trace_html = "<p>No trace was written: <code>glowsdk simulate FILE --trace trace.json</code> makes one.</p>"
    parts = [
        f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>NPU simulation on architecture '{html.escape(cfg.name)}'.</p>",
        f"<table>{summary}</table>",
        "<h2>Roofline</h2>", f'<figure id="roofline">{roofline_svg(result)}</figure>',
        '<p class="legend">Arithmetic intensity: 2 x MACs per byte the layer moves to or from DRAM; attained '
        'throughput: 2 x MACs per simulated cycle. A point on the sloped roof is limited by DRAM bandwidth, '
        'one on the flat roof by the MAC array; the distance below the roof is time lost to stalls.</p>',
        "<h2>Engines</h2>", f'<figure id="units">{units_svg(result)}</figure>',
        _table(["unit", "instructions", "busy (cycles)", "stalled (cycles)", "idle (cycles)", "busy", *STALLS],
               units, [False] + [True] * (5 + len(STALLS))),
        '<p class="legend">busy + stalled + idle = the run\'s cycles. Stall causes: semaphore (waiting for '
        'another engine), queue_empty / queue_full (the dispatcher), dram_bandwidth / dram_latency (memory).</p>',
        "<h2>Trace</h2>", trace_html,
        "<h2>Layers</h2>",
        _table(headers, layer_rows(result), [False] * 4 + [True] * 6 + [False] + [True] * 2),
        '<p class="legend">ONNX node: the model node the layer implements (- for one the compiler added); '
        'util: MACs / (cycles x the array\'s MAC/cycle); bound: what limits the layer on the roofline; '
        'cycles / bound: the simulated cycles against the roofline bound.</p>',
    ]
    parts += ["<h2>Energy, memory accesses and stall causes by layer</h2>",
              f"<pre>{html.escape(format_architect(result.architect(), result.origins))}</pre>"]
    for heading, body in sections:
        parts += [f"<h2>{html.escape(heading)}</h2>", body]
    parts.append("</body>\n</html>\n")
    return "\n".join(parts)


def relative_link(target: str, page: str) -> str:
    """`target` as a link from the page at `page` (both file paths)."""
    return os.path.relpath(os.path.abspath(target), os.path.dirname(os.path.abspath(page)))


def decisions_html(headers: Sequence[str], rows: Sequence[Sequence], numeric: Sequence[bool]) -> str:
    """A table for an extra section of the page (the compiler's per-layer decisions)."""
    return _table(headers, rows, numeric)
