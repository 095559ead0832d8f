"""The .npub container: round trip, every corruption's precise error, `glowsdk disasm` (fuzzing: test_container_fuzz)."""
from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

import pytest
from glowsdk.cli.main import main as cli_main
from isa import PRESETS, assemble, config_hash, container, npub_doc
from isa.table import ISA_VERSION
from isa.container import NpuBinary, pack_npub, read_npub, write_npub
from isa.npub_layout import (BINDING, HEADER, REGION, SECTION_ENTRY, TABLE_HEADER, TENSOR, NpubError,
                             SectionKind)
from isa.sections import Bindings, DebugRange, MemoryPlan, Region, TensorInfo

GUIDE = Path(__file__).resolve().parent.parent / "vendor_guide"
HASH = bytes(range(32))
PROGRAM = """\
CONFIG_LOAD row_stride=32 plane_stride=0 col_stride=1 elem_bytes=1
LOAD dram=0x4000 space=spad sram=0x0 planes=1 rows=2 cols=32 ; signal s1
LOAD dram=0x0 space=spad sram=0x100 planes=1 rows=8 cols=32 ; signal s1
MATMUL inp=0x0 wgt=0x100 acc=0x0 rows=2 k=32 n=8 acc_mode=0 ; wait s1x2 signal s2
REQUANT dst=0x200 src=0x0 rows=2 cols=8 ; wait s2 signal s3
CONFIG_STORE row_stride=8 plane_stride=0 col_stride=1 elem_bytes=1
STORE dram=0x5000 space=spad sram=0x200 planes=1 rows=2 cols=8 ; wait s3
END
"""


def sample(**changes) -> NpuBinary:
    """A small valid program: one weight constant, an input, an activation, an output."""
    plan = MemoryPlan(constants=Region(0, 256), activations=Region(0x1000, 0x1000), inputs=Region(0x4000, 64),
                      outputs=Region(0x5000, 64))
    fields = dict(
        config_hash=HASH, plan=plan, instructions=assemble(PROGRAM), constants=bytes(range(256)),
        tensors=[TensorInfo("conv1.w", "int8", (32, 8), 0, 256),
                 TensorInfo("data", "int8", (2, 32), 0x4000, 64, 0.25, -3),
                 TensorInfo("conv1.out", "int32", (2, 8), 0x1000, 64),
                 TensorInfo("prob", "int8", (2, 8), 0x5000, 16, 1 / 256, -128)],
        bindings=Bindings(inputs={"data": 1}, outputs={"prob": 3}),
        debug=[DebugRange(0, 5, "conv1", "Conv"), DebugRange(5, 7, "prob", "")],
        metadata={"model": "tiny", "compiler": "glowsdk test", "options": {"seed": 0}})
    fields.update(changes)
    return NpuBinary(**fields)


DATA = pack_npub(sample())
LAYOUT = {s.kind: s for s in read_npub(DATA).sections}


def reseal(data: bytes | bytearray) -> bytes:
    """Recompute every CRC (sections, table at byte 80, header) so a deliberate change reaches deeper checks."""
    data = bytearray(data)
    table_at = HEADER.size
    for i in range(len(SectionKind)):
        at = table_at + i * SECTION_ENTRY.size
        e = SECTION_ENTRY.unpack(memoryview(data), at)
        crc = zlib.crc32(data[e["offset"]:e["offset"] + e["size"]])
        struct.pack_into("<I", data, at + SECTION_ENTRY.offsets["crc32"], crc)
    table_crc = zlib.crc32(data[table_at:table_at + len(SectionKind) * SECTION_ENTRY.size])
    struct.pack_into("<I", data, HEADER.offsets["section_table_crc32"], table_crc)
    struct.pack_into("<I", data, HEADER.offsets["header_crc32"], zlib.crc32(data[:HEADER.offsets["header_crc32"]]))
    return bytes(data)


def patched(at: int, fmt: str, *values, data: bytes = DATA) -> bytes:
    out = bytearray(data)
    struct.pack_into("<" + fmt, out, at, *values)
    return reseal(out)


def in_section(kind: SectionKind, at: int, fmt: str, *values) -> bytes:
    return patched(LAYOUT[kind].offset + at, fmt, *values)


def entry_at(kind: SectionKind, field: str) -> int:
    return HEADER.size + (kind - 1) * SECTION_ENTRY.size + SECTION_ENTRY.offsets[field]


def error_of(data: bytes, **kwargs) -> str:
    with pytest.raises(NpubError) as info:
        read_npub(data, name="m.npub", **kwargs)
    return str(info.value)


def test_round_trip_through_a_file(tmp_path):
    path = tmp_path / "m.npub"
    write_npub(path, sample())
    got = read_npub(path)
    want = sample()
    for name in ("config_hash", "plan", "instructions", "constants", "tensors", "bindings", "debug", "metadata",
                 "isa_version"):
        assert getattr(got, name) == getattr(want, name), name
    assert got.constant_bytes(got.tensors[0]) == bytes(range(256))
    assert got.layer_of(5).name == "prob" and got.layer_of(3).kind == "Conv" and got.layer_of(7) is None
    assert os.listdir(tmp_path) == ["m.npub"]
    assert read_npub(path, expect_config_hash=HASH.hex()).metadata["model"] == "tiny"


def test_writer_refuses_what_the_reader_would_and_leaves_no_file(tmp_path):
    bad = sample(tensors=[TensorInfo("w", "int8", (4,), 0x9000, 4)])
    with pytest.raises(NpubError, match="not inside one region of the plan"):
        write_npub(tmp_path / "bad.npub", bad)
    assert os.listdir(tmp_path) == []


def test_header_errors():
    assert error_of(b"PK\3\4" + DATA[4:]) == ("m.npub: header, byte 0: not an NPU binary: starts with 50 4b 03 04 "
                                              "42 0d 0a 1a, expected the magic 89 4e 50 55 42 0d 0a 1a")
    assert "truncated: the file has 3 bytes, less than the magic" in error_of(DATA[:3])
    assert error_of(DATA[:40]) == "m.npub: header, byte 40: truncated: the file has 40 bytes, the header needs 80"
    assert error_of(patched(8, "H", 2)) == ("m.npub: header, byte 8: format version 2.1 is not supported "
                                            "(this reader reads 1.0 to 1.1)")
    assert "format version 1.2 is not supported" in error_of(patched(10, "H", 2))
    assert f"ISA version 9.{ISA_VERSION[1]} is not supported" in error_of(patched(12, "H", 9))
    assert error_of(DATA[:76] + b"\0\0\0\0" + DATA[80:]).startswith("m.npub: header, byte 76: header CRC-32 is 0x")
    assert "unknown flags 0x4" in error_of(patched(48, "I", 4))
    assert "9 sections; format 1.x files have 7" in error_of(patched(52, "I", 9))
    assert "section table at bytes 84..308 is not 8-aligned" in error_of(patched(56, "Q", 84))


def test_older_minor_versions_are_read(monkeypatch):
    monkeypatch.setattr(container, "FORMAT_VERSION", (1, 3))
    assert read_npub(DATA).format_version == (1, 1)


def test_configuration_mismatch():
    other = bytes(32)
    assert error_of(DATA, expect_config_hash=other) == (
        "m.npub: header, byte 16: built for architecture configuration 0001020304050607..., but the "
        "configuration in use is 0000000000000000...")
    assert read_npub(DATA, expect_config_hash=HASH).config_hash == HASH


@pytest.mark.parametrize("kind", list(SectionKind), ids=lambda k: k.label)
def test_crc_mismatch_in_each_section(kind):
    s = LAYOUT[kind]
    data = bytearray(DATA)
    data[s.offset + s.size // 2] ^= 0x40
    message = error_of(bytes(data))
    assert message.startswith(f"m.npub: section '{kind.label}', byte {s.offset}: CRC-32 of bytes "
                              f"{s.offset}..{s.offset + s.size} is 0x")
    assert f"the section table says 0x{s.crc32:08x}" in message


def test_section_table_crc_mismatch():
    data = bytearray(DATA)
    data[entry_at(SectionKind.DEBUG, "crc32")] ^= 1
    assert error_of(bytes(data)).startswith("m.npub: section table, byte 80: section table CRC-32 is 0x")


@pytest.mark.parametrize("kind", list(SectionKind), ids=lambda k: k.label)
def test_truncation_at_each_section_boundary(kind):
    s = LAYOUT[kind]
    for cut in (s.offset, s.offset + s.size - 1):
        assert error_of(DATA[:cut]) == (
            f"m.npub: file, byte {cut}: truncated: the file has {cut} bytes, the header declares {len(DATA)}; "
            f"section '{kind.label}' (bytes {s.offset}..{s.offset + s.size}) is cut")
    assert "the section table is cut" in error_of(DATA[:100])


def test_trailing_bytes():
    assert error_of(DATA + b"\0") == f"m.npub: file, byte {len(DATA)}: 1 bytes after the end the header declares " \
                                     f"({len(DATA)} bytes)"


def test_section_out_of_bounds_misaligned_or_overlapping():
    plan = LAYOUT[SectionKind.MEMORY_PLAN]
    assert error_of(patched(entry_at(SectionKind.MEMORY_PLAN, "size"), "Q", 1 << 20)) == (
        f"m.npub: section table, byte {entry_at(SectionKind.MEMORY_PLAN, 'size')}: section 'memory-plan': bytes "
        f"{plan.offset}..{plan.offset + (1 << 20)} run past the end of the file ({len(DATA)} bytes)")
    assert "offset 300 is not a multiple of its alignment 8" in error_of(
        patched(entry_at(SectionKind.TENSORS, "offset"), "Q", 300))
    assert "alignment 3 is not a power of two in 8..65536" in error_of(
        patched(entry_at(SectionKind.TENSORS, "alignment"), "I", 3))
    tensors = LAYOUT[SectionKind.TENSORS]
    message = error_of(patched(entry_at(SectionKind.TENSORS, "offset"), "Q", tensors.offset - 64))
    assert message.startswith(f"m.npub: section 'tensors', byte {tensors.offset - 64}: section 'tensors' (bytes ")
    assert "overlaps section 'constants'" in message
    assert "overlaps the section table" in error_of(patched(entry_at(SectionKind.INSTRUCTIONS, "offset"), "Q", 96))
    assert "a second 'tensors' section" in error_of(patched(entry_at(SectionKind.DEBUG, "kind"), "H", 3))
    assert "unknown section kind 12" in error_of(patched(entry_at(SectionKind.DEBUG, "kind"), "H", 12))
    assert "reserved field 'reserved2' is 5, must be 0" in error_of(
        patched(entry_at(SectionKind.DEBUG, "reserved2"), "I", 5))


def test_padding_must_be_zero():
    gap = LAYOUT[SectionKind.CONSTANTS].offset - 1
    assert gap >= LAYOUT[SectionKind.INSTRUCTIONS].offset + LAYOUT[SectionKind.INSTRUCTIONS].size
    assert error_of(patched(gap, "B", 7)).startswith(f"m.npub: padding, byte {gap}: byte 0x07 in the padding")


def test_tensor_table_errors():
    t0 = TABLE_HEADER.size
    assert "tensor 0 'conv1.w': rank 9 exceeds 8" in error_of(in_section(SectionKind.TENSORS, t0 + 9, "B", 9))
    assert "unknown element kind code 42" in error_of(in_section(SectionKind.TENSORS, t0 + 8, "B", 42))
    assert "dimension 2 is 5; must be 0 past the rank" in error_of(
        in_section(SectionKind.TENSORS, t0 + TENSOR.offsets["dims"] + 8, "I", 5))
    assert "tensor 0: name at pool bytes 1000..1007 runs past the 24-byte string pool" in error_of(
        in_section(SectionKind.TENSORS, t0, "I", 1000))
    assert "header declares 5000 tensor records" in error_of(in_section(SectionKind.TENSORS, 0, "I", 5000))
    assert "quantization scale nan is not finite" in error_of(
        in_section(SectionKind.TENSORS, t0 + TENSOR.offsets["scale"], "d", float("nan")))
    pool = TABLE_HEADER.size + 4 * TENSOR.size
    assert "name is not valid UTF-8" in error_of(in_section(SectionKind.TENSORS, pool, "B", 0xff))
    assert "name holds unprintable character U+001B" in error_of(in_section(SectionKind.TENSORS, pool, "B", 0x1b))
    dup = [TensorInfo("a", "int8", (1,), 0, 1), TensorInfo("a", "int8", (1,), 1, 1)]
    assert "tensor 1 'a': name already used by tensor 0" in error_of(
        pack_npub(sample(tensors=dup, bindings=Bindings())))
    small = [TensorInfo("a", "int32", (4, 4), 0, 60)]
    assert "60 bytes cannot hold int32[4, 4] (64 bytes)" in error_of(pack_npub(sample(tensors=small,
                                                                                      bindings=Bindings())))


def test_a_scale_that_is_zero_or_infinite_in_float32_is_refused():
    # issue 22: inputs are divided by the scale in float32; a float64 scale that rounds to 0, a denormal or
    # infinity there passed the reader's "finite and positive" check and made the simulator divide by zero
    at = TABLE_HEADER.size + TENSOR.offsets["scale"]
    for scale in (1e-50, 2.0 ** -130, 1e39):
        message = error_of(in_section(SectionKind.TENSORS, at, "d", scale))
        assert f"quantization scale {scale!r} is not finite and positive in float32" in message
        assert "\n" not in message
    read_npub(in_section(SectionKind.TENSORS, at, "d", 2.0 ** -126), name="m.npub")  # the smallest normal float32


def test_dram_addresses_outside_the_plan():
    outside = [TensorInfo("w", "int8", (300,), 0, 300)]
    at = LAYOUT[SectionKind.TENSORS].offset + TABLE_HEADER.size + TENSOR.offsets["dram_address"]
    assert error_of(pack_npub(sample(tensors=outside, bindings=Bindings()))) == (
        f"m.npub: section 'tensors', byte {at}: tensor 0 'w': DRAM bytes 0x0..0x12c are not inside one region "
        f"of the plan (constants 0x0..0x100, activations 0x1000..0x2000, inputs 0x4000..0x4040, "
        f"outputs 0x5000..0x5040)")


def test_binding_errors():
    assert "input 'data': tensor 2 'conv1.out' lies in the activations region, not the inputs region" in error_of(
        pack_npub(sample(bindings=Bindings(inputs={"data": 2}))))
    assert "output 'prob': tensor index 9 is past the tensor table (4 tensors)" in error_of(
        pack_npub(sample(bindings=Bindings(outputs={"prob": 9}))))
    assert "direction 3 is neither 1 (input) nor 2 (output)" in error_of(
        in_section(SectionKind.BINDINGS, TABLE_HEADER.size, "B", 3))
    assert "input 'prob': tensor 3 'prob' lies in the outputs region, not the inputs region" in error_of(
        in_section(SectionKind.BINDINGS, TABLE_HEADER.size + BINDING.size, "B", 1))
    same_name = pack_npub(sample(bindings=Bindings(inputs={"data": 1}, outputs={"data": 3})))
    layout = {s.kind: s for s in read_npub(same_name).sections}
    assert "input 'data' is bound twice" in error_of(
        patched(layout[SectionKind.BINDINGS].offset + TABLE_HEADER.size + BINDING.size, "B", 1, data=same_name))


def test_memory_plan_errors():
    clash = MemoryPlan(Region(0, 256), Region(0x1000, 0x4000), Region(0x4000, 64), Region(0x5000, 64))
    assert "inputs region 0x4000..0x4040 overlaps the activations region 0x1000..0x5000" in error_of(
        pack_npub(sample(plan=clash)))
    assert "activations region: base 0x1001 is not a multiple of 64" in error_of(
        in_section(SectionKind.MEMORY_PLAN, TABLE_HEADER.size + REGION.size + 8, "Q", 0x1001))
    assert "region 1: a second constants region" in error_of(
        in_section(SectionKind.MEMORY_PLAN, TABLE_HEADER.size + REGION.size, "I", 1))
    small = MemoryPlan(Region(0, 128), Region(0x1000, 0x1000), Region(0x4000, 64), Region(0x5000, 64))
    assert "the constants section has 256 bytes, the plan's constants region 128" in error_of(
        pack_npub(sample(plan=small, tensors=[], bindings=Bindings())))


def test_debug_and_metadata_errors():
    assert "debug range 1 'b': starts at instruction 3, before the previous range 'a' stops (4)" in error_of(
        pack_npub(sample(debug=[DebugRange(0, 4, "a"), DebugRange(3, 5, "b")])))
    assert "debug range 0 'a': instructions 2..9 are not a non-empty range within the 8 instructions" in error_of(
        pack_npub(sample(debug=[DebugRange(2, 9, "a")])))
    assert "metadata is a JSON list, not an object" in error_of(pack_npub(sample(metadata=[1])))
    meta = LAYOUT[SectionKind.METADATA]
    assert f"byte {meta.offset + 11}: metadata is not valid JSON (Expecting ',' delimiter)" in error_of(
        in_section(SectionKind.METADATA, 0, "B", ord("[")))
    assert "metadata is not acceptable JSON (NaN is not JSON)" in error_of(_with_metadata(b'{"a": NaN}'))
    assert "metadata is not valid UTF-8" in error_of(_with_metadata(b'{"\xff": 1}'))
    assert "nested too deeply" in error_of(_with_metadata(b"[" * 100000 + b"]" * 100000))


def test_instruction_errors():
    code = LAYOUT[SectionKind.INSTRUCTIONS].offset
    data = bytearray(DATA)
    data[code + 48] = (data[code + 48] & 0xc0) | 0x3f
    assert error_of(reseal(data)) == (f"m.npub: section 'instructions', byte {code + 48}: instruction 3: "
                                      f"illegal opcode 0x3f")
    data = bytearray(DATA)
    data[code + 16 * 7 + 15] = 0x80
    assert error_of(reseal(data)) == (f"m.npub: section 'instructions', byte {code + 112}: instruction 7: END: "
                                      f"reserved bit 127 is set (reserved bits must be zero)")
    assert error_of(patched(entry_at(SectionKind.INSTRUCTIONS, "size"), "Q", 120)) == (
        f"m.npub: section 'instructions', byte {code + 112}: 120 bytes is not a whole number of 16-byte "
        f"instructions (8 bytes left over)")
    program = assemble(PROGRAM)
    assert error_of(pack_npub(sample(instructions=program[:-1]))) == (
        f"m.npub: section 'instructions', byte {code + 112}: the program has no END instruction (it must be the last)")
    assert "instruction 2: END before the last instruction (8)" in error_of(
        pack_npub(sample(instructions=program[:2] + [program[-1]] + program[2:])))


def test_instruction_dram_address_outside_the_plan():
    code = LAYOUT[SectionKind.INSTRUCTIONS].offset
    program = assemble(PROGRAM)
    program[1] = program[1].replace(dram=0x9000)
    assert error_of(pack_npub(sample(instructions=program))) == (
        f"m.npub: section 'instructions', byte {code + 16}: instruction 1: LOAD field 'dram' = 0x9000 is outside "
        f"every region of the DRAM plan")


def test_checks_on_the_machine_that_will_run_it():
    default = PRESETS["default"]
    built = sample(config_hash=config_hash(default))
    assert read_npub(pack_npub(built), config=default).instructions == built.instructions
    assert "built for architecture configuration 0001020304050607" in error_of(DATA, config=default)
    code = LAYOUT[SectionKind.INSTRUCTIONS].offset
    program = assemble(PROGRAM)
    program[1] = program[1].replace(rows=3)
    assert error_of(pack_npub(sample(config_hash=config_hash(default), instructions=program)), config=default) == (
        f"m.npub: section 'instructions', byte {code + 16}: instruction 1 (LOAD) reads dram bytes 0x4000..0x405f, "
        f"not inside one region of the DRAM plan")
    few = default.replace(semaphores=3)
    assert error_of(pack_npub(sample(config_hash=config_hash(few))), config=few) == (
        f"m.npub: section 'instructions', byte {code + 64}: instruction 4 (REQUANT): signal on s3, but "
        f"architecture 'default' has 3 semaphores")
    small = default.replace(dram_bytes=1 << 20)
    far = MemoryPlan(Region(0, 256), Region(1 << 20, 0x1000), Region(0x4000, 64), Region(0x5000, 64))
    tensors = sample().tensors[:2] + [TensorInfo("conv1.out", "int32", (2, 8), 1 << 20, 64)] + sample().tensors[3:]
    assert "section 'memory-plan', byte " in error_of(pack_npub(
        sample(config_hash=config_hash(small), plan=far, tensors=tensors)), config=small)
    assert "the plan needs 1052672 bytes of DRAM, architecture 'default' has 1048576" in error_of(pack_npub(
        sample(config_hash=config_hash(small), plan=far, tensors=tensors)), config=small)


def disasm(capsys, *args) -> tuple[int, str, str]:
    code = cli_main(["disasm", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_disasm_text_reads_back_through_the_assembler(tmp_path, capsys):
    path = tmp_path / "m.npub"
    write_npub(path, sample())
    code, out, err = disasm(capsys, path)
    assert code == 0 and err == ""
    assert assemble(out) == sample().instructions
    assert f"# NPU binary {path}: format 1.1, ISA {ISA_VERSION[0]}.{ISA_VERSION[1]}, {len(DATA)} bytes" in out
    for text in ("#   instructions", "#   constants    0x00000000..0x00000100    256",
                 "1  data       int8[2x32]  0x00004000..0x00004040     64  inputs       scale 0.25 offset -3",
                 "#   input   data  ->  tensor 1 (data)", "#   0..5  conv1  Conv",
                 "# == conv1 (Conv): instructions 0..5", "# == prob: instructions 5..7", "# == (no layer)",
                 '"model": "tiny"'):
        assert text in out, text


def test_disasm_json(tmp_path, capsys):
    path = tmp_path / "m.npub"
    write_npub(path, sample())
    code, out, _ = disasm(capsys, path, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["config_hash"] == HASH.hex() and doc["file_size"] == len(DATA)
    assert [i["text"] for i in doc["instructions"]] == PROGRAM.splitlines()
    assert [i["layer"] for i in doc["instructions"]] == ["conv1"] * 5 + ["prob"] * 2 + [None]
    assert doc["bindings"] == {"inputs": {"data": 1}, "outputs": {"prob": 3}}
    assert doc["memory_plan"]["inputs"] == {"base": 0x4000, "size": 64}
    assert doc["tensors"][1]["scale"] == 0.25 and bytes.fromhex(doc["instructions"][7]["hex"])[0] == 0x02


def test_disasm_bad_file_and_configuration(tmp_path, capsys):
    path = tmp_path / "m.npub"
    path.write_bytes(DATA[:500])
    code, out, err = disasm(capsys, path)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"glowsdk: error: {path}: file, byte 500: truncated: the file has 500 bytes")
    write_npub(path, sample())
    code, _, err = disasm(capsys, path, "--config", "default")
    assert code == 2 and "header, byte 16: built for architecture configuration 0001020304050607" in err
    write_npub(path, sample(config_hash=bytes.fromhex(config_hash(PRESETS["default"]))))
    assert disasm(capsys, path, "--config", "default")[0] == 0


def _with_metadata(raw: bytes) -> bytes:
    """DATA with its metadata section replaced by `raw` (the section is last, so the file just grows)."""
    meta = LAYOUT[SectionKind.METADATA]
    data = bytearray(DATA[:meta.offset] + raw)
    struct.pack_into("<Q", data, entry_at(SectionKind.METADATA, "size"), len(raw))
    struct.pack_into("<Q", data, HEADER.offsets["file_size"], len(data))
    return reseal(data)


def test_unreadable_path(tmp_path):
    with pytest.raises(NpubError, match=r"missing.npub: file, byte 0: cannot read \(No such file"):
        read_npub(tmp_path / "missing.npub")


def test_format_reference_is_current():
    assert (GUIDE / "npub_format.md").read_text() == npub_doc.render() + "\n", \
        "regenerate: python -m isa.npub_doc > vendor_guide/npub_format.md"
