"""A tile's accumulator slot is free once its vector work last reads or writes it (pipeline._accumulator_read):
after the REQUANT, not after a residual addition that reads only the scratchpad, so the tile two later's products
start during that addition; where the addition uses the accumulator as scratch (VADD into it, VSUBI out of it),
only after it. Checked mode and bit-exact on residual bottlenecks."""
from __future__ import annotations

from glowsdk.backends.npu.instructions import (CONFIG_CLAMP, CONFIG_REQUANT, LUT_LOAD, LUT_VADD_LUT, REQUANT, VADD,
                                               VSUBI)
from glowsdk.backends.npu.pipeline import ACCFREE, _accumulator_read

from test_npu_accplace import bottlenecks
from test_npu_backend import assert_bit_exact

CONFIG = CONFIG_REQUANT(multiplier=1, shift=0, zero_point=0, clamp_lo=-128, clamp_hi=127, per_channel=0, table=0,
                        bias_row=1, bias=0)
"""(its bias field is an accumulator address)"""
PIXELS, N, OUT, ACC, OPERAND = 4, 64, 0, 512, 1024


def test_the_slot_is_free_after_the_last_instruction_touching_the_accumulator():
    requant = [CONFIG, REQUANT(dst=OUT, src=ACC, rows=PIXELS, cols=N)]
    looked_up = [LUT_LOAD(src=2048), LUT_VADD_LUT(dst=OUT, src1=OUT, src2=OPERAND, table=4096, count=PIXELS * N)]
    assert _accumulator_read(requant + looked_up) == 2
    scratch = [VADD(dst_space="acc", dst=ACC, src1_space="spad", src1=OUT, src2_space="spad", src2=OPERAND,
                    rows=PIXELS, cols=N, bcast=0),
               VSUBI(dst_space="spad", dst=OUT, src_space="acc", src=ACC, count=PIXELS * N, imm=0)]
    assert _accumulator_read(requant + scratch) == 4
    folded = [VADD(dst_space="spad", dst=OUT, src1_space="spad", src1=OUT, src2_space="spad", src2=OPERAND,
                   rows=PIXELS, cols=N, bcast=0), CONFIG_CLAMP(lo=-128, hi=127)]
    assert _accumulator_read(requant + folded) == 2
    assert _accumulator_read(requant + [CONFIG_CLAMP(lo=-128, hi=127)]) == 3  # (nothing computes after it)


def test_a_residual_tile_frees_its_slot_between_its_requant_and_its_addition():
    npu = assert_bit_exact(bottlenecks(28, 1), config="server")  # checked mode: the slot's reuse races nothing
    program = npu.compiled.binary.instructions
    frees = [k for k, i in enumerate(program) if i.signal_count and i.signal_sem in (ACCFREE, ACCFREE + 1)]
    before_addition = [k for k in frees if program[k - 1].mnemonic == "REQUANT"
                       and "LUT_VADD_LUT" in [i.mnemonic for i in program[k + 1:k + 3]]]
    assert len(before_addition) == 5  # the addition layer's 8 tiles: tile t frees its slot for tile t + 2, but for
    # the last, which packs beside the one before it (accpack.py)
