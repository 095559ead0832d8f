"""The reference NPU's machine description: configuration schema and instruction set.

`isa.config` holds the architecture parameters and presets; `isa.table` the ISA
table, one record per instruction carrying its semantics, memory extents and
timing (`isa.behaviour`; the rules by family in `isa/families/`), from which
`isa.encoding` (16-byte instructions), `isa.asm` (assembly text), `isa.program`
(registers and memory extents per instruction, program checks) and `isa.docgen`
(vendor_guide/isa.md) are derived, and which `sim` executes; the exact integer
arithmetic the instructions' semantics use is `glowsdk.numerics`, shared with the graph.
"""
from .asm import assemble, disassemble, format_instr, parse_instr
from .config import PRESETS, ArchConfig, config_hash, format_config, load_config, resolve_config
from .encoding import Instr, decode, decode_program, encode, encode_program, iter_decode, make_instr
from .errors import AsmError, ConfigError, DecodeError, IsaError
from .container import NpuBinary, pack_npub, read_npub, write_npub
from .npub_layout import NpubError
from .program import Extent, ProgramError, check_program, extents, program_extents, reset_registers, with_registers
from .schema import INSTR_BYTES, Engine, FieldKind, InstrSpec
from .table import BY_MNEMONIC, BY_OPCODE, INSTRUCTIONS, ISA_VERSION

__all__ = [
    "BY_MNEMONIC", "BY_OPCODE", "INSTRUCTIONS", "INSTR_BYTES", "ISA_VERSION", "PRESETS", "ArchConfig", "AsmError",
    "NpuBinary", "NpubError", "pack_npub", "read_npub", "write_npub",
    "ConfigError", "DecodeError", "Engine", "Extent", "FieldKind", "Instr", "InstrSpec", "IsaError", "ProgramError",
    "assemble", "check_program", "config_hash", "decode", "decode_program", "disassemble", "encode",
    "encode_program", "extents", "format_config", "format_instr", "iter_decode", "load_config", "make_instr",
    "parse_instr", "program_extents", "reset_registers", "resolve_config", "with_registers",
]
