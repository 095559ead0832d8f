"""The compile cache: a second compile of the same network for the same CPU loads its image.

The key is a SHA-256 over everything that decides the machine code: the function
handed to the backend (every node, attribute, type and constant byte, in
schedule order; it follows from the model bytes and the graph-level options such
as batch and quantization), every backend option that changes code, the host
CPU's name and features, the LLVM and llvmlite versions, and glowsdk's version
and source digest (an edited kernel is a new compiler, so no stale code is
reused while developing). The imported graph (what the pipeline starts from, before
optimisation and lowering) has a key of its own, computed alike (`imported_key`):
a small `.glowkey` file named by it holds the key of the entry its compile made,
so a second `glowsdk run` finds its entry without optimising or lowering the graph
again (whose folded weights would stay in the process's memory); the entry still
carries and checks its own key. An entry is one image file (image_file.py) named by
its key under `$GLOWSDK_CACHE_DIR/cpu` (default `$XDG_CACHE_HOME/glowsdk/cpu`, else ~/.cache/glowsdk/cpu); one that is
truncated, corrupt or written for another key is discarded and recompiled.
Writes go through a temporary file and a rename, so concurrent compiles are
safe. The least recently used entries go when the folder outgrows
`$GLOWSDK_CACHE_MAX_MB` (default 4096).

An entry is machine code that is run, so the cache is used only where nobody else
can plant one: the cache folder and the folder holding it must be owned by this
user and writable by nobody else (glowsdk creates them mode 0700), and an entry
must be a regular file (not a link) owned by this user and writable by nobody
else. A folder that fails this is not used at all: the compile goes ahead afresh,
neither loading nor storing, with an `UnsafeCacheWarning` naming the folder and
the reason. (Refusing to compile would break a build for want of an optimisation;
using it silently would run whatever another user put there.) The digests inside
an entry, checked on every load, catch a damaged entry; they cannot catch a forged
one, which is why the folder's ownership is what is trusted.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO, Callable, Mapping

import llvmlite
import llvmlite.binding as llvm
import numpy as np

from ...errors import GlowError
from ...graph.function import Function
from ...graph.node import Constant, Placeholder
from ...version import __version__
from .image import CpuImage
from .image_file import FORMAT_VERSION, ImageFileError, describe_image, digests, read_image, write_image
from .jit import host_cpu

SUFFIX = ".glowcpu"
IMPORTED_SUFFIX = ".glowkey"
"""A file named by an imported graph's key, holding the key of the entry compiled from it."""
DEFAULT_MAX_MB = 4096


class UnsafeCacheWarning(UserWarning):
    """The compile cache folder (or an entry in it) could be written by another user; it is not used."""


def unsafe(path: Path, follow: bool = True) -> str | None:
    """Why another user could have written `path` (a folder, or with `follow` false an entry), or None.

    Windows has no user ids or mode bits to check (its ACLs are out of scope): there only an entry's
    kind is."""
    st = os.stat(path) if follow else os.lstat(path)
    if not follow and not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if not hasattr(os, "getuid"):
        return None
    if st.st_uid != os.getuid():
        return f"is owned by user id {st.st_uid}, not by this user ({os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = " and ".join(w for w, bit in (("its group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if st.st_mode & bit)
        return f"is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def cache_root() -> Path:
    """glowsdk's cache folder: $GLOWSDK_CACHE_DIR, else $XDG_CACHE_HOME/glowsdk, else ~/.cache/glowsdk
    (the XDG base directory rule: a relative XDG_CACHE_HOME is ignored)."""
    if os.environ.get("GLOWSDK_CACHE_DIR"):
        return Path(os.environ["GLOWSDK_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "glowsdk"


def cache_dir() -> Path:
    """Where entries live: the `cpu` folder of cache_root()."""
    return cache_root() / "cpu"


@dataclass(frozen=True)
class CacheEntry:
    """One stored image: its file, size, when it was last used, and the network's inputs and outputs
    (None when the file is not a readable image: `clear` still removes it)."""

    path: Path
    bytes: int
    last_used: float
    bindings: list[str] | None


def _budget_mb() -> int:
    text = os.environ.get("GLOWSDK_CACHE_MAX_MB", str(DEFAULT_MAX_MB))
    if not text.strip().isdigit():
        raise GlowError(f"GLOWSDK_CACHE_MAX_MB={text!r}: expected a whole number of MiB")
    return int(text)


@lru_cache(maxsize=1)
def compiler_identity() -> str:
    """glowsdk's version and a digest of its sources, LLVM's and llvmlite's versions, this CPU."""
    package = Path(__file__).parents[2]
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    name, features = host_cpu()
    return json.dumps([FORMAT_VERSION, __version__, digest.hexdigest(), llvmlite.__version__,
                       list(llvm.llvm_version_info), llvm.get_process_triple(), name, features])


def _canonical(value: Any) -> str:
    """An attribute as exact, address-free text (repr truncates arrays, so they are hashed)."""
    if isinstance(value, np.ndarray):
        data = np.ascontiguousarray(value)
        return f"array({data.dtype.str},{data.shape},{hashlib.sha256(data.tobytes()).hexdigest()})"
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(_canonical(v) for v in value) + ")"
    return repr(value)


def _function_text(function: Function) -> tuple[str, list[np.ndarray]]:
    """`function` as exact text in schedule order, with the storage it reads and writes declared
    where first used; and the constants' values in that order (hashed apart, in parallel)."""
    lines, values, seen = [], [], set()
    for node in function.nodes:
        for value in node.inputs:
            storage = None if value is None else value.node
            if isinstance(storage, (Constant, Placeholder)) and storage.name not in seen:
                seen.add(storage.name)
                lines.append(f"{type(storage).__name__} {storage.name} {storage.type!r} "
                             f"{getattr(storage, 'is_output', '')}")
                if isinstance(storage, Constant):
                    values.append(np.ascontiguousarray(storage.value))
        operands = ",".join("-" if v is None else v.name for v in node.inputs)
        attrs = ",".join(f"{k}={_canonical(v)}" for k, v in sorted(node.attrs.items()))
        lines.append(f"{node.kind} {node.name} ({operands}) {{{attrs}}} {node.types!r}")
    return "\n".join(lines), values


def cache_key(function: Function, options: Mapping[str, Any]) -> str:
    """The key of compiling `function` with the code-changing backend `options` on this host."""
    text, values = _function_text(function)
    parts = [text, *digests([memoryview(v.reshape(-1).view(np.uint8)) for v in values]),
             json.dumps(sorted(options.items()), default=repr), compiler_identity()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def imported_key(function: Function, options: Mapping[str, Any]) -> str:
    """The key of compiling the imported (not yet optimised) `function` through the whole pipeline with
    `options`: the same digest as `cache_key`, told apart from it."""
    return cache_key(function, {**options, "__stage__": "imported"})


class CompileCache:
    """Image files by key in one folder."""

    def __init__(self, folder: Path | None = None, max_bytes: int | None = None) -> None:
        self.folder = folder or cache_dir()
        self.max_bytes = max_bytes if max_bytes is not None else _budget_mb() << 20
        self.refused = False
        """Set once the folder failed the ownership check (warned once, then neither loaded nor stored)."""

    def path(self, key: str) -> Path:
        return self.folder / f"{key}{SUFFIX}"

    def trusted(self) -> bool:
        """Whether the folder (and the one holding it) exist and only this user can write there;
        an UnsafeCacheWarning when one exists and another user could."""
        if self.refused:
            return False
        for folder in (self.folder.parent, self.folder):
            try:
                if not folder.is_dir():
                    return False   # missing, or a file: a cache that cannot be used, not one to warn about
                why = unsafe(folder)
            except OSError as err:
                why = f"cannot be checked ({err.strerror or err})"
            if why is not None:
                warnings.warn(f"compile cache folder {folder} {why}: not used, compiling afresh (make it yours and "
                              f"not writable by others, e.g. chmod go-w, or set GLOWSDK_CACHE_DIR)",
                              UnsafeCacheWarning, stacklevel=2)
                self.refused = True
                return False
        return True

    def load(self, key: str) -> CpuImage | None:
        """The image stored under `key`, or None when there is none or it cannot be trusted
        (a bad entry is deleted so the compile that follows replaces it)."""
        if not self.trusted():
            return None
        path = self.path(key)
        try:
            why = unsafe(path, follow=False)
            if why is not None:
                warnings.warn(f"compile cache entry {path} {why}: not used, compiling afresh", UnsafeCacheWarning,
                              stacklevel=2)
                return None
            image = read_image(path, key)
        except FileNotFoundError:
            return None
        except (ImageFileError, OSError):
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # the least recently used entries go first
        return image

    def load_imported(self, imported: str) -> tuple[str, CpuImage] | None:
        """The key and image of the entry compiled from the imported graph keyed `imported`, or None (no such
        record, one that is not this user's alone, or its entry gone or bad)."""
        if not self.trusted():
            return None
        path = self.folder / f"{imported}{IMPORTED_SUFFIX}"
        try:
            why = unsafe(path, follow=False)
            if why is not None:
                warnings.warn(f"compile cache record {path} {why}: not used, compiling afresh", UnsafeCacheWarning,
                              stacklevel=2)
                return None
            key = path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        if len(key) != 64 or not all(c in "0123456789abcdef" for c in key):
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
            return None
        image = self.load(key)
        return None if image is None else (key, image)

    def store(self, key: str, image: CpuImage) -> None:
        """Save `image` under `key`, then trim the folder; a cache that cannot be written is skipped."""
        if self._write(self.path(key), lambda stream: write_image(stream, image, key)):
            with contextlib.suppress(OSError):
                self._trim()

    def store_imported(self, imported: str, key: str) -> None:
        """Record that the imported graph keyed `imported` compiled to the entry `key`."""
        self._write(self.folder / f"{imported}{IMPORTED_SUFFIX}", lambda stream: stream.write(key.encode()))

    def _write(self, path: Path, write: Callable[[BinaryIO], object]) -> bool:
        """Write `path` in the folder through a temporary file and a rename; False where it cannot be written."""
        try:
            self.folder.parent.parent.mkdir(parents=True, exist_ok=True)
            for folder in (self.folder.parent, self.folder):
                folder.mkdir(mode=0o700, exist_ok=True)
            if not self.trusted():
                return False
            fd, partial = tempfile.mkstemp(dir=self.folder, suffix=".partial")
            try:
                with os.fdopen(fd, "wb") as stream:
                    write(stream)
                os.replace(partial, path)
            finally:
                Path(partial).unlink(missing_ok=True)
            return True
        except OSError:
            return False

    def entries(self) -> list[CacheEntry]:
        """The stored images, the most recently used first (partial writes included: they take space too)."""
        found = []
        if not self.folder.is_dir():
            return found
        for path in [*self.folder.glob(f"*{SUFFIX}"), *self.folder.glob("*.partial")]:
            try:
                st = path.lstat()
            except OSError:
                continue
            try:
                bindings = [f"{b['role']} {b['name']}: {b['elem']}<{'x'.join(map(str, b['shape']))}>"
                            for b in describe_image(path)["bindings"]]
            except (ImageFileError, OSError, KeyError, TypeError):
                bindings = None
            found.append(CacheEntry(path, st.st_size, st.st_mtime, bindings))
        return sorted(found, key=lambda e: e.last_used, reverse=True)

    def clear(self) -> tuple[int, int]:
        """Remove every entry (and partial write); the count and bytes removed. The folder itself stays."""
        removed = freed = 0
        for entry in self.entries():
            try:
                entry.path.unlink()
            except FileNotFoundError:
                continue
            removed += 1
            freed += entry.bytes
        for path in self.folder.glob(f"*{IMPORTED_SUFFIX}") if self.folder.is_dir() else ():
            path.unlink(missing_ok=True)
        return removed, freed

    def _trim(self) -> None:
        entries = sorted(self.folder.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_mtime, reverse=True)
        total = 0
        for path in entries:
            total += path.stat().st_size
            if total > self.max_bytes and path is not entries[0]:
                path.unlink(missing_ok=True)

