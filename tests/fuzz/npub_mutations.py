"""Structure-aware mutations of a `.npub` file, at three levels.

- bytes: bit flips, runs of one byte or of random bytes, truncation (often at a part's edge),
  bytes appended;
- records: one field of the header, of a section-table entry, of a record of the tensor,
  binding, memory-plan or debug tables (their `count` and `pool_size` too), set to a value from
  `INTERESTING` or near its old value; one field of one instruction set as raw bits (past the
  encoder's checks: an illegal opcode, a field out of range, a reserved bit), or whole
  instructions deleted, duplicated or swapped; the metadata's JSON edited;
- objects: the decoded binary changed (plan regions, a tensor's address, size, shape or scale,
  bindings, debug ranges, instructions through `Instr.replace`) and packed again by `pack_npub`,
  which does not validate, so the file is well formed with a wrong meaning.

Then, most of the time, `reseal` recomputes every CRC so the mutant gets past the checksums into
the deeper checks. A mutation that does not apply (an empty section, a field the encoder
refuses) logs nothing and the next one is drawn; `mutate` always returns bytes and a log.
"""
from __future__ import annotations

import random
import struct
import zlib
from dataclasses import replace

from isa.container import pack_npub, read_npub
from isa.encoding import _LAYOUTS
from isa.errors import IsaError
from isa.npub_layout import (
    BINDING,
    DEBUG_RANGE,
    HEADER,
    REGION,
    SECTION_ENTRY,
    TABLE_HEADER,
    TENSOR,
    Record,
    SectionKind,
)
from isa.schema import INSTR_BYTES, OPCODE
from isa.sections import Region

INTERESTING = (0, 1, 2, 3, 7, 8, 15, 16, 63, 64, 65, 127, 128, 255, 256, 1023, 1024, 1025, 4095, 4096,
               0x7FFF, 0x8000, 0xFFFF, 0x10000, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF, 0x1_0000_0000,
               0x7FFF_FFFF_FFFF_FFFF, 0xFFFF_FFFF_FFFF_FFFF)
FLOATS = (0.0, -0.0, 1.0, -1.0, 1e-300, 5e-324, 1e300, float("inf"), float("-inf"), float("nan"))
TABLES: dict[SectionKind, Record] = {SectionKind.TENSORS: TENSOR, SectionKind.BINDINGS: BINDING,
                                     SectionKind.MEMORY_PLAN: REGION, SectionKind.DEBUG: DEBUG_RANGE}


class Skip(Exception):
    """The mutation does not apply to this file."""


def sections(data: bytes) -> dict[SectionKind, tuple[int, int]]:
    """(offset, size) of each section the table at byte 80 names, whatever the file's state."""
    found = {}
    for i in range(len(SectionKind)):
        at = HEADER.size + i * SECTION_ENTRY.size
        if at + SECTION_ENTRY.size > len(data):
            break
        e = SECTION_ENTRY.unpack(memoryview(data), at)
        if e["kind"] in set(SectionKind):
            found[SectionKind(e["kind"])] = (e["offset"], e["size"])
    return found


def reseal(data: bytes | bytearray) -> bytes:
    """Every CRC recomputed (sections, table, header), from the header's own table offset and count."""
    data = bytearray(data)
    if len(data) < HEADER.size:
        return bytes(data)
    h = HEADER.unpack(memoryview(data), 0)
    table_at, count = h["section_table_offset"], min(h["section_count"], 64)
    for i in range(count):
        at = table_at + i * SECTION_ENTRY.size
        if at + SECTION_ENTRY.size > len(data):
            break
        e = SECTION_ENTRY.unpack(memoryview(data), at)
        crc = zlib.crc32(data[e["offset"]:e["offset"] + e["size"]]) if e["offset"] < len(data) else 0
        struct.pack_into("<I", data, at + SECTION_ENTRY.offsets["crc32"], crc)
    if table_at < len(data):
        crc = zlib.crc32(data[table_at:table_at + count * SECTION_ENTRY.size])
        struct.pack_into("<I", data, HEADER.offsets["section_table_crc32"], crc)
    struct.pack_into("<I", data, HEADER.offsets["header_crc32"], zlib.crc32(data[:HEADER.offsets["header_crc32"]]))
    return bytes(data)


def _number(rng: random.Random, old: int, bits: int, signed: bool = False) -> int:
    """A new value for an integer field of `bits` bits: interesting, near the old one, or random."""
    pick = rng.random()
    if pick < 0.5:
        value = rng.choice(INTERESTING)
    elif pick < 0.8:
        value = old + rng.choice((-1, 1, -8, 8, -64, 64, 16, -16))
    else:
        value = rng.getrandbits(bits)
    value &= (1 << bits) - 1
    if signed and value >> (bits - 1):
        value -= 1 << bits
    return value


def _set_field(rng: random.Random, data: bytearray, rec: Record, at: int) -> str:
    """Set one field of the record at byte `at` (one item of an array field)."""
    f = rng.choice([f for f in rec.fields if not f.code.endswith("s") or f.name == "magic"])
    base = at + rec.offsets[f.name]
    if base + f.size > len(data):  # an earlier mutation cut the file
        raise Skip
    if f.code.endswith("s"):
        data[base + rng.randrange(f.size)] ^= 1 << rng.randrange(8)
        return f"{rec.name}.{f.name} bit"
    code = f.code[-1]
    size = struct.calcsize("<" + code)
    base += size * rng.randrange(f.items)
    if base + size > len(data):
        raise Skip
    if code == "d":
        struct.pack_into("<d", data, base, rng.choice(FLOATS))
    else:
        (old,) = struct.unpack_from("<" + code, data, base)
        struct.pack_into("<" + code, data, base, _number(rng, old, size * 8, code.islower()))
    return f"{rec.name}.{f.name}"


# -- byte level ---------------------------------------------------------------------------------
def bit_flips(rng, data: bytearray) -> str:
    for _ in range(rng.randint(1, 8)):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return "bit flips"


def byte_run(rng, data: bytearray) -> str:
    at, n = rng.randrange(len(data)), rng.choice((1, 2, 4, 8, 16, 64))
    run = bytes([rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))]) * n if rng.random() < 0.5 else rng.randbytes(n)
    data[at:at + n] = run[:len(data) - at]
    return "byte run"


def truncate(rng, data: bytearray) -> str:
    edges = [HEADER.size, HEADER.size + 7 * SECTION_ENTRY.size]
    edges += [x for off, size in sections(bytes(data)).values() for x in (off, off + size)]
    cut = rng.choice(edges) + rng.choice((-1, 0, 1)) if rng.random() < 0.6 else rng.randrange(len(data))
    del data[max(cut, 0):]
    return "truncate"


def append(rng, data: bytearray) -> str:
    data += bytes(rng.choice((1, 8, 64))) if rng.random() < 0.5 else rng.randbytes(rng.randint(1, 64))
    return "append"


# -- record level -------------------------------------------------------------------------------
def header_field(rng, data: bytearray) -> str:
    return _set_field(rng, data, HEADER, 0)


def entry_field(rng, data: bytearray) -> str:
    return _set_field(rng, data, SECTION_ENTRY, HEADER.size + rng.randrange(7) * SECTION_ENTRY.size)


def table_field(rng, data: bytearray) -> str:
    kind = rng.choice(list(TABLES))
    offset, size = sections(bytes(data)).get(kind, (0, 0))
    if size < TABLE_HEADER.size or offset + size > len(data):
        raise Skip
    count = TABLE_HEADER.unpack(memoryview(data), offset)["count"]
    rec = TABLES[kind]
    if rng.random() < 0.2 or not count:
        return _set_field(rng, data, TABLE_HEADER, offset)
    at = offset + TABLE_HEADER.size + rng.randrange(min(count, (size - TABLE_HEADER.size) // rec.size or 1)) * rec.size
    if at + rec.size > offset + size:
        raise Skip
    return _set_field(rng, data, rec, at)


def _instructions(data: bytes) -> tuple[int, int]:
    offset, size = sections(data).get(SectionKind.INSTRUCTIONS, (0, 0))
    if size < INSTR_BYTES or offset + size > len(data):
        raise Skip
    return offset, size // INSTR_BYTES


def instruction_field(rng, data: bytearray) -> str:
    """One field of one instruction set as raw bits: the opcode, a field, or a reserved bit."""
    offset, count = _instructions(bytes(data))
    at = offset + rng.randrange(count) * INSTR_BYTES
    word = int.from_bytes(data[at:at + INSTR_BYTES], "little")
    opcode = word & ((1 << OPCODE.kind.width) - 1)
    layout = next((lay for lay in _LAYOUTS.values() if lay.spec.opcode == opcode), None)
    pick = rng.random()
    if layout is None or pick < 0.1:
        lsb, width, what = OPCODE.lsb, OPCODE.kind.width, "opcode"
    elif pick < 0.15:
        lsb, width, what = rng.randrange(INSTR_BYTES * 8), 1, "any bit"
    else:
        f = rng.choice(layout.fields)
        lsb, width, what = f.lsb, f.kind.width, f"{layout.spec.mnemonic}.{f.name}"
    mask = ((1 << width) - 1) << lsb
    old = (word & mask) >> lsb
    word = (word & ~mask) | ((_number(rng, old, width) << lsb) & mask)
    data[at:at + INSTR_BYTES] = word.to_bytes(INSTR_BYTES, "little")
    return f"instruction field {what}"


def instruction_order(rng, data: bytearray) -> str:
    """Swap two instructions, or copy one over another (the section keeps its size)."""
    offset, count = _instructions(bytes(data))
    i, j = (offset + rng.randrange(count) * INSTR_BYTES for _ in range(2))
    a, b = bytes(data[i:i + INSTR_BYTES]), bytes(data[j:j + INSTR_BYTES])
    if rng.random() < 0.5:
        data[i:i + INSTR_BYTES], data[j:j + INSTR_BYTES] = b, a
        return "swap instructions"
    data[j:j + INSTR_BYTES] = a
    return "copy instruction"


def metadata_text(rng, data: bytearray) -> str:
    offset, size = sections(bytes(data)).get(SectionKind.METADATA, (0, 0))
    if not size or offset + size > len(data):
        raise Skip
    at = offset + rng.randrange(size)
    data[at] = rng.choice(b'{}[]",:0-e.\\\x00\x7f\xff nul') if rng.random() < 0.7 else rng.randrange(256)
    return "metadata byte"


# -- object level -------------------------------------------------------------------------------
def _edit_binary(rng, binary) -> str:
    """Change the decoded binary in one way `pack_npub` will still write."""
    plan, tensors = binary.plan, list(binary.tensors)
    choice = rng.randrange(9)
    if choice == 0:
        kind = rng.choice(("constants", "activations", "inputs", "outputs"))
        r = getattr(plan, kind)
        new = Region(_number(rng, r.base, 64) if rng.random() < 0.5 else r.base,
                     _number(rng, r.size, 64) if rng.random() < 0.7 else r.size)
        binary.plan = replace(plan, **{kind: new})
        return f"plan {kind}"
    if choice == 1 and tensors:
        i = rng.randrange(len(tensors))
        t = tensors[i]
        field = rng.choice(("dram_address", "size_bytes", "shape", "scale", "offset", "elem", "layout"))
        value = {"dram_address": lambda: _number(rng, t.dram_address, 64),
                 "size_bytes": lambda: _number(rng, t.size_bytes, 64),
                 "shape": lambda: tuple(_number(rng, d, 32) for d in t.shape[:rng.randint(0, 9)]),
                 "scale": lambda: rng.choice(FLOATS), "offset": lambda: _number(rng, t.offset, 32, True),
                 "elem": lambda: rng.choice(("int8", "int32", "float32", "uint8", "bogus")),
                 "layout": lambda: rng.choice(("row-major", "nhwc"))}[field]()
        tensors[i] = replace(t, **{field: value})
        binary.tensors = tensors
        return f"tensor {field}"
    if choice == 2 and tensors:
        t = rng.choice(tensors)
        binary.tensors = tensors + [replace(t, name=rng.choice((t.name, t.name + "\n", "", "x" * 1100, "\u202e")))]
        return "tensor added"
    if choice == 3:
        side = rng.choice(("inputs", "outputs"))
        names = dict(getattr(binary.bindings, side))
        names[rng.choice(("data", "x", "y\n", "", *names))] = rng.choice((0, 1, len(tensors), -1, 2**32 - 1))
        binary.bindings = replace(binary.bindings, **{side: names})
        return f"binding {side}"
    if choice == 4 and binary.debug:
        i = rng.randrange(len(binary.debug))
        r = binary.debug[i]
        binary.debug = binary.debug[:i] + [replace(r, start=_number(rng, r.start, 32),
                                                   stop=_number(rng, r.stop, 32))] + binary.debug[i + 1:]
        return "debug range"
    if choice == 5:
        binary.metadata = rng.choice(({}, {"model": "\n"}, {"x": [1] * 100}, {"a": {"b": {"c": None}}},
                                      {"model": 1e308}, {"": ""}))
        return "metadata"
    if choice == 6 and len(binary.instructions) > 1:
        program = list(binary.instructions)
        what = rng.choice(("delete", "duplicate", "truncate"))
        i = rng.randrange(len(program) - 1)
        if what == "delete":
            del program[i]
        elif what == "duplicate":
            program.insert(i, program[i])
        else:
            program = program[:i] + program[-1:]
        binary.instructions = program
        return f"{what} instructions"
    if choice == 7 and binary.instructions:
        program = list(binary.instructions)
        i = rng.randrange(len(program))
        fields = program[i].fields()
        if not fields:
            raise Skip
        name = rng.choice(list(fields))
        old = fields[name]
        value = _number(rng, old, 32) if isinstance(old, int) else old
        try:
            program[i] = program[i].replace(**{name: value})
        except (IsaError, TypeError, ValueError):
            raise Skip from None
        binary.instructions = program
        return f"instruction {program[i].mnemonic}.{name}"
    if choice == 8:
        binary.constants = binary.constants[:rng.randrange(len(binary.constants) + 1)] + rng.randbytes(
            rng.choice((0, 0, 1, 64)))
        return "constants resized"
    raise Skip


def object_edit(rng, data: bytearray) -> str:
    try:
        binary = read_npub(bytes(data))
    except Exception:  # noqa: BLE001  (an earlier mutation broke the file; this one then does not apply)
        raise Skip from None
    what = _edit_binary(rng, binary)
    try:
        data[:] = pack_npub(binary)
    except (IsaError, ValueError, TypeError, OverflowError, struct.error):
        raise Skip from None
    return what


MUTATIONS = ((bit_flips, 8), (byte_run, 6), (truncate, 4), (append, 2), (header_field, 8), (entry_field, 10),
             (table_field, 16), (instruction_field, 16), (instruction_order, 6), (metadata_text, 4),
             (object_edit, 20))
"""Each mutation and its weight."""


def mutate(data: bytes, rng: random.Random, edits: int) -> tuple[bytes, list[str]]:
    """`edits` mutations of `data`, then (three times in four) every CRC recomputed."""
    out = bytearray(data)
    log: list[str] = []
    functions, weights = zip(*MUTATIONS)
    tries = 0
    while len(log) < edits and tries < 20 and out:
        tries += 1
        mutation = rng.choices(functions, weights)[0]
        try:
            log.append(mutation(rng, out))
        except Skip:
            continue
    if rng.random() < 0.75:
        out = bytearray(reseal(out))
        log.append("resealed")
    return bytes(out), log
