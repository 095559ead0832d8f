"""The static view of a program: registers per instruction, memory extents, whole-program checks.

Extents are checked against brute-force enumeration of every address the
ISA reference's formulas touch; the datasheet's example program must assemble
and pass the checks on every preset.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isa import PRESETS, Engine, assemble, make_instr
from isa.program import Extent, ProgramError, check_program, extents, program_extents, reset_registers

DATASHEET = Path(__file__).resolve().parent.parent / "vendor_guide" / "npu_architecture.md"


def datasheet_programs() -> list[str]:
    return re.findall(r"```asm\n(.*?)```", DATASHEET.read_text(), re.S)


def test_datasheet_example_assembles_and_fits_every_preset():
    [text] = datasheet_programs()
    program = assemble(text)
    assert len(program) == 14
    for config in PRESETS.values():
        check_program(program, config)
    found = program_extents(program, PRESETS["default"])
    load_input, matmul = found[6], found[8]
    assert load_input == [Extent("dram", 0x1000, 0x3000, False), Extent("spad", 0, 18 * 18 * 32, True)]
    # The implicit im2col reads exactly the padded image; the first MATMUL overwrites the accumulator.
    assert matmul == [Extent("spad", 0, 18 * 18 * 32, False), Extent("spad", 0x3000, 0x3000 + 288 * 60, False),
                      Extent("acc", 0, 256 * 60, True)]
    assert found[3] == [Extent("dram", 0x104800, 0x104800 + 240, False), Extent("acc", 0x3c00, 0x3c00 + 60, True)]
    requant = found[10]
    assert Extent("acc", 0x3c00, 0x3c00 + 60, False) in requant  # the bias row REQUANT adds


def test_reset_registers_follow_the_table_and_the_configuration():
    registers = reset_registers(PRESETS["edge"].replace(dataflow="os"))
    assert registers[Engine.MATRIX]["dataflow"] == "os"
    assert registers[Engine.LOAD]["elem_bytes"] == 1 and registers[Engine.STORE]["row_stride"] == 0
    assert registers[Engine.VECTOR]["multiplier"] == 1 << 30 and registers[Engine.CONTROL] == {}


@pytest.mark.parametrize("text, config, message", [
    ("NOP", "default", "the program must end with END (it has 1 instructions, the last a NOP)"),
    ("END\nEND", "default", "instruction 0 (END): END before the last instruction (1)"),
    ("NOP ; signal s5\nEND", "edge-4", "instruction 0 (NOP): signal on s5, but architecture 'edge' has 4 semaphores"),
    ("MATMUL inp=0 wgt=0 acc=0x7ff00 rows=16 k=16 n=16 acc_mode=0\nEND", "default",
     "instruction 0 (MATMUL): writes acc words 0x7ff00..0x7ffff, beyond the 128 KiB acc of architecture 'default'"),
    ("CONFIG_LOAD row_stride=0 plane_stride=0 col_stride=0 elem_bytes=6\n"
     "LOAD dram=0 space=acc sram=0 planes=1 rows=1 cols=1\nEND", "default",
     "instruction 1 (LOAD): elem_bytes = 6 is not a multiple of 4, as an accumulator transfer needs"),
    ("LOAD dram=0xfffffff0 space=spad sram=0 planes=1 rows=1 cols=100\nEND", "default",
     "instruction 0 (LOAD): reads dram bytes 0xfffffff0..0xfffffff0, beyond the 2 GiB dram of architecture 'default'"),
    ("CONFIG_MATMUL dataflow=ws im2col=1 out_w=4 channels=3 kw=3 stride_h=1 stride_w=1 dil_h=1 dil_w=1 "
     "row_pitch=18 pixel_pitch=3\nMATMUL inp=0 wgt=0 acc=0 rows=16 k=20 n=4 acc_mode=0\nEND", "default",
     "instruction 1 (MATMUL): k = 20 is not a multiple of kw * channels = 9 (im2col)"),
    ("CONFIG_POOL kh=7 kw=7 stride_h=1 stride_w=1 pad_top=0 pad_bottom=0 pad_left=0 pad_right=0 count_pad=0 "
     "pad_value=0\nPOOL op=max dst=0 src=0 height=5 width=9 channels=8\nEND", "default",
     "instruction 1 (POOL): a 7 x 7 window leaves no output on a 5 x 9 image"),
])
def test_check_program_names_the_instruction(text, config, message):
    machine = PRESETS["edge"].replace(semaphores=4) if config == "edge-4" else PRESETS[config]
    with pytest.raises(ProgramError) as info:
        check_program(assemble(text), machine)
    assert str(info.value) == message


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_im2col_extent_is_the_span_of_every_address(data):
    def draw(lo: int, hi: int) -> int:
        return data.draw(st.integers(lo, hi))

    channels, kw, kh, out_w = draw(1, 4), draw(1, 3), draw(1, 3), draw(1, 5)
    regs = dict(reset_registers(PRESETS["default"])[Engine.MATRIX], im2col=1, out_w=out_w, channels=channels, kw=kw,
                stride_h=draw(1, 3), stride_w=draw(1, 3), dil_h=draw(1, 2), dil_w=draw(1, 2),
                row_pitch=draw(0, 200), pixel_pitch=draw(0, 12))
    rows, n = draw(1, 20), draw(1, 3)
    instr = make_instr("MATMUL", inp=draw(0, 50), wgt=0, acc=0, rows=rows, k=kh * kw * channels, n=n, acc_mode=0)
    # Every address A(p, i) by the reference formula.
    p, i = np.meshgrid(np.arange(rows), np.arange(instr.k), indexing="ij")
    oy, ox = p // out_w, p % out_w
    ky, kx, ci = i // (kw * channels), (i // channels) % kw, i % channels
    addresses = (instr.inp + (oy * regs["stride_h"] + ky * regs["dil_h"]) * regs["row_pitch"]
                 + (ox * regs["stride_w"] + kx * regs["dil_w"]) * regs["pixel_pitch"] + ci)
    inp = extents(instr, regs)[0]
    assert (inp.start, inp.stop) == (addresses.min(), addresses.max() + 1)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_dma_extents_are_the_span_of_every_byte(data):
    def draw(lo: int, hi: int) -> int:
        return data.draw(st.integers(lo, hi))

    space = data.draw(st.sampled_from(["spad", "acc"]))
    elem = draw(1, 3) * 4 if space == "acc" else draw(1, 9)
    regs = {"row_stride": draw(0, 40), "plane_stride": draw(0, 300), "col_stride": draw(0, 12), "elem_bytes": elem,
            "pad_top": draw(0, 2), "pad_bottom": draw(0, 2), "pad_left": draw(0, 2), "pad_right": draw(0, 2)}
    planes, rows, cols = draw(1, 3), draw(1, 4), draw(1, 4)
    load = make_instr("LOAD", dram=draw(0, 99), space=space, sram=draw(0, 99), planes=planes, rows=rows, cols=cols)
    p, r, c, e = np.meshgrid(*(np.arange(n) for n in (planes, rows, cols, elem)), indexing="ij")
    dram = load.dram + p * regs["plane_stride"] + r * regs["row_stride"] + c * regs["col_stride"] + e
    height = regs["pad_top"] + rows + regs["pad_bottom"]
    width = regs["pad_left"] + cols + regs["pad_right"]
    image = planes * height * width * elem // (4 if space == "acc" else 1)
    assert extents(load, regs) == [Extent("dram", load.dram, int(dram.max()) + 1, False),
                                   Extent(space, load.sram, load.sram + image, True)]
