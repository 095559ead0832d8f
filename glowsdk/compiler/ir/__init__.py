"""The low-level IR: address-based instructions over weights and activation buffers (paper 3.5)."""
from .function import Instruction, IRFunction, Value, Weight, base_of, verify_ir, view_offset
from .instructions import INSTR_KINDS, InstrSpec, OperandKind, derive_all, derived_spec
from .text import format_ir, parse_ir

__all__ = ["INSTR_KINDS", "IRFunction", "InstrSpec", "Instruction", "OperandKind", "Value", "Weight",
           "base_of", "derive_all", "derived_spec", "format_ir", "parse_ir", "verify_ir", "view_offset"]
