"""The one text-table renderer of every glowsdk report, and the number formats its cells share.

Columns are as wide as their widest cell (nothing is cut: a layer kind or an ONNX node name is
shown whole), text columns are left-aligned and numbers right-aligned, and units belong in the
headers ("cycles", "DRAM read (B)"), so a cell holds only its value.
"""
from __future__ import annotations

import re
from typing import Sequence

_NUMBER = re.compile(r"^[-+]?[\d,]*\.?\d+(e[-+]?\d+)?\s?(%|x|[kKMG]i?B?|B)?$|^-$|^$")


def format_table(headers: Sequence[str], rows: Sequence[Sequence], legend: str | None = None) -> str:
    """An aligned table with a rule under the headers; a column of numbers (and blanks) is right-aligned,
    the first column always left-aligned; `legend` (what the columns mean) follows the table."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    columns = len(headers)
    widths = [max(len(row[i]) for row in cells) for i in range(columns)]
    numeric = [i > 0 and all(_NUMBER.match(row[i]) for row in cells[1:]) for i in range(columns)]
    lines = []
    for n, row in enumerate(cells):
        text = "  ".join(c.rjust(w) if numeric[i] else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
        lines.append(text.rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    if legend:
        lines.append(legend)
    return "\n".join(lines)


def format_bytes(n: float) -> str:
    """A byte count in binary units (1.5 MiB)."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def format_count(n: float) -> str:
    """A large count in decimal units (4.09 G)."""
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f}"


def parse_number(text: str) -> int | float | None:
    """The int, else the float, that `text` spells; None when it spells neither (the caller keeps the text)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return None
