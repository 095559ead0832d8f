"""A simulation's reports as text (for people), JSON (everything, for tools) or CSV (the layer table)."""
from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, fields
from typing import Callable

from isa.config import config_hash, format_size

from .machine import STALLS
from .results import LayerRow, SimResult


def _bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _count(n: float) -> str:
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f}"


def _layer_line(row: LayerRow, width: int) -> str:
    intensity = f"{row.intensity:8.1f}" if row.intensity is not None else f"{'-':>8}"
    bound = f"{row.roofline_cycles:>11,.0f}" if row.roofline_cycles is not None else f"{'-':>11}"
    ratio = f"{row.ratio:>7.3f}x" if row.ratio is not None else f"{'-':>8}"
    return (f"{row.name[:width]:<{width}} {row.kind[:10]:<10} {row.cycles:>11,} {_count(row.macs):>9} "
            f"{row.utilisation:>6.1%} {_bytes(row.dram_read):>10} {_bytes(row.dram_written):>10} {intensity} "
            f"{row.bound:>8} {bound} {ratio}")


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
        f"  MACs          {_count(total.macs)}: {total.utilisation:.1%} of the array's "
        f"{cfg.macs_per_cycle:,} MAC/cycle",
        _bound_line(result, total),
        f"  DRAM          read {_bytes(total.dram_read)}, written {_bytes(total.dram_written)}: "
        f"{s['dram']['bytes_per_cycle']:.2f} of {cfg.dram_bytes_per_cycle} B/cycle "
        f"({s['dram']['bytes_per_cycle'] / cfg.dram_bytes_per_cycle:.1%})" if moved else "  DRAM          no traffic",
    ]
    for memory, usage in result.timeline.usage.items():
        lines.append(f"  peak {memory:<8} {_bytes(usage.peak_bytes)} live of {format_size(usage.capacity_bytes)} "
                     f"({usage.peak_bytes / usage.capacity_bytes:.1%}) at cycle {usage.peak_cycle:,}")
    lines.append(f"  simulator     {result.wall_seconds:.2f} s, {s['simulator']['instructions_per_second']:,.0f} "
                 f"instructions/s")
    lines += ["", f"{'unit':<11}{'instrs':>8}{'busy':>12}{'stalled':>12}{'idle':>12}  "
              + "".join(f"{reason:>15}" for reason in STALLS)]
    for row in result.unit_rows():
        lines.append(f"{row.unit:<11}{row.instructions:>8,}{row.busy:>12,}{row.stalled:>12,}{row.idle:>12,}  "
                     + "".join(f"{row.stalls[reason]:>15,}" for reason in STALLS))
    rows = result.layer_rows()
    width = max([len("(total)"), *(len(r.name) for r in rows)])
    width = min(width, 40)
    lines += ["", f"{'layer':<{width}} {'kind':<10} {'cycles':>11} {'MACs':>9} {'util':>6} {'DRAM read':>10} "
              f"{'written':>10} {'ops/B':>8} {'bound':>8} {'bound cyc':>11} {'ratio':>8}"]
    lines += [_layer_line(row, width) for row in rows]
    lines.append(_layer_line(total, width))
    return "\n".join(lines)


def format_json(result: SimResult) -> str:
    return json.dumps(result.summary(), indent=1)


def format_csv(result: SimResult) -> str:
    """One row per layer, then the whole program as '(total)'."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([f.name for f in fields(LayerRow)])
    for row in [*result.layer_rows(), result.total_row()]:
        writer.writerow(["" if v is None else v for v in asdict(row).values()])
    return out.getvalue()


REPORTS: dict[str, Callable[[SimResult], str]] = {"text": format_text, "json": format_json, "csv": format_csv}
