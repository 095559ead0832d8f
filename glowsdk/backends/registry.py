"""Discovering backends through the `glowsdk.backends` entry-point group.

Any installed distribution may register target names there. One distribution
seen twice (an editable install whose metadata is found in two places) counts
once; registrations of one name by different distributions, or with different
values, are a `Clash`, which `get_backend` reports naming each of them rather
than picking one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from ..compiler.backend import Backend
from ..errors import GlowError

GROUP = "glowsdk.backends"


def distribution_label(entry: EntryPoint) -> str:
    """'name version' of the installed distribution that registered `entry`."""
    dist = getattr(entry, "dist", None)
    name = getattr(dist, "name", None) or "an unnamed distribution"
    version = getattr(dist, "version", None)
    return f"{name} {version}" if version else name


def _identity(entry: EntryPoint) -> tuple[str, str]:
    """Registrations with equal identities are one: the distribution (PEP 503 normalised) and the value."""
    dist = getattr(getattr(entry, "dist", None), "name", None) or ""
    return re.sub(r"[-_.]+", "-", dist).lower(), "".join(entry.value.split())


@dataclass(frozen=True)
class Clash:
    """One target name registered by several distributions (or with several values)."""

    name: str
    entries: tuple[EntryPoint, ...]

    def __str__(self) -> str:
        who = [f"{distribution_label(e)} ({e.value})" for e in self.entries]
        listed = ", ".join(who[:-1]) + " and " + who[-1]
        return (f"target '{self.name}' is registered by more than one installed package: {listed}; "
                f"uninstall all but one")


def available_backends() -> dict[str, EntryPoint | Clash]:
    """The entry point of every installed backend by name; a `Clash` where one name has several."""
    registered: dict[str, dict[tuple[str, str], EntryPoint]] = {}
    for entry in entry_points(group=GROUP):
        registered.setdefault(entry.name, {}).setdefault(_identity(entry), entry)
    return {name: next(iter(found.values())) if len(found) == 1 else Clash(name, tuple(found.values()))
            for name, found in registered.items()}


def get_backend(name: str) -> Backend:
    """An instance of the backend called `name`; GlowError listing the choices otherwise."""
    return backend_class(name)()


def backend_class(name: str) -> type[Backend]:
    """The class of the backend called `name`, for what it declares (its flags) without an instance."""
    found = available_backends()
    if name not in found:
        if not found:
            raise GlowError("no backends are registered: is glowsdk installed (pip install -e .)?")
        raise GlowError(f"unknown target '{name}'; installed backends: {', '.join(sorted(found))}")
    entry = found[name]
    if isinstance(entry, Clash):
        raise GlowError(str(entry))
    try:
        cls = entry.load()
    except Exception as err:  # a broken third-party plugin must not take the CLI down
        raise GlowError(f"backend '{name}' failed to load: {type(err).__name__}: {err}") from None
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise GlowError(f"backend '{name}' does not name a glowsdk Backend subclass")
    return cls
