"""Telling a vendor plugin's bug from a bug in glowsdk.

An exception other than a `GlowError` is a bug somewhere. Its traceback says
whose: the innermost frame that runs either glowsdk's own code or a third-party
backend's code decides (frames of numpy, the standard library and the like are
skipped, as they run on behalf of their caller). A plugin's code is any module
in the top-level package its entry point names; the built-in backends'
entry points name glowsdk, so their exceptions stay glowsdk's bugs.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import FrameType
from typing import Iterator

from ..errors import GlowError
from .registry import Clash, available_backends, distribution_label

OWN_PACKAGES = frozenset({"glowsdk", "isa", "sim", "firmware_runtime"})
"""The top-level packages glowsdk installs (pyproject.toml's package list)."""


@dataclass(frozen=True)
class Plugin:
    """A third-party backend package: its top-level module, distribution and target names."""

    package: str
    distribution: str
    targets: tuple[str, ...]


class PluginError(GlowError):
    """An exception raised inside an installed third-party backend, reported as that plugin's."""

    def __init__(self, plugin: Plugin, error: BaseException, file: str, line: int, function: str,
                 target: str | None = None) -> None:
        self.plugin, self.error, self.file, self.line = plugin, error, file, line
        targets = ", ".join(f"'{t}'" for t in ((target,) if target in plugin.targets else plugin.targets))
        message = " ".join(str(error).split()) or "(no message)"
        super().__init__(
            f"backend {targets} (package {plugin.distribution}) raised {type(error).__name__}: {message} "
            f"in {function} at {file}:{line} (a bug in the plugin, not in glowsdk; "
            f"GLOWSDK_DEBUG=1 shows the traceback)")


def _top_module(value: str) -> str:
    """'acme_npu_backend' of 'acme_npu_backend.backend:AcmeBackend'."""
    return value.partition(":")[0].strip().split(".")[0]


def plugin_packages() -> dict[str, Plugin]:
    """Every installed third-party backend by its top-level module (glowsdk's own are left out)."""
    targets: dict[str, list[str]] = {}
    distributions: dict[str, list[str]] = {}
    for name, registered in sorted(available_backends().items()):
        for entry in registered.entries if isinstance(registered, Clash) else (registered,):
            package = _top_module(entry.value)
            if package in OWN_PACKAGES:
                continue
            if name not in targets.setdefault(package, []):
                targets[package].append(name)
            label = distribution_label(entry)
            if label not in distributions.setdefault(package, []):
                distributions[package].append(label)
    return {p: Plugin(p, " or ".join(distributions[p]), tuple(names)) for p, names in targets.items()}


def _frames(error: BaseException) -> Iterator[tuple[FrameType, int]]:
    """The traceback's frames with their current lines, innermost first."""
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return reversed(frames)


def plugin_error(error: BaseException, target: str | None = None) -> PluginError | None:
    """A PluginError for `error` when a third-party backend's code raised it, else None.

    `target` is the target name the caller was using: the message names it alone when it
    is one of the plugin's, and every target the plugin's package registers otherwise.
    """
    plugins = plugin_packages()
    for frame, line in _frames(error):
        package = str(frame.f_globals.get("__name__", "")).split(".")[0]
        if package in OWN_PACKAGES:
            return None
        if package in plugins:
            return PluginError(plugins[package], error, frame.f_code.co_filename, line,
                               frame.f_code.co_name, target)
    return None
