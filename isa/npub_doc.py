"""Generate the `.npub` format reference (vendor_guide/npub_format.md) from the layout tables.

Run `python -m isa.npub_doc > vendor_guide/npub_format.md`; a test checks the file in
the repository is current. The prose says why; every byte-level fact comes from
`isa.npub_layout`, so the reference cannot drift from the reader.
"""
from __future__ import annotations

from .container import NpuBinary, pack_npub
from .encoding import make_instr
from .npub_instructions import INSTRUCTION_BYTES
from .npub_layout import (BINDING, DEBUG_RANGE, DRAM_ALIGNMENT, ELEM_KINDS, FORMAT_VERSION, HEADER, MAGIC,
                          MAX_RANK, MAX_SECTION_ALIGNMENT, REGION, REGION_MEANINGS, SECTION_ENTRY, SECTION_KINDS,
                          TABLE_HEADER, TENSOR, Direction, Record, RegionKind)
from .sections import MAX_NAME_BYTES, Bindings, MemoryPlan, Region

_TYPES = {"B": "u8", "H": "u16", "I": "u32", "Q": "u64", "i": "i32", "d": "f64"}

_CONVENTIONS = """\
## Conventions

* All integers are little-endian; `f64` is an IEEE-754 binary64. Offsets are from the
  start of the file unless a table says otherwise.
* CRC-32 is the IEEE 802.3 / zlib CRC (reflected polynomial 0xEDB88320, initial value
  and final XOR 0xFFFFFFFF), as Python's `zlib.crc32` computes it.
* Fields called *reserved* are zero; a reader refuses a file where one is not.
* Every byte of the file belongs to the header, the section table or a section, or is
  zero padding between them; padding that is not zero is refused, so every meaningful
  byte is covered by a CRC.
* Sizes are exact: a section holds exactly what its header declares, and the file ends
  at `file_size`.

```
+---------------------------+ 0
| header (80 bytes)         |
+---------------------------+ section_table_offset (80 as written)
| section table             |   7 entries x 32 bytes
+---------------------------+
| sections, each at a       |   instructions, constants, tensors, bindings,
| multiple of its alignment,|   memory plan, debug, metadata: any order
| zero padding between      |   (the writer uses this one)
+---------------------------+ file_size
```
"""

_VERSIONS = """\
## Versions and the configuration hash

* **Format** `major.minor`: a reader refuses a major it does not know and a minor newer
  than its own, and reads the older minors of its major. A new minor only adds what an
  older reader would refuse anyway (a section kind, a flag), so refusing is always safe.
* **ISA** `major.minor`: the instruction encoding, under the same rule.
* **Configuration hash**: the SHA-256 of the architecture configuration (array size,
  SRAM sizes, DRAM bandwidth, ...) the program was compiled for. A loader that is given
  its machine's configuration refuses a binary built for another one.
"""

_BINDING_MODEL = """\
## DRAM binding model: an absolute plan, no relocations

Every DRAM address in the binary (instruction operands and the tensor table) is
absolute within the memory plan, which has exactly one region of each kind below. The
loader makes the device see the plan's address space (the NPU's own DRAM, or a base
register or IOMMU window per region), copies the constants section to the start of the
constants region once, and then, for each run, the host writes every input tensor at
its address and reads every output tensor from its address. Nothing is patched at load
time: the bytes that were validated (CRCs, decode, address ranges) are the bytes that
run, and two programs share a device by mapping their plans to different physical
memory. The bindings section therefore holds names, not relocations.
"""

_VALIDATION = """\
## What a reader checks, in order

`isa.container.read_npub` checks all of this before it returns, and stops at the first
fault with one line, `FILE: PART, byte OFFSET: WHAT`, where PART is `header`,
`section table`, `section 'NAME'`, `padding` or `file`, and OFFSET is a file offset.

1. The magic, then that the file holds a whole header.
2. The format version, then the header CRC (the CRC's place depends on the major).
3. The ISA version; the configuration hash, when the loader gives the expected one.
4. `flags` is zero; `section_count` is 7; the table is 8-aligned, after the header,
   inside `file_size`.
5. The file's length equals `file_size`; when it is shorter, the error names the first
   section (or the table) that is cut.
6. The table CRC; each entry's kind (known, not repeated), alignment (a power of two,
   at least the kind's minimum, at most {max_alignment}), offset (a multiple of the alignment)
   and extent (inside the file).
7. Header, table and non-empty sections do not overlap; the padding between them is zero.
8. Each section's CRC.
9. The memory plan, then the constants section's size against the constants region,
   the tensor table, the bindings, the instructions (the section is a whole number of
   {instruction_bytes}-byte instructions; each decodes: known opcode, legal fields, reserved
   bits zero; every DRAM address operand lies inside a region of the plan; the last
   instruction is the only END), the debug ranges, the metadata.
10. Given the configuration of the machine that will run it (`read_npub(..., config=...)`,
    `glowsdk disasm --config`): the configuration hash matches; the plan fits the machine's
    DRAM; every DRAM access, with the extent that follows from the registers the
    instruction executes with (strides, element size), lies inside one region of the
    plan; and the program runs on that machine (`isa.program.check_program`: semaphores
    it has, SRAM accesses inside its SRAMs, no static fault).

Every count read from the file is checked against the size of its section before
anything is built from it, so a reader's memory use is bounded by the file's size.
"""

_STRINGS = f"""\
## Table sections and strings

The tensor, binding, memory-plan and debug sections share one shape: the 8-byte table
header, `count` fixed-size records, then a string pool of `pool_size` bytes; the section
is exactly that long. Strings (tensor, binding, layer and node-kind names) are UTF-8,
1..{MAX_NAME_BYTES} bytes, without control, format or line-separator characters (so a name
cannot forge a line of output), addressed by (offset into the pool, length); a writer
stores each distinct string once. Names are unique within their table (bindings: within
a direction).
"""

_METADATA = """\
## The metadata section

One UTF-8 JSON object, parsed with a JSON parser only (NaN and Infinity are refused).
Keys the glowsdk compiler writes: `model` (the model's name), `compiler` (name and
version), `options` (the compile options, an object), `config` (the configuration
preset or file it was compiled for), `roofline` (one entry per debug range: `null` for
a layer the roofline bound counts as free, else an object of `macs`, `unit` ("array" or
"vector"), `weight_bytes`, `input_bytes`, `output_bytes`; npu_architecture.md, "The
roofline bound"). A reader requires only that it is an object; a simulator refuses a
`roofline` entry of another form.
"""


def _table(head: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _type(code: str) -> str:
    if code.endswith("s"):
        return f"u8[{code[:-1]}]"
    return f"{_TYPES[code[-1]]}[{code[:-1]}]" if len(code) > 1 else _TYPES[code]


def _record(rec: Record) -> str:
    rows = [[rec.offsets[f.name], f.size, _type(f.code), f"`{f.name}`", f.meaning] for f in rec.fields]
    return (f"### {rec.name.capitalize()} ({rec.size} bytes)\n\n{rec.doc}\n\n"
            + _table(["offset", "size", "type", "field", "meaning"], rows))


def _hexdump(data: bytes, length: int) -> str:
    lines = [f"{at:04x}  {data[at:at + 16].hex(' ')}" for at in range(0, length, 16)]
    return "```\n" + "\n".join(lines) + "\n```\n"


def example() -> bytes:
    """A minimal valid file (a lone END): the bytes shown in the reference."""
    plan = MemoryPlan(constants=Region(0, 0), activations=Region(0, 0), inputs=Region(0, 0), outputs=Region(0, 0))
    return pack_npub(NpuBinary(config_hash=bytes(range(32)), plan=plan, instructions=[make_instr("END")],
                               bindings=Bindings(), metadata={"model": "empty"}))


def render() -> str:
    """The Markdown reference."""
    sample = example()
    sections = _table(["code", "section", "minimum alignment", "content"],
                      [[int(k), f"`{k.label}`", a, c] for k, (a, c) in SECTION_KINDS.items()])
    regions = _table(["code", "region", "what it holds"], [[int(k), k.label, REGION_MEANINGS[k]] for k in RegionKind])
    elems = _table(["code", "element kind", "bytes"], [[c, n, s] for c, (n, s) in ELEM_KINDS.items()])
    directions = _table(["code", "direction"], [[int(d), d.name.lower()] for d in Direction])
    parts = [
        "<!-- Generated by `python -m isa.npub_doc` from isa/npub_layout.py; do not edit. -->",
        "# The `.npub` binary container", "",
        "An `.npub` file holds one compiled program for the reference NPU: its instructions, its constant "
        "data, where every tensor lives in DRAM, which tensors are the network's inputs and outputs, and a "
        "map from instructions back to layers. This page describes format version "
        f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]} byte by byte; `isa/container.py` reads and writes it and "
        "`glowsdk disasm FILE` prints one.", "",
        _CONVENTIONS, _VERSIONS, _BINDING_MODEL,
        "## Header and section table", "",
        f"The magic is `{MAGIC.hex(' ')}`.", "",
        _record(HEADER), _record(SECTION_ENTRY),
        "**Section kinds.** Each appears exactly once (an empty section has size 0).", "", sections,
        "## Sections", "",
        f"**instructions**: `size / {INSTRUCTION_BYTES}` instructions in program order; "
        "their encoding is the ISA reference's.", "",
        "**constants**: raw bytes, laid out as the tensors that live in the constants region say "
        "(weights are pre-tiled for the matrix engine by the compiler).", "",
        _STRINGS, _record(TABLE_HEADER),
        "**tensors**: one record per tensor the program reads or writes in DRAM.", "",
        _record(TENSOR), f"Rank is at most {MAX_RANK}. Element kinds:", "", elems,
        "**bindings**: the network's inputs and outputs. An input's tensor lies in the inputs region, "
        "an output's in the outputs region.", "",
        _record(BINDING), directions,
        "**memory plan**: exactly one region of each kind, any order; `pool_size` is 0.", "",
        _record(REGION), regions,
        f"Region bases are multiples of {DRAM_ALIGNMENT}; regions of non-zero size do not overlap; every "
        "tensor lies inside one region; the constants region is exactly as large as the constants section.", "",
        "**debug**: which instructions implement which layer; instructions outside every range are "
        "the program's own (synchronisation, epilogue).", "",
        _record(DEBUG_RANGE), _METADATA,
        _VALIDATION.format(max_alignment=MAX_SECTION_ALIGNMENT, instruction_bytes=INSTRUCTION_BYTES),
        "## Example", "",
        f"The header and section table of a minimal file (one END instruction, an empty plan, example "
        f"configuration hash 00 01 .. 1f, metadata `{{\"model\": \"empty\"}}`), {len(sample)} bytes in all:", "",
        _hexdump(sample, HEADER.size + 7 * SECTION_ENTRY.size).rstrip("\n"),
    ]
    return "\n".join(parts)


if __name__ == "__main__":
    print(render())
