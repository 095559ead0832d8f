"""A simulation's reports as text (for people), JSON (everything, for tools) or CSV (the layer table)."""
from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, fields
from typing import Callable

from glowsdk.table import format_bytes, format_count, format_table
from isa.config import config_hash, format_size

from .architect import format_architect
from .machine import STALLS
from .results import LayerRow, SimResult

LAYER_LEGEND = (
    "ONNX node: the model node the layer implements ('-' for one the compiler added, such as the copy to an "
    "output); layer, kind: the binary's debug range; util: MACs / (cycles x the array's MAC/cycle); "
    "ops/B: 2 x MACs per DRAM byte; bound: what limits the layer on the roofline (compute, memory; free: not "
    "counted); bound (cycles): max(MACs / peak, bytes / DRAM B per cycle); cycles / bound: the run against it")
UNIT_LEGEND = ("each unit's cycles: busy + stalled + idle = the run's cycles; the stall columns split 'stalled' "
               "by cause (semaphore: waiting for another engine; queue_empty/full: the dispatcher; dram_*: memory)")


def onnx_name(result: SimResult, layer: str) -> tuple[str, str]:
    """The (ONNX node name, op type) a layer implements, ('-', '') where the binary does not say."""
    return result.origins.get(layer, ("-", ""))


def layer_table(result: SimResult) -> str:
    """The per-layer roofline table, named after the model's nodes, with the whole run as its last row."""
    rows = []
    for row in [*result.layer_rows(), result.total_row()]:
        node, op = onnx_name(result, row.name) if row.name != "(total)" else ("(total)", "")
        rows.append([node, op, row.name if row.name != "(total)" else "", row.kind, f"{row.cycles:,}",
                     format_count(row.macs), f"{row.utilisation:.1%}", format_bytes(row.dram_read),
                     format_bytes(row.dram_written), "-" if row.intensity is None else f"{row.intensity:.1f}",
                     row.bound, "-" if row.roofline_cycles is None else f"{row.roofline_cycles:,.0f}",
                     "-" if row.ratio is None else f"{row.ratio:.3f}x"])
    return format_table(["ONNX node", "op", "layer", "kind", "cycles", "MACs", "util", "DRAM read", "DRAM written",
                         "ops/B", "bound", "bound (cycles)", "cycles / bound"], rows, LAYER_LEGEND)


def unit_table(result: SimResult) -> str:
    """Busy, stalled (by cause) and idle cycles of every unit."""
    rows = [[r.unit, f"{r.instructions:,}", f"{r.busy:,}", f"{r.stalled:,}", f"{r.idle:,}",
             *(f"{r.stalls[reason]:,}" for reason in STALLS)] for r in result.unit_rows()]
    return format_table(["unit", "instructions", "busy (cycles)", "stalled (cycles)", "idle (cycles)", *STALLS],
                        rows, UNIT_LEGEND)


def _bound_line(result: SimResult, total: LayerRow) -> str:
    """The headline: the simulated cycles against the roofline bound of the layers the binary runs."""
    if total.roofline_cycles is None:
        return "  roofline      unknown (the binary records no layer workloads)"
    ratio = f"{total.ratio:.3f}x" if total.ratio is not None else "-"
    layers = sum(w is not None for w in result.workloads)
    return (f"  roofline      bound {total.roofline_cycles:,.0f} cycles (the sum over {layers} convolution/matrix "
            f"layers of max(MACs / peak, bytes / DRAM B/cycle)): the run takes {ratio} the bound")


def format_text(result: SimResult) -> str:
    """A summary, the per-unit cycle accounts, and the per-layer roofline table."""
    cfg = result.config
    s = result.summary()
    total = result.total_row()
    moved = total.dram_read + total.dram_written
    mode = ", ".join(m for m, on in (("checked", result.checked), ("ideal DRAM", result.ideal_dram)) if on)
    lines = [
        f"NPU simulation: {len(result.steps):,} instructions on architecture '{cfg.name}' "
        f"(config {config_hash(cfg)[:16]}){' [' + mode + ']' if mode else ''}",
        f"  cycles        {result.cycles:,} ({result.seconds * 1e3:.4g} ms at {cfg.clock_ghz:g} GHz)",
        f"  MACs          {format_count(total.macs)}: {total.utilisation:.1%} of the array's "
        f"{cfg.macs_per_cycle:,} MAC/cycle",
        _bound_line(result, total),
        f"  DRAM          read {format_bytes(total.dram_read)}, written {format_bytes(total.dram_written)}: "
        f"{s['dram']['bytes_per_cycle']:.2f} of {cfg.dram_bytes_per_cycle} B/cycle "
        f"({s['dram']['bytes_per_cycle'] / cfg.dram_bytes_per_cycle:.1%})" if moved else "  DRAM          no traffic",
    ]
    for memory, usage in result.timeline.usage.items():
        lines.append(f"  peak {memory:<8} {format_bytes(usage.peak_bytes)} live of "
                     f"{format_size(usage.capacity_bytes)} ({usage.peak_bytes / usage.capacity_bytes:.1%}) at cycle {usage.peak_cycle:,}")
    lines.append(f"  simulator     {result.wall_seconds:.2f} s, {s['simulator']['instructions_per_second']:,.0f} "
                 f"instructions/s")
    lines += ["", unit_table(result), "", layer_table(result)]
    lines += ["", format_architect(result.architect(), result.origins)]
    return "\n".join(lines)


def format_json(result: SimResult) -> str:
    """Everything; each layer also names its ONNX node and op type (null where the binary does not say)."""
    summary = result.summary()
    for layer in summary["layers"]:
        node, op = result.origins.get(layer["name"], (None, None))
        layer["onnx_node"], layer["onnx_op"] = node, op
    return json.dumps(summary, indent=1)


def format_csv(result: SimResult) -> str:
    """One row per layer, then the whole program as '(total)'."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["onnx_node", "onnx_op", *(f.name for f in fields(LayerRow))])
    for row in [*result.layer_rows(), result.total_row()]:
        node, op = result.origins.get(row.name, ("", ""))
        writer.writerow([node, op, *("" if v is None else v for v in asdict(row).values())])
    return out.getvalue()


REPORTS: dict[str, Callable[[SimResult], str]] = {"text": format_text, "json": format_json, "csv": format_csv}
