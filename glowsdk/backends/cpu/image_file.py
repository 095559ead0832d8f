"""A CpuImage as one file: what the compile cache stores, checked before it is trusted.

Layout: a fixed prefix (magic, format version, length and SHA-256 of the JSON
description), the description (key, target, layout, bindings, exports, and each
section's name, size and digest), then the object files (`object.0`, `object.1`,
.. : one per part of the module, codegen/split.py) and the constant region, each
starting on an ALIGNMENT-byte boundary so the constants can be memory-mapped in
place instead of copied. A section's digest is the SHA-256 of the SHA-256s of
its 16 MiB chunks, computed on every core (hashlib releases the GIL), since a
network's weights run to hundreds of megabytes. Reading checks the magic, the
version, the key and every digest; anything else is an ImageFileError and the
file is not used. Nothing is unpickled or evaluated.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO, Sequence

import numpy as np

from .image import ALIGNMENT, Binding, CpuImage, Signature

MAGIC = b"GLOWCPU\0"
FORMAT_VERSION = 2
"""2: one object section per part of the module (1 had one `object` section)."""
_PREFIX = struct.Struct("<8sII32s")
"""magic, format version, JSON length, SHA-256 of the JSON."""
CHUNK = 1 << 24
PIECE = 1 << 20
"""Bytes file_digests reads at once."""
CONSTANTS = "constants"


def section_names(objects: int) -> list[str]:
    """The sections of an image of `objects` object files, in file order."""
    return [f"object.{index}" for index in range(objects)] + [CONSTANTS]


class ImageFileError(Exception):
    """An image file that cannot be trusted: wrong magic or version, another key, truncated, or corrupt."""


def digests(buffers: Sequence[memoryview]) -> list[str]:
    """The chunked SHA-256 digest (see the module docstring) of each buffer, hashed in parallel."""
    chunks = [(i, b[start:start + CHUNK]) for i, b in enumerate(buffers) for start in range(0, b.nbytes, CHUNK)]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        hashed = list(pool.map(lambda chunk: hashlib.sha256(chunk[1]).digest(), chunks))
    joined: list[bytes] = [b"" for _ in buffers]
    for (i, _), digest in zip(chunks, hashed):
        joined[i] += digest
    return [hashlib.sha256(j).hexdigest() for j in joined]


def file_digests(path: str | os.PathLike, ranges: Sequence[tuple[int, int]]) -> list[str]:
    """The same digest as `digests` of each (start, bytes) range of the file at `path`, read with
    pread a PIECE at a time: a check through a memory map would make every page of the constants
    resident in this process before the network runs (98 MB for resnet50, while the compiler's
    own copy of the weights is still alive)."""
    chunks = [(i, start + offset, min(CHUNK, size - offset))
              for i, (start, size) in enumerate(ranges) for offset in range(0, size, CHUNK)]
    descriptor = os.open(path, os.O_RDONLY)
    try:
        def digest(chunk: tuple[int, int, int]) -> bytes:
            _, at, size = chunk
            hashed = hashlib.sha256()
            for offset in range(0, size, PIECE):
                piece = os.pread(descriptor, min(PIECE, size - offset), at + offset)
                if not piece:
                    raise ImageFileError("truncated")
                hashed.update(piece)
            return hashed.digest()

        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            hashed = list(pool.map(digest, chunks))
    finally:
        os.close(descriptor)
    joined: list[bytes] = [b"" for _ in ranges]
    for (i, _, _), value in zip(chunks, hashed):
        joined[i] += value
    return [hashlib.sha256(j).hexdigest() for j in joined]


def _aligned(offset: int) -> int:
    return -(-offset // ALIGNMENT) * ALIGNMENT


def _sections(image: CpuImage) -> list[memoryview]:
    return [*(memoryview(code).cast("B") for code in image.objects), memoryview(image.constants).cast("B")]


def write_image(stream: BinaryIO, image: CpuImage, key: str) -> None:
    """Write `image`, compiled for `key`, to `stream` (positioned at 0) in the layout above."""
    buffers = _sections(image)
    description = image.describe(key)
    description["sections"] = [{"name": name, "bytes": b.nbytes, "digest": digest}
                               for name, b, digest in zip(section_names(len(image.objects)), buffers,
                                                          digests(buffers))]
    text = json.dumps(description, sort_keys=True).encode()
    stream.write(_PREFIX.pack(MAGIC, FORMAT_VERSION, len(text), hashlib.sha256(text).digest()))
    stream.write(text)
    position = _PREFIX.size + len(text)
    for b in buffers:
        stream.write(bytes(_aligned(position) - position))
        stream.write(b)
        position = _aligned(position) + b.nbytes


def _description(path: str | os.PathLike) -> tuple[dict, int, int]:
    """The checked JSON description of the image file at `path`, its length and the file's size."""
    with open(path, "rb") as stream:
        prefix = stream.read(_PREFIX.size)
        if len(prefix) != _PREFIX.size:
            raise ImageFileError("truncated prefix")
        magic, version, length, checksum = _PREFIX.unpack(prefix)
        if magic != MAGIC or version != FORMAT_VERSION:
            raise ImageFileError(f"not a version-{FORMAT_VERSION} glowsdk cpu image")
        text = stream.read(length)
        size = os.fstat(stream.fileno()).st_size
    if len(text) != length or hashlib.sha256(text).digest() != checksum:
        raise ImageFileError("description checksum mismatch")
    try:
        return json.loads(text), length, size
    except ValueError as err:
        raise ImageFileError(f"malformed description ({err})") from None


def describe_image(path: str | os.PathLike) -> dict:
    """What an image file says of itself (key, bindings, sections...), checked but without reading its code."""
    return _description(path)[0]


def read_image(path: str | os.PathLike, key: str) -> CpuImage:
    """The image in the file at `path`, checked against `key` and every digest; its constants
    stay memory-mapped (copy on write), checked in the file before they are mapped so that only
    what the network reads becomes resident. ImageFileError for a file that cannot be trusted."""
    data, length, size = _description(path)
    try:
        if data["key"] != key:
            raise ImageFileError("compiled for another key")
        sections = data["sections"]
        if len(sections) < 2 or [s["name"] for s in sections] != section_names(len(sections) - 1):
            raise ImageFileError("unexpected sections")
        position, ranges = _PREFIX.size + length, []
        for section in sections:
            start = _aligned(position)
            position = start + section["bytes"]
            if position > size:
                raise ImageFileError(f"section {section['name']} truncated")
            ranges.append((start, section["bytes"]))
        objects = []
        with open(path, "rb") as stream:
            for at, nbytes in ranges[:-1]:
                stream.seek(at)
                objects.append(stream.read(nbytes))
        # the code is checked in the bytes that will run; the constants in the file, then mapped
        constants = ranges[-1]
        found = [*digests([memoryview(code) for code in objects]), *file_digests(path, [constants])]
        for section, digest in zip(sections, found):
            if digest != section["digest"]:
                raise ImageFileError(f"section {section['name']} digest mismatch")
        mapped = np.memmap(path, dtype=np.uint8, mode="c") if size else np.zeros(0, np.uint8)
        exports = tuple(Signature.from_json(s) for s in data["exports"])
        return CpuImage(tuple(objects), exports, mapped[constants[0]:constants[0] + constants[1]],
                        int(data["activation_bytes"]),
                        int(data["placeholder_bytes"]), tuple(Binding.from_json(b) for b in data["bindings"]),
                        data["triple"], data["cpu"])
    except (KeyError, TypeError, ValueError) as err:
        raise ImageFileError(f"malformed description ({type(err).__name__}: {err})") from None
