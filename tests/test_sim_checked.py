"""Faults, races and deadlock: each stops the simulation with one line naming the instruction and layer."""
from __future__ import annotations

import re

import pytest

from isa import PRESETS, assemble
from isa.sections import DebugRange
from sim.errors import DeadlockError, Fault, RaceError, SimError, SimInputError
from sim.simulator import simulate

CONFIG = PRESETS["edge"]
LAYERS = [DebugRange(0, 2, "stem", "Conv"), DebugRange(2, 6, "block1", "Conv")]


def run(text: str, checked: bool = True, config=CONFIG, **kwargs):
    return simulate(assemble(text), config, layers=LAYERS, checked=checked, **kwargs)


def error_of(text: str, kind: type[SimError] = SimError, **kwargs) -> SimError:
    with pytest.raises(kind) as caught:
        run(text, **kwargs)
    assert "\n" not in str(caught.value)
    return caught.value


RACE = """
    CONFIG_LOAD row_stride=0 plane_stride=0 col_stride=0 elem_bytes=256
    LOAD dram=0x1000 space=spad sram=0x0 planes=1 rows=1 cols=1
    MATMUL inp=0x0 wgt=0x0 acc=0x0 rows=16 k=16 n=16 acc_mode=0 ; signal s1
    END ; wait s1
"""


def test_a_race_between_engines_names_both_instructions_and_layers():
    err = error_of(RACE, RaceError)
    assert err.index == 2
    assert str(err).startswith("race at cycle ")
    assert ("instruction 2 (MATMUL, layer 'block1') on the matrix engine reads spad bytes 0x0..0xff, and "
            "instruction 1 (LOAD, layer 'stem') on the load engine writes spad bytes 0x0..0xff, with no semaphore "
            "ordering them") in str(err)
    # Unchecked, the same program runs (to whatever result the timing gives).
    assert run(RACE, checked=False).cycles > 0


def test_a_race_is_found_whatever_the_timing():
    """The LOAD finished long before the VADDI, which is ordered after a long MATMUL but not after the LOAD."""
    text = """
        CONFIG_LOAD row_stride=0 plane_stride=0 col_stride=0 elem_bytes=64
        LOAD dram=0x1000 space=spad sram=0x0 planes=1 rows=1 cols=1
        MATMUL inp=0x1000 wgt=0x1000 acc=0x0 rows=250 k=64 n=16 acc_mode=0 ; signal s1
        VADDI dst_space=acc dst=0x2000 src_space=spad src=0x20 count=8 imm=0 ; wait s1 signal s2
        END ; wait s2
    """
    with pytest.raises(RaceError, match=r"instruction 3 \(VADDI\) on the vector engine reads spad bytes 0x20..0x27, "
                                        r"and instruction 1 \(LOAD, layer 'stem'\)") as caught:
        simulate(assemble(text), CONFIG, layers=LAYERS[:1], checked=True)
    assert caught.value.cycle > 1000


@pytest.mark.parametrize("text", [
    # load -> matrix -> vector: the vector engine reads the load's bytes through the chain.
    """CONFIG_LOAD row_stride=0 plane_stride=0 col_stride=0 elem_bytes=256
    LOAD dram=0x1000 space=spad sram=0x0 planes=1 rows=1 cols=1 ; signal s1
    MATMUL inp=0x0 wgt=0x0 acc=0x0 rows=16 k=16 n=16 acc_mode=0 ; wait s1 signal s2
    VADDI dst_space=spad dst=0x800 src_space=spad src=0x0 count=256 imm=1 ; wait s2 signal s3
    END ; wait s3""",
    # a NOP barrier orders everything dispatched after it
    """CONFIG_LOAD row_stride=0 plane_stride=0 col_stride=0 elem_bytes=256
    LOAD dram=0x1000 space=spad sram=0x0 planes=1 rows=1 cols=1 ; signal s1
    NOP ; wait s1
    VADDI dst_space=spad dst=0x800 src_space=spad src=0x0 count=256 imm=1
    END""",
    # reads by two engines at once are no race
    """MATMUL inp=0x0 wgt=0x0 acc=0x0 rows=16 k=16 n=16 acc_mode=0
    VADDI dst_space=acc dst=0x800 src_space=spad src=0x0 count=256 imm=1
    END""",
])
def test_ordered_programs_are_not_races(text):
    run(text)


def test_a_dram_race_between_store_and_load():
    text = """
        CONFIG_STORE row_stride=0 plane_stride=0 col_stride=0 elem_bytes=4096
        STORE dram=0x10000 space=spad sram=0x0 planes=1 rows=1 cols=1
        CONFIG_LOAD row_stride=0 plane_stride=0 col_stride=0 elem_bytes=64
        LOAD dram=0x10fc0 space=spad sram=0x8000 planes=1 rows=1 cols=1
        END
    """
    err = error_of(text, RaceError)
    assert re.search(r"instruction \d \((LOAD|STORE).*dram bytes", str(err))


@pytest.mark.parametrize("text, index, what", [
    ("VADDI dst_space=spad dst=0x3fff00 src_space=spad src=0x0 count=512 imm=1\nEND", 0,
     "fault at cycle 0: instruction 0 (VADDI, layer 'stem'): writes spad bytes 0x3fff00..0x4000ff, beyond the "
     "256 KiB spad of architecture 'edge'"),
    ("NOP\nNOP\nCONFIG_LOAD row_stride=0 plane_stride=0 col_stride=0 elem_bytes=64\n"
     "LOAD dram=0x1ffffff0 space=spad sram=0x0 planes=1 rows=1 cols=1\nEND", 3,
     "instruction 3 (LOAD, layer 'block1'): reads dram bytes 0x1ffffff0..0x2000002f, beyond the 512 MiB dram"),
    ("MATMUL inp=0x0 wgt=0x0 acc=0x3ff0 rows=4 k=4 n=8 acc_mode=1\nEND", 0,
     "writes acc words 0x3ff0..0x400f, beyond the 64 KiB acc"),
    ("CONFIG_MATMUL dataflow=ws im2col=1 out_w=4 channels=3 kw=3 stride_h=1 stride_w=1 dil_h=1 dil_w=1 "
     "row_pitch=18 pixel_pitch=3\nMATMUL inp=0x0 wgt=0x0 acc=0x0 rows=16 k=10 n=8 acc_mode=0\nEND", 1,
     "instruction 1 (MATMUL, layer 'stem'): k = 10 is not a multiple of kw * channels = 9 (im2col)"),
    ("CONFIG_POOL kh=3 kw=3 stride_h=1 stride_w=1 pad_top=0 pad_bottom=0 pad_left=0 pad_right=0 count_pad=0 "
     "pad_value=0\nPOOL op=max dst=0x100 src=0x0 height=1 width=8 channels=4\nEND", 1,
     "a 3 x 3 window leaves no output on a 1 x 8 image"),
    ("CONFIG_REQUANT multiplier=0 shift=0 zero_point=0 clamp_lo=-128 clamp_hi=127 per_channel=1 table=0x100 bias_row=0 bias=0\n"
     "VSUBI dst_space=spad dst=0x103 src_space=spad src=0x103 count=1 imm=128 ; signal s1\n"
     "REQUANT dst=0x200 src=0x0 rows=1 cols=1 ; wait s1\nEND", 2,
     "per-channel requantize entry 0 at spad 0x100 has multiplier -2147483648 and shift 0 (need >= 0 and "
     "-31..31)"),
])
def test_faults_name_the_instruction(text, index, what):
    err = error_of(text, Fault)
    assert err.index == index
    assert what in str(err)


def test_programs_end_with_their_only_end_and_use_the_semaphores_the_machine_has():
    with pytest.raises(SimInputError, match=r"must end with its only END instruction \(it has no END\)"):
        simulate(assemble("NOP"), CONFIG)
    with pytest.raises(SimInputError, match=r"\(instruction 0 is an END before the last\)"):
        simulate(assemble("END\nNOP\nEND"), CONFIG)
    err = error_of("NOP\nVADDI dst_space=spad dst=0x0 src_space=spad src=0x0 count=1 imm=0 ; signal s9\nEND", Fault,
                   config=CONFIG.replace(semaphores=4))
    assert "instruction 1 (VADDI, layer 'stem'): signal on s9, but architecture 'edge' has 4 semaphores" in str(err)


def test_semaphore_overflow_is_a_fault():
    text = "NOP ; signal s1x7\n" * 9363 + "END"
    err = error_of(text, Fault, checked=False)
    assert err.index == 9362
    assert "signal s1 by 7 overflows its counter (65534 + 7 > 65535)" in str(err)


@pytest.mark.parametrize("text, index, what", [
    ("MATMUL inp=0x0 wgt=0x0 acc=0x0 rows=16 k=16 n=16 acc_mode=0 ; wait s3\nEND", 0,
     "matrix engine: instruction 0 (MATMUL, layer 'stem') waits for s3 >= 1 (s3 = 0)"),
    ("NOP\nNOP ; wait s4 signal s5\nEND", 1,
     "dispatcher: instruction 1 (NOP, layer 'stem') waits for s4 >= 1 (s4 = 0)"),
    # Two engines each waiting for the other.
    ("MATMUL inp=0x0 wgt=0x0 acc=0x0 rows=16 k=16 n=16 acc_mode=0 ; wait s1 signal s2\n"
     "VADDI dst_space=spad dst=0x800 src_space=spad src=0x0 count=16 imm=1 ; wait s2 signal s1\nEND", 0,
     "vector engine: instruction 1 (VADDI, layer 'stem') waits for s2 >= 1 (s2 = 0)"),
    # A MATMUL that waits for more than it will ever get, behind which the queue fills.
    ("NOP ; signal s1\n" + "MATMUL inp=0x0 wgt=0x0 acc=0x0 rows=16 k=16 n=16 acc_mode=0 ; wait s1x2\n"
     + "MATMUL inp=0x0 wgt=0x0 acc=0x0 rows=16 k=16 n=16 acc_mode=0\n" * 20 + "END", 1,
     "dispatcher: instruction 17 (MATMUL) waits for room in the full matrix queue"),
])
def test_deadlock_says_what_every_unit_waits_for(text, index, what):
    err = error_of(text, DeadlockError, checked=False)
    assert err.index == index
    assert str(err).startswith("deadlock at cycle ")
    assert what in str(err)


def test_faults_stop_the_machine_where_they_happen():
    """Instructions before the fault ran; the fault's cycle is when its instruction started."""
    text = """
        VADDI dst_space=spad dst=0x0 src_space=spad src=0x0 count=16 imm=5 ; signal s1
        MATMUL inp=0x0 wgt=0x0 acc=0x4000 rows=1 k=1 n=1 acc_mode=0 ; wait s1
        END
    """
    with pytest.raises(Fault) as caught:
        simulate(assemble(text), CONFIG)
    assert caught.value.cycle == CONFIG.vector_pipeline_cycles + 1
    assert caught.value.index == 1
