"""Conformance reports: per-op tables for people, JSON for machines."""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable, Sequence

from ..graph.types import ElemKind
from ..table import format_table
from .node_tests import CaseResult
from .primitives import CellResult

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
    """One row per model and check, then the totals; run with a fallback, also each model's split
    (partitions on the target / on the host) and its share of MACs on the target."""
    split = any(getattr(r, "split", None) is not None for r in results)
    rows = []
    for r in results:
        d = r.to_json()
        row = [d["model"], d["check"], d["status"], _fmt_float(d["rel_error"]), _fmt_bool(d["argmax_agrees"])]
        if split:
            row += [_fmt_parts(d), _fmt_share(d.get("target_mac_share"))]
        rows.append(row + [f"{d.get('seconds', 0):.1f}", (d.get("detail") or "")[:80]])
    t = totals(results)
    headers = ["model", "check", "status", "rel error", "argmax"]
    headers += ["parts (target/host)", "MACs on target"] if split else []
    text = format_table(headers + ["seconds", "detail"], rows)
    return text + f"\n\nmodel zoo: {t['pass']}/{len(results)} checks passed"


def _fmt_parts(record: dict) -> str:
    if record.get("partitions") is None:
        return "-"
    return f"{record['partitions']} ({record['target_partitions']}/{record['host_partitions']})"


def _fmt_share(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _fmt_float(value) -> str:
    return "-" if value is None else f"{value:.2e}"


def _fmt_bool(value) -> str:
    return "-" if value is None else ("same" if value else "DIFFERENT")


# -- the primitive support matrix ----------------------------------------------------------------
MATRIX_CELLS = {"pass": "ok", "partial": "part", "fail": "FAIL", "error": "ERR", "unsupported": "-"}
MATRIX_LEGEND = ("ok: every variant matches the reference; part: some variants refused, the others match; "
                 "FAIL: wrong results; ERR: a crash; -: unsupported (not declared, or refused); "
                 "blank: not an element kind of the primitive")


def short_kind(kind: ElemKind) -> str:
    """A column header: float32 -> f32, bfloat16 -> bf16, uint8q -> u8q, float8e4m3fn -> f8e4m3fn."""
    return kind.value.replace("bfloat", "bf").replace("float", "f").replace("uint", "u").replace("int", "i")


def primitive_matrix(results: Sequence[CellResult]) -> tuple[list[ElemKind], dict[str, dict[ElemKind, str]]]:
    """The element kinds with a case (columns) and each primitive's status per kind (rows)."""
    rows: dict[str, dict[ElemKind, str]] = {}
    for r in results:
        rows.setdefault(r.primitive, {})[r.kind] = r.status
    columns = [k for k in ElemKind if any(k in row for row in rows.values())]
    return columns, rows


def primitive_report(results: Sequence[CellResult]) -> str:
    """The support matrix as text, its totals, and every declared cell that does not pass, with its reason."""
    columns, rows = primitive_matrix(results)
    table = [[name, *(MATRIX_CELLS[row[k]] if k in row else "" for k in columns)] for name, row in rows.items()]
    text = [format_table(["primitive", *map(short_kind, columns)], table), "", MATRIX_LEGEND]
    text.append("\n" + _primitive_totals(results))
    problems = [r for r in results if r.status != "pass" and r.detail != "not declared"]
    if problems:
        text.append("\nnot passing (declared):")
        text.extend(f"  {r.status:<11} {r.primitive} {r.kind.value}: {r.detail}" for r in problems)
    return "\n".join(text)


def primitive_counts(results: Sequence[CellResult]) -> dict[str, int]:
    """Cells by status, with the unsupported ones split into `not declared` and `refused`."""
    counts = Counter(r.status for r in results)
    undeclared = sum(r.detail == "not declared" for r in results)
    out = {s: counts.get(s, 0) for s in ("pass", "partial", "fail", "error")}
    out.update(refused=counts.get("unsupported", 0) - undeclared, not_declared=undeclared, total=len(results))
    return out


def _primitive_totals(results: Sequence[CellResult]) -> str:
    c = primitive_counts(results)
    return (f"primitives: {c['pass']} of {c['total'] - c['not_declared']} declared cells pass ({c['partial']} partly, "
            f"{c['fail']} fail, {c['error']} error, {c['refused']} refused); {c['not_declared']} not declared")


def markdown_report(target: str, primitives: Sequence[CellResult] | None = None,
                    nodes: Sequence[CaseResult] | None = None, models: Sequence | None = None) -> str:
    """A release-notes page: the primitive support matrix, the node-test and model-zoo totals."""
    text = [f"# glowsdk conformance: target `{target}`", ""]
    if primitives is not None:
        columns, rows = primitive_matrix(primitives)
        text += ["## Primitive support", "", "| primitive | " + " | ".join(map(short_kind, columns)) + " |",
                 "|---|" + "---|" * len(columns)]
        for name, row in rows.items():
            cells = [_markdown_cell(row.get(k)) for k in columns]
            text.append(f"| `{name}` | " + " | ".join(cells) + " |")
        text += ["", MATRIX_LEGEND.replace("ok:", "pass:") + ".", "", _primitive_totals(primitives) + ".", ""]
        problems = [r for r in primitives if r.status != "pass" and r.detail != "not declared"]
        text += [f"* {r.status} `{r.primitive}` {r.kind.value}: {r.detail}" for r in problems]
        text += [""] if problems else []
    if nodes is not None:
        t = totals(nodes)
        text += ["## ONNX node tests", "", f"{t['pass']} of {t['total']} cases pass ({t['fail']} fail, "
                 f"{t['unsupported']} unsupported, {t['error']} error).", ""]
    if models is not None:
        split = any(getattr(r, "split", None) is not None for r in models)
        extra = " partitions (target/host) | MACs on target |" if split else ""
        text += ["## Model zoo", "", "| model | check | status | relative error |" + extra,
                 "|---|---|---|---|" + "---|---|" * split]
        for r in models:
            d = r.to_json()
            cells = f" {_fmt_parts(d)} | {_fmt_share(d.get('target_mac_share'))} |" if split else ""
            text.append(f"| {r.model} | {r.check} | {r.status} | {_fmt_float(r.rel_error)} |" + cells)
        text.append("")
    return "\n".join(text)


def _markdown_cell(status: str | None) -> str:
    return {None: "", "pass": "pass", "partial": "partial", "fail": "**FAIL**", "error": "**ERROR**",
            "unsupported": "-"}[status]
