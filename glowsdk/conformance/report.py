"""Conformance reports: per-op tables for people, JSON for machines."""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable, Sequence

from .node_tests import CaseResult

STATUSES = ("pass", "fail", "unsupported", "error")


def totals(results: Iterable) -> dict[str, int]:
    counts = Counter(r.status for r in results)
    out = {s: counts.get(s, 0) for s in STATUSES}
    out["total"] = sum(out.values())
    return out


def per_op(results: Sequence[CaseResult]) -> dict[str, dict[str, int]]:
    """Counts of the cases that use each op (a multi-op case counts for each of its ops)."""
    table: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        for op in r.ops:
            table[op][r.status] += 1
    return {op: {s: table[op].get(s, 0) for s in STATUSES} for op in sorted(table)}


def format_table(headers: Sequence[str], rows: Sequence[Sequence]) -> str:
    """A plain aligned text table."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def node_report(results: Sequence[CaseResult]) -> str:
    """Per-op counts, the total, and every case that did not pass with its reason."""
    rows = [[op, c["pass"], c["fail"], c["unsupported"], c["error"]] for op, c in per_op(results).items()]
    t = totals(results)
    rows.append(["TOTAL (cases)", t["pass"], t["fail"], t["unsupported"], t["error"]])
    text = [format_table(["op (cases using it)", "pass", "fail", "unsupported", "error"], rows)]
    rate = 100.0 * t["pass"] / t["total"] if t["total"] else 0.0
    text.append(f"\nnode tests: {t['pass']}/{t['total']} passed ({rate:.1f}%)")
    failures = [r for r in results if r.status != "pass"]
    if failures:
        text.append("\nnot passing:")
        text.extend(f"  {r.status:<11} {r.name}: {r.detail}" for r in failures)
    return "\n".join(text)


def model_report(results: Sequence) -> str:
    """One row per model and check, then the totals."""
    rows = []
    for r in results:
        d = r.to_json()
        rows.append([d["model"], d["check"], d["status"], _fmt_float(d["rel_error"]),
                     _fmt_bool(d["argmax_agrees"]),
                     f"{d.get('seconds', 0):.1f}", (d.get("detail") or "")[:80]])
    t = totals(results)
    text = format_table(["model", "check", "status", "rel error", "argmax", "seconds", "detail"], rows)
    return text + f"\n\nmodel zoo: {t['pass']}/{len(results)} checks passed"


def _fmt_float(value) -> str:
    return "-" if value is None else f"{value:.2e}"


def _fmt_bool(value) -> str:
    return "-" if value is None else ("same" if value else "DIFFERENT")
