"""The compile cache: a second compile of the same network for the same CPU loads its image.

The key is a SHA-256 over everything that decides the machine code: the function
handed to the backend (every node, attribute, type and constant byte, in
schedule order; it follows from the model bytes and the graph-level options such
as batch and quantization), every backend option that changes code, the host
CPU's name and features, the LLVM and llvmlite versions, and glowsdk's version
and source digest (an edited kernel is a new compiler, so no stale code is
reused while developing). An entry is one image file (image_file.py) named by
its key under `$GLOWSDK_CACHE_DIR` (default ~/.cache/glowsdk/cpu); one that is
truncated, corrupt or written for another key is discarded and recompiled.
Writes go through a temporary file and a rename, so concurrent compiles are
safe. The least recently used entries go when the folder outgrows
`$GLOWSDK_CACHE_MAX_MB` (default 4096).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import llvmlite
import llvmlite.binding as llvm
import numpy as np

from ...errors import GlowError
from ...graph.function import Function
from ...graph.node import Constant, Placeholder
from .image import CpuImage
from .image_file import FORMAT_VERSION, ImageFileError, digests, read_image, write_image
from .jit import host_cpu

SUFFIX = ".glowcpu"
DEFAULT_MAX_MB = 4096


def cache_dir() -> Path:
    """Where entries live: $GLOWSDK_CACHE_DIR/cpu, else ~/.cache/glowsdk/cpu."""
    root = os.environ.get("GLOWSDK_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "glowsdk")
    return Path(root) / "cpu"


def _budget_mb() -> int:
    text = os.environ.get("GLOWSDK_CACHE_MAX_MB", str(DEFAULT_MAX_MB))
    if not text.strip().isdigit():
        raise GlowError(f"GLOWSDK_CACHE_MAX_MB={text!r}: expected a whole number of MiB")
    return int(text)


@lru_cache(maxsize=1)
def compiler_identity() -> str:
    """glowsdk's version and a digest of its sources, LLVM's and llvmlite's versions, this CPU."""
    from ... import __version__

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


class CompileCache:
    """Image files by key in one folder."""

    def __init__(self, folder: Path | None = None, max_bytes: int | None = None) -> None:
        self.folder = folder or cache_dir()
        self.max_bytes = max_bytes if max_bytes is not None else _budget_mb() << 20

    def path(self, key: str) -> Path:
        return self.folder / f"{key}{SUFFIX}"

    def load(self, key: str) -> CpuImage | None:
        """The image stored under `key`, or None when there is none or it cannot be trusted
        (a bad entry is deleted so the compile that follows replaces it)."""
        path = self.path(key)
        try:
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

    def store(self, key: str, image: CpuImage) -> None:
        """Save `image` under `key`, then trim the folder; a cache that cannot be written is skipped."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, partial = tempfile.mkstemp(dir=self.folder, suffix=".partial")
            try:
                with os.fdopen(fd, "wb") as stream:
                    write_image(stream, image, key)
                os.replace(partial, self.path(key))
            finally:
                Path(partial).unlink(missing_ok=True)
            self._trim()
        except OSError:
            return

    def _trim(self) -> None:
        entries = sorted(self.folder.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_mtime, reverse=True)
        total = 0
        for path in entries:
            total += path.stat().st_size
            if total > self.max_bytes and path is not entries[0]:
                path.unlink(missing_ok=True)

