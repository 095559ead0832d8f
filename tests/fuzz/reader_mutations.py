"""Mutations of the text files glowsdk reads: a parsed tree edited in place, then the text itself.

Tree edits (on what `json.loads` or `tomllib.loads` gave) pick one node by a random walk and
replace it with a value from `ODD_VALUES` or a neighbour of it (numbers near, over and under their
range, huge integers, NaN and infinities, empty and long strings, wrong types, deep nesting),
delete it, duplicate it, or add an unknown key. Text edits work on the written file: a byte
flipped, a run deleted or duplicated, a token of the format inserted, the text cut, deep
nesting, invalid UTF-8. `TOML.dumps` writes the flat tables a configuration file holds.
"""
from __future__ import annotations

import json
import math
import random
from typing import Any

ODD_VALUES: tuple[Any, ...] = (
    None, True, False, 0, -1, 1, 2, 3, 4, 7, 1023, 1024, 1 << 31, -(1 << 31), 1 << 32, 1 << 63, -(1 << 63), 1 << 64,
    10 ** 30, 10 ** 400, -(10 ** 400), 0.0, -0.0, 0.5, 1e-320, 1e308, -1e308, float("inf"), float("-inf"),
    float("nan"), "", "x", "default", "\n", "a\nb", "\u202e", "\x00", "256 KiB", "0 B", "9999999999 GiB", "1 TiB",
    "ws", "os", [], [1], [[]], {}, {"a": 1},
)


class Skip(Exception):
    """The edit does not apply to this tree or text."""


def _containers(tree: Any, path: tuple = ()) -> list[tuple]:
    """Paths of every node below the root, each as (path to parent, key or index)."""
    found = []
    if len(path) > 20:  # inside a deep value an earlier edit made: its top stands for it
        return found
    if isinstance(tree, dict):
        for key, value in tree.items():
            found.append((path, key))
            found += _containers(value, path + (key,))
    elif isinstance(tree, list):
        for i, value in enumerate(tree[:16]):  # long count arrays: the first few stand for all
            found.append((path, i))
            found += _containers(value, path + (i,))
    return found


def _at(tree: Any, path: tuple) -> Any:
    for key in path:
        tree = tree[key]
    return tree


def near(rng: random.Random, value: Any) -> Any:
    """A value like `value` but off: a number moved, a string changed, a list resized."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return rng.choice((value + 1, value - 1, -value, value * 2, value << 32, value * 10 ** 5000 + 1, 0))
    if isinstance(value, float):
        return rng.choice((value * 2, -value, value + 1e-9, math.nextafter(value, math.inf), value * 1e300, 0.0))
    if isinstance(value, str):
        return rng.choice((value + "x", value[:-1], value * 3, value.upper(), value + "\n", " " + value))
    if isinstance(value, list):
        return rng.choice((value[:-1], value + value[-1:], list(reversed(value)), value * 2)) if value else [0]
    return rng.choice(ODD_VALUES)


def deep(rng: random.Random) -> Any:
    """A value nested a few thousand levels deep (a recursive parser's limit)."""
    value: Any = 1
    for _ in range(rng.choice((50, 300, 600))):  # deeper trees come from text edits
        value = [value] if rng.random() < 0.5 else {"a": value}
    return value


def edit_tree(rng: random.Random, tree: Any) -> str:
    """One edit of the parsed tree, in place; the log line it returns names where."""
    nodes = _containers(tree)
    if not nodes:
        raise Skip
    parent_path, key = rng.choice(nodes)
    parent = _at(tree, parent_path)
    where = ".".join(map(str, parent_path + (key,)))
    pick = rng.random()
    if pick < 0.35:
        parent[key] = rng.choice(ODD_VALUES)
        return f"{where} = odd"
    if pick < 0.7:
        parent[key] = near(rng, parent[key])
        return f"{where} = near"
    if pick < 0.8:
        del parent[key]
        return f"{where} deleted"
    if pick < 0.87:
        if isinstance(parent, dict):
            parent[rng.choice(("unknown", "", "preset", "name", "values", "graph", "\u00e9"))] = rng.choice(ODD_VALUES)
        else:
            parent.insert(key, parent[key])
        return f"{where} duplicated or added"
    if pick < 0.92:
        parent[key] = deep(rng)
        return f"{where} = deep"
    other = rng.choice(nodes)
    if other[0] == parent_path and other[1] != key:  # swap two siblings' values
        parent[key], parent[other[1]] = parent[other[1]], parent[key]
        return f"{where} swapped"
    raise Skip


TOKENS = {"json": ('{', '}', '[', ']', '"', ',', ':', 'null', 'NaN', 'Infinity', '-', '1e999', '\\u0000', '\\ud800',
                   '1' * 5000),
          "toml": ('=', '"', "'", '[', ']', '[[a]]', '{', '}', '#', '\n', 'nan', 'inf', '-', '0x' + 'f' * 4000,
                   '1' * 5000, '1979-05-27', '"""', '\\', '[preset]', 'preset = "edge"\n')}


def edit_text(rng: random.Random, text: bytes, syntax: str) -> bytes:
    """One edit of the file's bytes."""
    data = bytearray(text)
    if not data:
        return bytes(rng.choice(TOKENS[syntax]).encode())
    at = rng.randrange(len(data))
    pick = rng.random()
    if pick < 0.25:
        data[at] ^= 1 << rng.randrange(8)
    elif pick < 0.45:
        data[at:at] = rng.choice(TOKENS[syntax]).encode()
    elif pick < 0.6:
        del data[at:at + rng.choice((1, 2, 8, 64))]
    elif pick < 0.7:
        n = rng.choice((1, 8, 64))
        data[at:at] = data[at:at + n]
    elif pick < 0.8:
        del data[at:]
    elif pick < 0.88:
        data[at:at] = rng.choice((b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\r", b"\xef\xbb\xbf"))
    else:
        opener = {"json": "[", "toml": "["}[syntax]
        n = rng.choice((100, 1000, 100_000))
        data[at:at] = (opener * n).encode()
    return bytes(data)


def toml_value(value: Any) -> str:
    """A TOML literal for a JSON-like value (inline tables and arrays; NaN and infinities spelled the TOML way)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if abs(value) < 10 ** 4000 else "0x" + format(abs(value), "x")
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string, escapes included
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    return '""'  # None: TOML has no null


def toml_dumps(table: dict) -> str:
    """A flat TOML document: one `key = value` line per entry."""
    return "".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in table.items())
