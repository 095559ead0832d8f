"""glowsdk: a graph-lowering ML compiler SDK for hardware vendors, after the Glow paper.

The public API is `load`, `compile` and `Session` (see glowsdk.api); the
layers, in the order data flows, are frontend -> graph -> compiler -> backends.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .errors import GlowError
from .version import __version__

__all__ = ["CompiledNetwork", "GlowError", "Network", "Session", "compile", "load", "__version__"]

_API = frozenset({"CompiledNetwork", "Network", "Session", "compile", "load"})

if TYPE_CHECKING:
    from .api import CompiledNetwork, Network, Session, compile, load  # noqa: A004


def __getattr__(name: str):
    """The API and the subpackages load on first use: `glowsdk --version`, or a simulation, does not
    wait for the ONNX frontend and the compiler to import (seconds on a busy machine, before any
    progress can show)."""
    if name in _API:
        from . import api

        return getattr(api, name)
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError as err:
        if err.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module 'glowsdk' has no attribute '{name}'") from None
