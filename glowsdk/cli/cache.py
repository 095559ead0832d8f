"""`glowsdk cache list|size|clear`: what the compile cache holds, and a way to empty it.

The cache folder follows the XDG base-directory rule (backends/cpu/cache.py: `$GLOWSDK_CACHE_DIR`,
else `$XDG_CACHE_HOME/glowsdk`, else ~/.cache/glowsdk); one entry of a large model runs to
hundreds of megabytes, so people need to see and reclaim that space.
"""
from __future__ import annotations

import argparse
import time

from ..table import format_bytes, format_table


def cmd_cache(args: argparse.Namespace) -> int:
    from ..backends.cpu.cache import CompileCache

    cache = CompileCache()
    if args.action == "clear":
        removed, freed = cache.clear()
        print(f"removed {removed} entr{'y' if removed == 1 else 'ies'} ({format_bytes(freed)}) from {cache.folder}")
        return 0
    entries = cache.entries()
    total = sum(e.bytes for e in entries)
    if args.action == "list" and entries:
        rows = [[e.path.name[:16], format_bytes(e.bytes), time.strftime("%Y-%m-%d %H:%M", time.localtime(e.last_used)),
                 "; ".join(e.bindings) if e.bindings is not None else "(not a readable entry)"] for e in entries]
        print(format_table(["entry (key)", "size", "last used", "inputs and outputs"], rows))
    print(f"{cache.folder}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, {format_bytes(total)}")
    return 0


def add_cache_args(cache: argparse.ArgumentParser) -> None:
    cache.add_argument("action", choices=["list", "size", "clear"],
                       help="list the entries, print their total size, or remove them all")
    cache.set_defaults(func=cmd_cache)


SUBCOMMANDS = {"cache": add_cache_args}
"""The command's arguments and handler, added when it is the one run (main.COMMANDS)."""
