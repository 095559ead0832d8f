"""The instruction section: 16-byte records decoded by `isa.encoding`, DRAM operands checked against the plan.

Which fields hold DRAM addresses is read from the ISA table (fields of kind `DRAM_ADDR`),
so a new instruction with a DRAM operand is checked without a change here. Without the
machine's configuration the check is on each address itself; with it (`check_on_machine`)
every access's whole extent, from the registers each instruction executes with
(`isa.program`), must lie inside one region, and the program must run on that machine.
"""
from __future__ import annotations


from .config import ArchConfig
from .encoding import Instr, decode, encode_program
from .errors import DecodeError
from .npub_layout import HEADER, Span
from .program import ProgramError, check_program, extents, with_registers
from .schema import INSTR_BYTES
from .sections import MemoryPlan
from .table import DRAM_ADDR, INSTRUCTIONS, ISA_VERSION

INSTRUCTION_BYTES = INSTR_BYTES
DRAM_FIELDS: dict[str, tuple[str, ...]] = {
    spec.mnemonic: tuple(f.name for f in spec.fields if f.kind is DRAM_ADDR) for spec in INSTRUCTIONS}
"""mnemonic -> the names of its fields that hold DRAM addresses."""


def check_isa_version(head: Span, version: tuple[int, int]) -> None:
    """Same major as this ISA, and a minor no newer than it."""
    if version[0] != ISA_VERSION[0] or version[1] > ISA_VERSION[1]:
        raise head.error(HEADER.offsets["isa_major"], f"ISA version {version[0]}.{version[1]} is not supported "
                         f"(this reader decodes {ISA_VERSION[0]}.0 to {ISA_VERSION[0]}.{ISA_VERSION[1]})")


def encode_all(instructions: list[Instr]) -> bytes:
    return encode_program(instructions)


def decode_all(span: Span, plan: MemoryPlan) -> list[Instr]:
    """Every instruction of the section, each legal and with its DRAM addresses inside the plan."""
    if span.size % INSTRUCTION_BYTES:
        whole = span.size - span.size % INSTRUCTION_BYTES
        raise span.error(whole, f"{span.size} bytes is not a whole number of {INSTRUCTION_BYTES}-byte "
                         f"instructions ({span.size - whole} bytes left over)")
    data = span.bytes()
    program = []
    for index in range(span.size // INSTRUCTION_BYTES):
        at = index * INSTRUCTION_BYTES
        try:
            instr = decode(data[at:at + INSTRUCTION_BYTES], index)
        except DecodeError as err:
            what = str(err).removeprefix(f"instruction {index} at byte {at}: ")
            raise span.error(at, f"instruction {index}: {what}") from None
        for name in DRAM_FIELDS[instr.mnemonic]:
            address = getattr(instr, name)
            if plan.region_of(address) is None:
                raise span.error(at, f"instruction {index}: {instr.mnemonic} field '{name}' = 0x{address:x} is "
                                 f"outside every region of the DRAM plan")
        program.append(instr)
    ends = [i for i, instr in enumerate(program) if instr.mnemonic == "END"]
    if not ends:
        raise span.error(span.size, "the program has no END instruction (it must be the last)")
    if ends[0] != len(program) - 1:
        raise span.error(ends[0] * INSTRUCTION_BYTES, f"instruction {ends[0]}: END before the last instruction "
                         f"({len(program) - 1}); END is the last instruction and occurs once")
    return program


def check_on_machine(span: Span, program: list[Instr], plan: MemoryPlan, config: ArchConfig) -> None:
    """Every DRAM access of every instruction inside one region of the plan; `isa.program`'s rules on `config`."""
    for index, (instr, registers) in enumerate(with_registers(program, config)):
        if not DRAM_FIELDS[instr.mnemonic]:
            continue
        try:
            found = extents(instr, registers)
        except ProgramError as err:
            raise span.error(index * INSTRUCTION_BYTES, f"instruction {index} ({instr.mnemonic}): {err}") from None
        for extent in found:
            if extent.memory == "dram" and plan.region_of(extent.start, extent.stop - extent.start) is None:
                raise span.error(index * INSTRUCTION_BYTES, f"instruction {index} ({instr.mnemonic}) {extent}, "
                                 f"not inside one region of the DRAM plan")
    try:
        check_program(program, config)
    except ProgramError as err:
        offset = err.index * INSTRUCTION_BYTES if err.index is not None else 0
        raise span.error(offset, str(err)) from None
