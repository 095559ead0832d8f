"""The errors the machine description reports.

Each is a `GlowError`, so the CLI prints its one-line message and exits with
code 2; the message names what is wrong and where (file and key, instruction
index and byte offset, field, assembly line).
"""
from __future__ import annotations

from glowsdk.errors import GlowError


class ConfigError(GlowError):
    """An architecture configuration file or value is malformed or out of range."""


class IsaError(GlowError):
    """An instruction cannot be built, encoded, decoded, assembled or checked."""


class DecodeError(IsaError):
    """Bytes that are not a legal instruction: illegal opcode, field or reserved bits."""


class AsmError(IsaError):
    """Assembly text that does not parse; the message starts with the line number."""


class IsaTableError(Exception):
    """The ISA table itself is inconsistent (a bug in `isa/table.py`, raised at import)."""
