"""The errors glowsdk reports to its users.

Every error that bad input can cause is a `GlowError` whose message is one line
saying what is wrong and where (file, node, input). The CLI prints it and exits
with code 2; anything else escaping is a bug in glowsdk.
"""
from __future__ import annotations

from typing import Iterable


class GlowError(Exception):
    """Bad input or an unsupported request, reported to the user in one line."""


class ModelFileError(GlowError):
    """The model file is missing, truncated, not ONNX, or unsafe to load."""


class GraphError(GlowError):
    """A graph is ill-typed or malformed; the message names the node."""


class UnsupportedError(GlowError):
    """Something valid that glowsdk (or a backend) does not support."""


class UnsupportedOpsError(UnsupportedError):
    """A model uses ops outside the supported list; lists all of them at once."""

    def __init__(self, ops: Iterable[str], where: str = "") -> None:
        self.ops = sorted(set(ops))
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}unsupported op(s): {', '.join(self.ops)}")


class NeedsConstantError(GlowError):
    """A value that determines shapes or types at compile time is a run-time input.

    glowsdk has static shapes (paper 3.2): such inputs must be bound as constants.
    `input_name` is the graph input that would have to be bound.
    """

    def __init__(self, input_name: str, node: str, what: str) -> None:
        self.input_name = input_name
        super().__init__(
            f"node '{node}': {what} must be known at compile time, but depends on graph input "
            f"'{input_name}'; bind it as a constant")


class InputError(GlowError):
    """A run-time input is missing, unknown, or does not fit its declared type."""
