"""Discovering backends through the `glowsdk.backends` entry-point group."""
from __future__ import annotations

from importlib.metadata import entry_points

from ..errors import GlowError
from .base import Backend

GROUP = "glowsdk.backends"


def available_backends() -> dict[str, object]:
    """Entry points of every installed backend, by name."""
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def get_backend(name: str) -> Backend:
    """An instance of the backend called `name`; GlowError listing the choices otherwise."""
    found = available_backends()
    if name not in found:
        if not found:
            raise GlowError("no backends are registered: is glowsdk installed (pip install -e .)?")
        raise GlowError(f"unknown target '{name}'; installed backends: {', '.join(sorted(found))}")
    try:
        cls = found[name].load()
    except Exception as err:  # a broken third-party plugin must not take the CLI down
        raise GlowError(f"backend '{name}' failed to load: {type(err).__name__}: {err}") from None
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise GlowError(f"backend '{name}' does not name a glowsdk Backend subclass")
    return cls()
