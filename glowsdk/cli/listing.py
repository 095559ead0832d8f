"""`glowsdk models` and `glowsdk backends`: what is bundled and what is installed."""
from __future__ import annotations

import argparse
from typing import Callable

from ..errors import GlowError


def cmd_models(args: argparse.Namespace) -> int:
    from .. import zoo

    for name in zoo.BUNDLED:
        print(name)
    return 0


def cmd_backends(args: argparse.Namespace) -> int:
    from ..backends.plugins import plugin_error
    from ..backends.registry import Clash, available_backends, get_backend
    from ..compiler.lowering.primitives import PRIMITIVES

    for name, entry in sorted(available_backends().items()):
        if isinstance(entry, Clash):
            print(f"{name}  ({' | '.join(e.value for e in entry.entries)})\n  not usable: {entry}")
            continue
        try:
            backend = get_backend(name)
            declared = sorted(backend.primitives)
            info = backend.device_info()
        except GlowError as err:
            print(f"{name}  ({entry.value})\n  failed to load: {err}")
            continue
        except Exception as err:  # one plugin's bug must not hide the other backends
            blamed = plugin_error(err, name)
            if blamed is None:
                raise
            print(f"{name}  ({entry.value})\n  failed to load: {blamed}")
            continue
        print(f"{name}  ({entry.value})")
        print(f"  primitives ({len(declared)} of {len(PRIMITIVES)}): {', '.join(declared) or 'none'}")
        missing = sorted(set(PRIMITIVES) - set(declared))
        if missing:
            print(f"  not supported: {', '.join(missing)}")
        if info.description:
            print(f"  device: {info.description}")
        flags = [" ".join(filter(None, (f.name, f.metavar))) + f" ({', '.join(f.commands)})" for f in backend.flags]
        if flags:
            print(f"  flags: {', '.join(flags)}")
    return 0


SUBCOMMANDS: dict[str, Callable[[argparse.ArgumentParser], None]] = {
    "models": lambda p: p.set_defaults(func=cmd_models),
    "backends": lambda p: p.set_defaults(func=cmd_backends),
}
"""Each command's arguments (none) and handler, added when it is the one run (main.COMMANDS)."""
