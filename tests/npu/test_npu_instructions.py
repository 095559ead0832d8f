"""The NPU backend's instruction constructors (glowsdk/backends/npu/instructions.py), generated from isa/table.py.

Each row of the ISA table has one constructor whose keywords are exactly the row's operand fields: a misspelt or
missing field fails where the instruction is written, and what the emitter encodes is the table's instruction.
"""
from __future__ import annotations

import pytest

from glowsdk.backends.npu import instructions
from glowsdk.backends.npu.emitter import Emitter, Sync
from glowsdk.backends.npu.instructions import LOAD, NOP, OPS, VADDI
from isa.encoding import make_instr
from isa.errors import IsaError
from isa.table import INSTRUCTIONS


def test_every_row_of_the_table_has_its_constructor():
    assert list(OPS) == [spec.mnemonic for spec in INSTRUCTIONS]
    for spec in INSTRUCTIONS:
        assert getattr(instructions, spec.mnemonic) is OPS[spec.mnemonic]
        assert OPS[spec.mnemonic].__doc__ == spec.doc


def test_fields_are_checked_by_name_at_construction():
    with pytest.raises(IsaError, match="LOAD: unknown field 'dst'"):
        LOAD(dram=0, space="spad", sram=0, planes=1, rows=1, cols=1, dst=0)
    with pytest.raises(IsaError, match="VADDI: missing field 'imm'"):
        VADDI(dst_space="acc", dst=0, src_space="spad", src=0, count=4)
    with pytest.raises(IsaError, match="NOP: unknown field 'rows' \\(fields: none\\)"):
        NOP(rows=1)


def test_the_emitter_encodes_the_tables_instruction_with_its_semaphores():
    op = LOAD(dram=64, space="acc", sram=8, planes=1, rows=2, cols=3)
    em = Emitter()
    em.emit(op, Sync(wait=3, wait_count=1))
    assert not op.is_config and OPS["CONFIG_LOAD"](row_stride=0, plane_stride=0, col_stride=0, elem_bytes=4).is_config
    assert em.instructions == [make_instr("LOAD", dram=64, space="acc", sram=8, planes=1, rows=2, cols=3, wait_sem=3,
                                          wait_count=1)]


def test_field_values_are_checked_when_encoded():
    with pytest.raises(IsaError, match="field 'rows'"):
        Emitter().emit(LOAD(dram=0, space="spad", sram=0, planes=1, rows=0, cols=1))
