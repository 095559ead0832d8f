"""The flags that set backend options: --no-cache for targets with a compile cache, and the flags each
installed backend declares for itself (`Backend.flags`), so the commands name no target. A module of its
own: it loads every installed backend, which only the commands that compile a model need."""
from __future__ import annotations

import argparse

from ..backends.registry import Clash, available_backends, backend_class, get_backend
from ..compiler.backend import Backend, Flag, FlagKind
from ..errors import GlowError
from ..files import check_writable_file
from .options import parse_backend_opt, positive_count


def add_cache_arg(p: argparse.ArgumentParser) -> None:
    cached = [name for name, cls in installed_backends().items() if cls.compile_cache]
    p.add_argument("--no-cache", action="store_true",
                   help=f"targets with a compile cache ({', '.join(cached) or 'none installed'}): compile afresh, "
                        f"neither load nor store ($GLOWSDK_CACHE_DIR, else $XDG_CACHE_HOME/glowsdk, else "
                        f"~/.cache/glowsdk)")


def installed_backends() -> dict[str, type[Backend]]:
    """The class of every installed backend that loads, by target name (`glowsdk backends` explains the others)."""
    found = {}
    for name, entry in sorted(available_backends().items()):
        if isinstance(entry, Clash):
            continue
        try:
            found[name] = backend_class(name)
        except GlowError:
            continue
    return found


TARGET_FLAGS = "target_flags"
"""The attribute of the parsed arguments holding the backend flags the command offers (`add_target_flags`)."""


def add_target_flags(p: argparse.ArgumentParser, command: str) -> None:
    """The flags the installed backends declare for `command` (`Backend.flags`); each says its targets,
    and `target_options` passes a given one to the target as the option it names."""
    offered: dict[str, dict[str, Flag]] = {}
    """Per flag spelling, the declaration of each target that has it."""
    for name, cls in installed_backends().items():
        for flag in cls.flags:
            if command in flag.commands:
                offered.setdefault(flag.name, {})[name] = flag
    for spelling, owners in list(offered.items()):
        first = next(iter(owners.values()))
        owners = offered[spelling] = {t: f for t, f in owners.items() if f.kind is first.kind}
        targets = " and ".join(owners)
        try:
            p.add_argument(spelling, dest=_dest(spelling), metavar=first.metavar,
                           type=positive_count if first.kind is FlagKind.COUNT else str,
                           help=f"{targets} target{'s' if len(owners) > 1 else ''}: {first.help}")
        except argparse.ArgumentError:  # spelled like one of the command's own options: the command's stays
            del offered[spelling]
    p.set_defaults(**{TARGET_FLAGS: offered})


def _dest(spelling: str) -> str:
    return "target_flag" + spelling.replace("-", "_")


def given_target_flags(args: argparse.Namespace) -> list[tuple[str, object, dict[str, Flag]]]:
    """(spelling, value, declarations by target) of each backend flag given, in the order they are offered."""
    return [(spelling, value, owners) for spelling, owners in getattr(args, TARGET_FLAGS, {}).items()
            if (value := getattr(args, _dest(spelling))) is not None]


def check_target_flags(args: argparse.Namespace) -> None:
    """Each given backend flag's value as its declaration asks (a file to write, the backend's own check),
    before the model is loaded: a typo fails at once."""
    for spelling, value, owners in given_target_flags(args):
        flag = owners.get(args.target) or next(iter(owners.values()))
        if flag.kind is FlagKind.FILE:
            check_writable_file(str(value), spelling)
        elif flag.check is not None:
            flag.check(str(value))


def written_by_target_flags(args: argparse.Namespace) -> list[str]:
    """The files the given FILE flags had the backend write."""
    return [str(value) for _, value, owners in given_target_flags(args)
            if owners[args.target].kind is FlagKind.FILE]


def backend_options(args: argparse.Namespace, cache: bool = True) -> dict:
    """The backend options the flags ask for: the compile cache (unless --no-cache, or `cache` is
    false), the target's own flags and every --backend-opt (the backends check them by name)."""
    extra = cache_options(args.target, args.no_cache) if cache else {}
    extra.update(target_options(args))
    extra.update(parse_backend_opt(text) for text in getattr(args, "backend_opt", []))
    return extra


def target_options(args: argparse.Namespace) -> dict:
    """The options the given backend flags set for args.target; GlowError for a flag of another target's."""
    extra = {}
    for spelling, value, owners in given_target_flags(args):
        if args.target not in owners:
            raise GlowError(f"{spelling} is a flag of target {' and '.join(owners)}, not {args.target}")
        extra[owners[args.target].option] = value
    return extra


def cache_options(target: str, no_cache: bool) -> dict:
    """The backend option turning the compile cache on, for a target that has one, unless `no_cache`."""
    return {"cache": True} if get_backend(target).compile_cache and not no_cache else {}
