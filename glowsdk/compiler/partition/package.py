"""A partitioned model in one file: the target's compiled partitions and the host's, with a manifest.

The file is a zip archive (stored, not compressed) of:
  manifest.json      format, version, target, fallback, the network's inputs and outputs, and per
                     partition its device, backend, border tensors, work, and the SHA-256 of its members;
  p<k>.bin           a target partition as the target writes it (`CompiledFunction.save`: an .npub);
  p<k>.json, p<k>.npz  a host partition as a function record (glowsdk.graph.serialize) and its arrays.
Reading checks the manifest against the archive member by member (names, sizes, digests) before any
member is used; arrays are read with allow_pickle=False; nothing is executed. vendor_guide/partial_chips.md
documents the format.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import zipfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import GlowError
from ...files import atomic_write
from ...graph.function import Function
from ...graph.serialize import function_from_data, type_from_json, type_to_json
from ...graph.types import Type

FORMAT = "glowsdk-partitioned"
VERSION = 1
MAGIC = b"PK\x03\x04"
MAX_MEMBER_BYTES = 1 << 32


class PackageError(GlowError):
    """A partitioned-model file that is malformed, truncated, or fails its checks; the message names it."""


@dataclass
class PackagePart:
    """One partition read back: the target's payload (bytes) or the host's function."""

    index: int
    device: str
    backend: str
    inputs: list[str]
    outputs: list[str]
    macs: int
    border_bytes: int
    payload: bytes | None = None
    function: Function | None = None


@dataclass
class Package:
    target: str
    fallback: str
    inputs: dict[str, Type]
    outputs: dict[str, Type]
    parts: list[PackagePart]


def is_package(path: str | os.PathLike) -> bool:
    """Whether `path` starts like a partitioned-model file (a zip archive) rather than a single binary."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_package(path: str | os.PathLike, manifest: dict[str, Any], members: dict[str, bytes]) -> None:
    """Write the archive atomically; `manifest["partitions"][k]["members"]` gets each member's digest."""
    for part in manifest["partitions"]:
        part["members"] = {name: _digest(members[name]) for name in part["members"]}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("manifest.json", json.dumps(manifest, indent=1))
        for name, data in members.items():
            archive.writestr(name, data)
    atomic_write(path, buffer.getvalue())


def host_members(index: int, record: dict[str, Any], arrays: dict[str, np.ndarray]) -> dict[str, bytes]:
    """The members of a host partition: its function record and its arrays."""
    npz = io.BytesIO()
    np.savez(npz, **arrays)
    return {f"p{index}.json": json.dumps(record).encode(), f"p{index}.npz": npz.getvalue()}


def target_member(index: int, save) -> dict[str, bytes]:
    """The member of a target partition, written by its compiled function's `save(path)`."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "part.bin")
        save(path)
        with open(path, "rb") as f:
            return {f"p{index}.bin": f.read()}


def types_json(types: dict[str, Type]) -> dict[str, Any]:
    return {name: type_to_json(t) for name, t in types.items()}


def read_package(path: str | os.PathLike) -> Package:
    """Read and check a partitioned-model file; PackageError (one line, naming the file and what) if it is bad."""
    where = os.fspath(path)
    try:
        with zipfile.ZipFile(where) as archive:
            infos = {info.filename: info for info in archive.infolist()}
            if "manifest.json" not in infos:
                raise PackageError(f"{where}: no manifest.json: not a partitioned model")
            manifest = json.loads(_read(archive, infos, "manifest.json", where))
            return _package(archive, infos, manifest, where)
    except zipfile.BadZipFile as err:
        raise PackageError(f"{where}: not a readable archive ({err})") from None
    except (OSError, EOFError) as err:
        raise PackageError(f"{where}: cannot read ({err})") from None
    except json.JSONDecodeError as err:
        raise PackageError(f"{where}: a member is not JSON ({err})") from None
    except (KeyError, TypeError, ValueError) as err:
        raise PackageError(f"{where}: malformed manifest ({type(err).__name__}: {err})") from None


def _read(archive: zipfile.ZipFile, infos: dict, name: str, where: str) -> bytes:
    info = infos.get(name)
    if info is None:
        raise PackageError(f"{where}: member {name} is missing")
    if info.file_size > MAX_MEMBER_BYTES:
        raise PackageError(f"{where}: member {name} is {info.file_size} bytes, over the limit")
    return archive.read(info)


def _package(archive: zipfile.ZipFile, infos: dict, manifest: dict, where: str) -> Package:
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise PackageError(f"{where}: format {manifest.get('format')!r} version {manifest.get('version')!r}; "
                           f"this glowsdk reads {FORMAT} version {VERSION}")
    parts = []
    for k, entry in enumerate(manifest["partitions"]):
        if entry["index"] != k:
            raise PackageError(f"{where}: partition {k} is numbered {entry['index']}")
        data = {}
        for name, digest in entry["members"].items():
            data[name] = _read(archive, infos, name, where)
            if _digest(data[name]) != digest:
                raise PackageError(f"{where}: member {name} fails its SHA-256 check (corrupt or edited)")
        part = PackagePart(k, entry["device"], entry["backend"], list(entry["inputs"]), list(entry["outputs"]),
                           int(entry["macs"]), int(entry["border_bytes"]))
        if entry["device"] == "host":
            with np.load(io.BytesIO(data[f"p{k}.npz"]), allow_pickle=False) as npz:
                arrays = {key: npz[key] for key in npz.files}
            part.function = function_from_data(json.loads(data[f"p{k}.json"]), arrays, f"{where}: partition {k}")
        else:
            part.payload = data[f"p{k}.bin"]
        parts.append(part)
    inputs = {n: type_from_json(t, where) for n, t in manifest["inputs"].items()}
    outputs = {n: type_from_json(t, where) for n, t in manifest["outputs"].items()}
    return Package(manifest["target"], manifest["fallback"], inputs, outputs, parts)
