"""Names from a model, shown in one-line messages.

ONNX names are arbitrary strings: a node may be called "a\\nb", and a string field that is not
valid UTF-8 reaches Python as bytes. Every name a message quotes goes through `shown`, so the
message stays one line and always builds.
"""
from __future__ import annotations


def shown(name: str | bytes) -> str:
    """`name` with the characters that would break a one-line message escaped, as repr escapes them
    (a newline becomes \\n, a NUL \\x00, invalid UTF-8 \\xff); printable text is kept as it is."""
    if isinstance(name, bytes):
        name = name.decode("utf-8", errors="backslashreplace")
    if name.isprintable():
        return name
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in name)
