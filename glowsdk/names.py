"""Fresh names: one rule for the graph, the low-level IR and generated code alike."""
from __future__ import annotations

from typing import Container


def fresh_name(base: str, *taken: Container[str], separator: str = "__") -> str:
    """`base`, or `base` + separator + the smallest number that makes it a name in none of `taken`."""
    name, n = base, 0
    while any(name in names for names in taken):
        n += 1
        name = f"{base}{separator}{n}"
    return name
