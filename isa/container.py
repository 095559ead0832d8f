"""The `.npub` container: an NPU program with everything a loader needs, validated before use.

A file is an 80-byte header, a section table, and seven sections (instructions, constants,
tensors, bindings, memory plan, debug, metadata), each with its own CRC-32. Addresses in
the binary are absolute within the DRAM plan: a loader copies the constants section to
the constants region, the host writes inputs to and reads outputs from the tensors the
bindings name, and no instruction is patched at load time (there are no relocations).
`read_npub` checks every byte before returning; `write_npub` validates what it wrote by
reading it back, so the writer cannot produce a file the reader refuses. The byte-level
reference is vendor_guide/npub_format.md.
"""
from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass, field

from glowsdk.files import atomic_write

from . import npub_instructions
from .config import ArchConfig, config_hash
from .encoding import Instr
from .errors import IsaError
from .npub_layout import (
    FORMAT_VERSION,
    HEADER,
    MAGIC,
    MAX_SECTION_ALIGNMENT,
    SECTION_ENTRY,
    SECTION_KINDS,
    NpubError,
    SectionKind,
    Span,
)
from .sections import (
    Bindings,
    DebugRange,
    MemoryPlan,
    TensorInfo,
    pack_bindings,
    pack_debug,
    pack_metadata,
    pack_plan,
    pack_tensors,
    unpack_bindings,
    unpack_debug,
    unpack_metadata,
    unpack_plan,
    unpack_tensors,
)
from .table import ISA_VERSION

MAX_FILE_SIZE = 1 << 32
CONFIG_HASH_BYTES = 32


@dataclass(frozen=True)
class SectionInfo:
    """One section-table entry of a file that was read."""

    kind: SectionKind
    offset: int
    size: int
    alignment: int
    crc32: int


@dataclass
class NpuBinary:
    """A compiled NPU program: the decoded content of one `.npub` file.

    `sections` and `file_size` describe the file it was read from (empty for one built in memory).
    """

    config_hash: bytes
    """SHA-256 of the architecture configuration (32 bytes; the writer also takes the hex string)."""
    plan: MemoryPlan
    instructions: list[Instr] = field(default_factory=list)
    constants: bytes = b""
    tensors: list[TensorInfo] = field(default_factory=list)
    bindings: Bindings = field(default_factory=Bindings)
    debug: list[DebugRange] = field(default_factory=list)
    metadata: dict = field(default_factory=dict)
    isa_version: tuple[int, int] = ISA_VERSION
    format_version: tuple[int, int] = FORMAT_VERSION
    sections: tuple[SectionInfo, ...] = ()
    file_size: int = 0

    def layer_of(self, index: int) -> DebugRange | None:
        """The debug range (layer) instruction `index` belongs to, if the debug table names one."""
        for r in self.debug:
            if r.start <= index < r.stop:
                return r
        return None

    def constant_bytes(self, tensor: TensorInfo) -> bytes:
        """The initial bytes of a tensor stored in the constants region."""
        start = tensor.dram_address - self.plan.constants.base
        if not self.plan.constants.holds(tensor.dram_address, tensor.size_bytes):
            raise ValueError(f"tensor '{tensor.name}' is not a constant")
        return self.constants[start:start + tensor.size_bytes]


def _align(at: int, alignment: int) -> int:
    return -(-at // alignment) * alignment


def pack_npub(binary: NpuBinary) -> bytes:
    """The file's bytes: header, section table, then the sections in kind order, each aligned."""
    packers = {
        SectionKind.INSTRUCTIONS: lambda: npub_instructions.encode_all(binary.instructions),
        SectionKind.CONSTANTS: lambda: bytes(binary.constants),
        SectionKind.TENSORS: lambda: pack_tensors(binary.tensors),
        SectionKind.BINDINGS: lambda: pack_bindings(binary.bindings),
        SectionKind.MEMORY_PLAN: lambda: pack_plan(binary.plan),
        SectionKind.DEBUG: lambda: pack_debug(binary.debug),
        SectionKind.METADATA: lambda: pack_metadata(binary.metadata),
    }
    config = _hash_bytes(binary.config_hash)
    if len(config) != CONFIG_HASH_BYTES:
        raise IsaError(f"the configuration hash has {len(config)} bytes, not {CONFIG_HASH_BYTES}")
    payloads = {}
    for kind, pack in packers.items():
        try:
            payloads[kind] = pack()
        except (KeyError, ValueError, TypeError, struct.error) as err:
            raise IsaError(f"cannot write the {kind.label} section: {type(err).__name__}: {err}") from None
    table_offset = HEADER.size
    at = table_offset + len(payloads) * SECTION_ENTRY.size
    body = bytearray()
    entries = []
    for kind, payload in payloads.items():
        alignment = SECTION_KINDS[kind][0]
        start = _align(at, alignment)
        body += bytes(start - at) + payload
        entries.append(SECTION_ENTRY.pack(kind=kind, alignment=alignment, offset=start, size=len(payload),
                                          crc32=zlib.crc32(payload)))
        at = start + len(payload)
    table = b"".join(entries)
    header = HEADER.pack(magic=MAGIC, format_major=FORMAT_VERSION[0], format_minor=FORMAT_VERSION[1],
                         isa_major=binary.isa_version[0], isa_minor=binary.isa_version[1],
                         config_hash=config, section_count=len(entries),
                         section_table_offset=table_offset, file_size=at, section_table_crc32=zlib.crc32(table))
    header = header[:-4] + zlib.crc32(header[:-4]).to_bytes(4, "little")
    return header + table + bytes(body)


def write_npub(path: str | os.PathLike, binary: NpuBinary) -> None:
    """Write `binary` to `path` atomically (a temporary file, then a rename), after validating it."""
    data = pack_npub(binary)
    read_npub(data, name=os.fspath(path))
    try:
        atomic_write(path, data)
    except OSError as err:
        raise NpubError(os.fspath(path), "file", 0, f"cannot write ({err.strerror or err})") from None


def _load(source: str | os.PathLike | bytes | bytearray | memoryview, name: str | None) -> tuple[bytes, str]:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), name or "<bytes>"
    path = os.fspath(source)
    name = name or path
    try:
        size = os.path.getsize(path)
        if size > MAX_FILE_SIZE:
            raise NpubError(name, "file", 0, f"{size} bytes is more than the {MAX_FILE_SIZE}-byte limit")
        with open(path, "rb") as f:
            return f.read(), name
    except OSError as err:
        raise NpubError(name, "file", 0, f"cannot read ({err.strerror or err})") from None


def _hash_bytes(value: bytes | str) -> bytes:
    """A configuration hash given as bytes or as hex (as `isa.config.config_hash` returns it)."""
    return bytes.fromhex(value) if isinstance(value, str) else bytes(value)


def _read_header(data: memoryview, name: str, expected_hashes: list[bytes | str]) -> dict:
    """The header's fields, after checking magic, versions, CRC, configuration and flags."""
    head = Span(name, "header", data, 0, min(len(data), HEADER.size))
    if bytes(data[:len(MAGIC)]) != MAGIC:
        if len(data) < len(MAGIC) and MAGIC.startswith(bytes(data)):
            raise head.error(len(data), f"truncated: the file has {len(data)} bytes, less than the magic")
        raise head.error(0, f"not an NPU binary: starts with {bytes(data[:8]).hex(' ')}, expected the magic "
                         f"{MAGIC.hex(' ')}")
    if len(data) < HEADER.size:
        raise head.error(len(data), f"truncated: the file has {len(data)} bytes, the header needs {HEADER.size}")
    h = HEADER.unpack(data, 0)
    version = (h["format_major"], h["format_minor"])
    if version[0] != FORMAT_VERSION[0] or version[1] > FORMAT_VERSION[1]:
        raise head.error(HEADER.offsets["format_major"], f"format version {version[0]}.{version[1]} is not "
                         f"supported (this reader reads {FORMAT_VERSION[0]}.0 to {FORMAT_VERSION[0]}."
                         f"{FORMAT_VERSION[1]})")
    crc = zlib.crc32(data[:HEADER.offsets["header_crc32"]])
    if crc != h["header_crc32"]:
        raise head.error(HEADER.offsets["header_crc32"], f"header CRC-32 is 0x{crc:08x}, the header says "
                         f"0x{h['header_crc32']:08x}")
    npub_instructions.check_isa_version(head, (h["isa_major"], h["isa_minor"]))
    for expected in expected_hashes:
        if h["config_hash"] != _hash_bytes(expected):
            raise head.error(HEADER.offsets["config_hash"], f"built for architecture configuration "
                             f"{h['config_hash'].hex()[:16]}..., but the configuration in use is "
                             f"{_hash_bytes(expected).hex()[:16]}...")
    if h["flags"]:
        raise head.error(HEADER.offsets["flags"], f"unknown flags 0x{h['flags']:x} (none are defined in format "
                         f"{version[0]}.{version[1]})")
    return h


def _read_table(data: memoryview, name: str, h: dict) -> list[SectionInfo]:
    """The section table, checked: bounds, CRC, kinds, alignment, overlaps, truncation."""
    file_size, count, table_at = h["file_size"], h["section_count"], h["section_table_offset"]
    head = Span(name, "header", data, 0, HEADER.size)
    if count != len(SectionKind):
        raise head.error(HEADER.offsets["section_count"], f"{count} sections; format 1.x files have "
                         f"{len(SectionKind)}, one of each kind")
    table_end = table_at + count * SECTION_ENTRY.size
    if table_at % 8 or table_at < HEADER.size or table_end > file_size:
        raise head.error(HEADER.offsets["section_table_offset"], f"section table at bytes {table_at}..{table_end} "
                         f"is not 8-aligned between the header ({HEADER.size}) and the end of file ({file_size})")
    if len(data) != file_size:
        _file_size_error(data, name, file_size, table_at, table_end)
    table = Span(name, "section table", data, table_at, table_end - table_at)
    crc = zlib.crc32(table.bytes())
    if crc != h["section_table_crc32"]:
        raise table.error(0, f"section table CRC-32 is 0x{crc:08x}, the header says "
                          f"0x{h['section_table_crc32']:08x}")
    sections: dict[SectionKind, SectionInfo] = {}
    for i in range(count):
        at = i * SECTION_ENTRY.size
        e = table.record(SECTION_ENTRY, at, f"entry {i}")
        if e["kind"] not in set(SectionKind):
            raise table.error(at, f"entry {i}: unknown section kind {e['kind']}")
        kind = SectionKind(e["kind"])
        if kind in sections:
            raise table.error(at, f"entry {i}: a second '{kind.label}' section")
        minimum = SECTION_KINDS[kind][0]
        alignment, offset, size = e["alignment"], e["offset"], e["size"]
        if alignment & (alignment - 1) or not minimum <= alignment <= MAX_SECTION_ALIGNMENT:
            raise table.error(at + SECTION_ENTRY.offsets["alignment"], f"section '{kind.label}': alignment "
                              f"{alignment} is not a power of two in {minimum}..{MAX_SECTION_ALIGNMENT}")
        if offset % alignment:
            raise table.error(at + SECTION_ENTRY.offsets["offset"], f"section '{kind.label}': offset {offset} is "
                              f"not a multiple of its alignment {alignment}")
        if offset + size > file_size:
            raise table.error(at + SECTION_ENTRY.offsets["size"], f"section '{kind.label}': bytes {offset}.."
                              f"{offset + size} run past the end of the file ({file_size} bytes)")
        sections[kind] = SectionInfo(kind, offset, size, alignment, e["crc32"])
    _check_coverage(data, name, table_end, table_at, sections)
    for s in sections.values():
        crc = zlib.crc32(data[s.offset:s.offset + s.size])
        if crc != s.crc32:
            raise NpubError(name, f"section '{s.kind.label}'", s.offset, f"CRC-32 of bytes {s.offset}.."
                            f"{s.offset + s.size} is 0x{crc:08x}, the section table says 0x{s.crc32:08x}")
    return sorted(sections.values(), key=lambda s: s.kind)


def _file_size_error(data: memoryview, name: str, file_size: int, table_at: int, table_end: int) -> None:
    """Name what a wrong file length cuts: the section table or the first section past the end."""
    whole = Span(name, "file", data, 0, len(data))
    if len(data) > file_size:
        raise whole.error(file_size, f"{len(data) - file_size} bytes after the end the header declares "
                          f"({file_size} bytes)")
    cut = "the section table is cut"
    if table_end <= len(data):
        entries = [SECTION_ENTRY.unpack(data, table_at + i * SECTION_ENTRY.size)
                   for i in range((table_end - table_at) // SECTION_ENTRY.size)]
        past = sorted((e["offset"], e["offset"] + e["size"], e["kind"]) for e in entries
                      if e["offset"] + e["size"] > len(data))
        if past:
            start, end, kind = past[0]
            label = SectionKind(kind).label if kind in set(SectionKind) else f"kind {kind}"
            cut = f"section '{label}' (bytes {start}..{end}) is cut"
    raise whole.error(len(data), f"truncated: the file has {len(data)} bytes, the header declares {file_size}; "
                      f"{cut}")


def _check_coverage(data: memoryview, name: str, table_end: int, table_at: int,
                    sections: dict[SectionKind, SectionInfo]) -> None:
    """Header, table and sections do not overlap, and every byte between them is zero padding."""
    spans = [(0, HEADER.size, "the header"), (table_at, table_end, "the section table")]
    spans += [(s.offset, s.offset + s.size, f"section '{s.kind.label}'") for s in sections.values() if s.size]
    spans.sort()
    at = 0
    previous = ""
    for start, end, label in spans:
        if start < at:
            raise NpubError(name, label.removeprefix("the "), start, f"{label} (bytes {start}..{end}) overlaps "
                            f"{previous}")
        _check_zero(data, name, at, start)
        at, previous = end, f"{label} (ending at byte {end})"
    _check_zero(data, name, at, len(data))


def _check_zero(data: memoryview, name: str, start: int, end: int) -> None:
    gap = bytes(data[start:end])
    rest = gap.lstrip(b"\0")
    if rest:
        at = end - len(rest)
        raise NpubError(name, "padding", at, f"byte 0x{data[at]:02x} in the padding between parts "
                        f"(bytes {start}..{end}) must be zero")


def read_npub(source: str | os.PathLike | bytes, expect_config_hash: bytes | str | None = None,
              *, config: ArchConfig | None = None, name: str | None = None) -> NpuBinary:
    """Read and validate a `.npub` file (a path or its bytes); raises NpubError naming the first fault.

    With `config` (the machine that will run it), the binary must have been built for it, the plan must
    fit its DRAM, and every instruction must run on it with its DRAM accesses inside the plan.
    """
    raw, name = _load(source, name)
    data = memoryview(raw)
    expected = [h for h in (expect_config_hash, config and config_hash(config)) if h is not None]
    h = _read_header(data, name, expected)
    sections = _read_table(data, name, h)
    spans = {s.kind: Span(name, f"section '{s.kind.label}'", data, s.offset, s.size) for s in sections}
    plan = unpack_plan(spans[SectionKind.MEMORY_PLAN])
    constants = spans[SectionKind.CONSTANTS]
    if constants.size != plan.constants.size:
        raise constants.error(0, f"the constants section has {constants.size} bytes, the plan's constants "
                              f"region {plan.constants.size}; they must be equal")
    tensors = unpack_tensors(spans[SectionKind.TENSORS], plan)
    bindings = unpack_bindings(spans[SectionKind.BINDINGS], tensors, plan)
    instructions = npub_instructions.decode_all(spans[SectionKind.INSTRUCTIONS], plan)
    if config is not None:
        if plan.dram_size > config.dram_bytes:
            raise spans[SectionKind.MEMORY_PLAN].error(0, f"the plan needs {plan.dram_size} bytes of DRAM, "
                                                       f"architecture '{config.name}' has {config.dram_bytes}")
        npub_instructions.check_on_machine(spans[SectionKind.INSTRUCTIONS], instructions, plan, config)
    debug = unpack_debug(spans[SectionKind.DEBUG], len(instructions))
    metadata = unpack_metadata(spans[SectionKind.METADATA])
    return NpuBinary(config_hash=h["config_hash"], plan=plan, instructions=instructions, constants=constants.bytes(),
                     tensors=tensors, bindings=bindings, debug=debug, metadata=metadata,
                     isa_version=(h["isa_major"], h["isa_minor"]),
                     format_version=(h["format_major"], h["format_minor"]), sections=tuple(sections),
                     file_size=len(data))
