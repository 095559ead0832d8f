"""The ISA table and everything derived from it: encoding, decoding, assembly, the reference page.

Round trips are property-based over every instruction and field value; the
error tests pin the exact messages a user sees; the integer helpers are checked
against exact rational arithmetic.
"""
from __future__ import annotations

import contextlib
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glowsdk import numerics
from isa import (BY_MNEMONIC, INSTR_BYTES, INSTRUCTIONS, AsmError, DecodeError, Engine, Instr, IsaError, assemble,
                 decode, decode_program, disassemble, docgen, encode, encode_program, format_instr, make_instr)
from isa.behaviour import ONE_CYCLE, no_effect, no_extents
from isa.errors import IsaTableError
from isa.schema import SYNC_FIELDS, Field, InstrSpec, signed, unsigned, validate_table

GUIDE = Path(__file__).resolve().parent.parent / "vendor_guide"
EXAMPLE = "MATMUL inp=0x100 wgt=0x2000 acc=0x0 rows=196 k=2304 n=64 acc_mode=1 ; wait s3x2 signal s4"


def _field_value(draw, f: Field):
    if f.kind.names:
        return draw(st.sampled_from(f.kind.names))
    return draw(st.integers(f.kind.lo, f.kind.hi))


@st.composite
def instructions(draw, spec: InstrSpec | None = None) -> Instr:
    """Any legal instruction: every field drawn over its whole range, then the cross-field rules applied."""
    spec = spec or draw(st.sampled_from(INSTRUCTIONS))
    values = {f.name: _field_value(draw, f) for f in spec.fields}
    for lo, hi in (("clamp_lo", "clamp_hi"), ("lo", "hi")):
        if lo in values:
            values[lo], values[hi] = sorted((values[lo], values[hi]))
    if spec.mnemonic == "CONFIG_POOL":
        for pad, size in (("pad_top", "kh"), ("pad_bottom", "kh"), ("pad_left", "kw"), ("pad_right", "kw")):
            values[pad] %= values[size]
    for what in ("wait", "signal"):
        count = draw(st.integers(0, 7))
        values[f"{what}_count"] = count
        values[f"{what}_sem"] = draw(st.integers(0, 31)) if count else 0
    return make_instr(spec.mnemonic, **values)


@settings(max_examples=400, deadline=None)
@given(instructions(), st.integers(0, 1 << 20))
def test_decode_inverts_encode(instr, index):
    word = encode(instr)
    assert len(word) == INSTR_BYTES and word[0] & 0x3F == instr.spec.opcode
    assert decode(word, index) == instr


@settings(max_examples=400, deadline=None)
@given(instructions())
def test_assemble_inverts_disassemble(instr):
    text = disassemble([instr])
    assert text.count("\n") == 1
    assert assemble(text) == [instr]


@pytest.mark.parametrize("spec", INSTRUCTIONS, ids=lambda s: s.mnemonic)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_every_instruction_round_trips(spec, data):
    instr = data.draw(instructions(spec))
    assert decode(encode(instr), 7) == instr
    assert assemble(format_instr(instr)) == [instr]


@settings(max_examples=100, deadline=None)
@given(st.lists(instructions(), max_size=20))
def test_program_round_trips_through_bytes_and_text(program):
    data = encode_program(program)
    assert len(data) == INSTR_BYTES * len(program)
    assert decode_program(data) == program
    assert assemble("# a comment\n\n" + disassemble(program)) == program


@settings(max_examples=3000, deadline=None)
@given(st.binary(min_size=INSTR_BYTES, max_size=INSTR_BYTES))
def test_decode_fuzz_raises_only_decode_error_and_is_canonical(word):
    try:
        instr = decode(word, 5)
    except DecodeError as exc:
        assert str(exc).startswith("instruction 5 at byte 80: ")
        return
    assert encode(instr) == word


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=100))
def test_decode_program_fuzz(data):
    """Random bytes decode or raise the one-line DecodeError, nothing else."""
    with contextlib.suppress(DecodeError):
        decode_program(data)


_TOKENS = st.sampled_from(["MATMUL", "nop", "END", "LUT", "rows=", "count=", "dst=", "src=", "0x", "-1", "7", "=",
                           "acc", "space=", ";", "wait", "signal", "s3", "x2", "#", " ", "\n", "\t", "\u00df"])


@settings(max_examples=500, deadline=None)
@given(st.lists(_TOKENS, max_size=12).map("".join))
def test_assembler_fuzz_raises_only_asm_error(text):
    try:
        program = assemble(text)
    except AsmError as exc:
        assert str(exc).startswith("line ")
        return
    assert assemble(disassemble(program)) == program


def test_disassembly_format_and_sync_spelling():
    instr = make_instr("MATMUL", inp=0x100, wgt=0x2000, acc=0, rows=196, k=2304, n=64, acc_mode=1,
                       wait_sem=3, wait_count=2, signal_sem=4, signal_count=1)
    assert format_instr(instr) == EXAMPLE
    assert instr.rows == 196 and instr.wait_count == 2 and instr.spec.engine is Engine.MATRIX
    assert format_instr(make_instr("END")) == "END"
    assert format_instr(make_instr("NOP", signal_sem=1, signal_count=3)) == "NOP ; signal s1x3"
    load = make_instr("CONFIG_PAD", pad_top=1, pad_bottom=1, pad_left=1, pad_right=1, pad_value=-5)
    assert format_instr(load).endswith("pad_value=-5")
    # Lower-case mnemonics, explicit x1 counts, field order and comments are accepted.
    [again] = assemble("matmul n=64 k=2304 rows=196 acc=0 wgt=8192 inp=256 acc_mode=1 ;"
                       " signal s4x1 wait s3x2  # tail")
    assert again == instr


def _word(opcode: int, **fields: int) -> bytes:
    spec = next(s for s in INSTRUCTIONS if s.opcode == opcode)
    word = opcode
    for name, value in fields.items():
        f = next(f for f in (*spec.fields, *SYNC_FIELDS) if f.name == name)
        word |= (value & ((1 << f.kind.width) - 1)) << f.lsb
    return word.to_bytes(16, "little")


@pytest.mark.parametrize("word, message", [
    (bytes([0x3F]) + bytes(15), "instruction 12 at byte 192: illegal opcode 0x3f"),
    (bytes(16), "instruction 12 at byte 192: illegal opcode 0x00"),
    (_word(0x0D, inp=1, wgt=2, acc=3, rows=0, k=1, n=1),
     "instruction 12 at byte 192: MATMUL: field 'rows' = 0 is out of range 1..65535"),
    (_word(0x10, multiplier=1, shift=0x7F, clamp_hi=127),
     "instruction 12 at byte 192: CONFIG_REQUANT: field 'shift' = 127 is out of range -31..31"),
    (_word(0x11, lo=5, hi=3), "instruction 12 at byte 192: CONFIG_CLAMP: lo = 5 is greater than hi = 3"),
    (_word(0x12, kh=2, kw=2, stride_h=1, stride_w=1, pad_left=2),
     "instruction 12 at byte 192: CONFIG_POOL: pad_left = 2 must be below kw = 2"),
    (_word(0x01, wait_sem=3),
     "instruction 12 at byte 192: NOP: wait_sem = 3 with wait_count = 0 (must be 0 when nothing is waited)"),
    (_word(0x02) [:15] + b"\x80",
     "instruction 12 at byte 192: END: reserved bit 127 is set (reserved bits must be zero)"),
    (bytes(15), "instruction 12 at byte 192: expected 16 bytes, got 15"),
])
def test_decode_errors_name_index_offset_and_field(word, message):
    with pytest.raises(DecodeError) as info:
        decode(word, 12)
    assert str(info.value) == message


def test_decode_program_names_the_failing_instruction_and_truncation():
    good = encode(make_instr("NOP"))
    with pytest.raises(DecodeError, match=r"^instruction 2 at byte 32: illegal opcode 0x3f$"):
        decode_program(good * 2 + bytes([0x3F]) + bytes(15))
    with pytest.raises(DecodeError, match=r"^instruction stream of 40 bytes is not a whole number of 16-byte "
                                          r"instructions \(8 bytes left over at byte 32\)$"):
        decode_program(good * 2 + bytes(8))


@pytest.mark.parametrize("build, message", [
    (lambda: make_instr("FOO"), "unknown instruction 'FOO'"),
    (lambda: make_instr("NOP", rows=1), "NOP: unknown field 'rows' (fields: wait_sem, wait_count, signal_sem, "
                                        "signal_count)"),
    (lambda: make_instr("LUT", dst=0, src=0), "LUT: missing field 'count'"),
    (lambda: make_instr("LUT", dst=0, src=0, count=True), "LUT: field 'count' = True is not an integer"),
    (lambda: make_instr("LUT_LOAD", src=1 << 22), "LUT_LOAD: field 'src' = 0x400000 is out of range 0x0..0x3fffff"),
    (lambda: make_instr("CONFIG_MATMUL", dataflow="is", im2col=0, out_w=1, channels=1, kw=1, stride_h=1,
                        stride_w=1, dil_h=1, dil_w=1, row_pitch=0, pixel_pitch=0),
     "CONFIG_MATMUL: field 'dataflow' = 'is' is not one of ws, os"),
    (lambda: make_instr("NOP").replace(wait_count=8), "NOP: field 'wait_count' = 8 is out of range 0..7"),
    (lambda: Instr("NOP", (0,)), "NOP: expected 4 field values, got 1"),
])
def test_building_an_illegal_instruction_says_why(build, message):
    with pytest.raises(IsaError) as info:
        build()
    assert str(info.value) == message


@pytest.mark.parametrize("text, message", [
    ("NOP\nFROB x=1", "line 2: unknown instruction 'FROB'"),
    ("LUT dst=0 src=0", "line 1: LUT: missing field 'count'"),
    ("LUT dst=0 src=0 count=zero", "line 1: LUT: field 'count' value 'zero' is not an integer"),
    ("LUT dst=0 src=0 count=1 count=2", "line 1: LUT: field 'count' given twice"),
    ("LUT dst=0 src=0 count", "line 1: LUT: expected name=value, got 'count'"),
    ("LUT dst=0 src=0 cnt=1", "line 1: LUT: unknown field 'cnt' (fields: dst, src, count)"),
    ("\n\nLUT dst=0 src=0 count=0", "line 3: LUT: field 'count' = 0 is out of range 1..16777215"),
    ("NOP ; wait q3", "line 1: NOP: expected 'wait sN[xC]' or 'signal sN[xC]', got 'wait q3'"),
    ("NOP ; wait s3 wait s4", "line 1: NOP: 'wait' given twice"),
    ("NOP ; wait", "line 1: NOP: expected 'wait sN[xC]' or 'signal sN[xC]' after ';', got 'wait'"),
    ("NOP ; signal s2x0", "line 1: NOP: 'signal s2x0' has count 0 (omit it instead)"),
    ("NOP ; wait s40", "line 1: NOP: field 'wait_sem' = 40 is out of range 0..31"),
    ("; wait s1", "line 1: synchronisation without an instruction"),
    ("NOP wait_sem=1", "line 1: NOP: unknown field 'wait_sem' (fields: none)"),
])
def test_assembler_errors_name_the_line(text, message):
    with pytest.raises(AsmError) as info:
        assemble(text)
    assert str(info.value) == message


def test_table_covers_every_engine_and_fits():
    assert {s.engine for s in INSTRUCTIONS} == set(Engine)
    validate_table(INSTRUCTIONS)
    for name in ("NOP", "END", "CONFIG_LOAD", "CONFIG_PAD", "LOAD", "STORE", "MATMUL", "CONFIG_MATMUL",
                 "CONFIG_REQUANT", "REQUANT", "VADD", "VMUL", "VMIN", "VMAX", "VSHL", "VSHR", "CLAMP", "LUT_LOAD",
                 "LUT", "POOL", "REDUCE"):
        assert name in BY_MNEMONIC


RULES = dict(semantics=no_effect, extents=no_extents, timing=ONE_CYCLE)
"""What a test row does (nothing, in one cycle): every record must say."""


def _spec(mnemonic: str, opcode: int, *fields: Field) -> InstrSpec:
    return InstrSpec(mnemonic, opcode, Engine.VECTOR, fields, "test row", "test", **RULES)


U8 = unsigned("u8", 8, "byte")


def _config(mnemonic: str, opcode: int, **reset: int) -> InstrSpec:
    """A config row with one register `x` and the given reset values."""
    return InstrSpec(mnemonic, opcode, Engine.VECTOR, (Field("x", 22, U8, ""),), "test row", "test",
                     reset=tuple(reset.items()), **RULES)


@pytest.mark.parametrize("table, message", [
    ([_spec("A", 1), _spec("B", 1)], "ISA table: B: opcode 0x01 already used by A"),
    ([_spec("A", 1), _spec("A", 2)], "ISA table: A: mnemonic declared twice"),
    ([_spec("A", 64)], "ISA table: A: opcode 0x40 does not fit 1..0x3f"),
    ([_spec("A", 0)], "ISA table: A: opcode 0x0 does not fit 1..0x3f"),
    ([_spec("A", 1, Field("x", 22, U8, ""), Field("y", 29, U8, ""))],
     "ISA table: A: field 'y' (bits 29..36) overlaps 'x' (bits 22..29)"),
    ([_spec("A", 1, Field("x", 20, U8, ""))],
     "ISA table: A: field 'x' (bits 20..27) overlaps 'signal_count' (bits 19..21)"),
    ([_spec("A", 1, Field("x", 121, U8, ""))], "ISA table: A: field 'x' (bits 121..128) does not fit in 128 bits"),
    ([_spec("A", 1, Field("x", 22, U8, ""), Field("x", 40, U8, ""))],
     "ISA table: A: field name 'x' is duplicated or not an identifier"),
    ([_spec("A", 1, Field("x", 22, unsigned("bad", 4, "", hi=16), ""))],
     "ISA table: A: field 'x' range 0..16 does not fit 4 bits"),
    ([_spec("A", 1, Field("x", 22, signed("bad", 4, "", lo=-9), ""))],
     "ISA table: A: field 'x' range -9..7 does not fit 4 bits"),
    ([_spec("a", 1)], "ISA table: a: mnemonic must be an upper-case identifier"),
    ([_config("A", 1, x=0, y=0)], "ISA table: A: reset values must name every field, in order"),
    ([_config("A", 1, x=300)], "ISA table: A: reset value of 'x' = 300 is out of range 0..255"),
    ([_config("A", 1, x=0), _config("B", 2, x=1)],
     "ISA table: B: register 'x' of the vector engine is already set by A"),
])
def test_broken_tables_fail_loudly(table, message):
    with pytest.raises(IsaTableError) as info:
        validate_table(table)
    assert str(info.value) == message


@pytest.mark.parametrize("left_out", [["semantics"], ["extents"], ["timing"], ["semantics", "timing"]])
def test_a_record_without_its_rules_fails_as_it_is_built(left_out):
    rules = {name: rule for name, rule in RULES.items() if name not in left_out}
    with pytest.raises(IsaTableError) as info:
        InstrSpec("A", 1, Engine.VECTOR, (), "test row", "test", **rules)
    assert str(info.value) == (f"ISA table: A: no {' and no '.join(left_out)} (every record carries its semantics, "
                               f"memory extents and timing)")


def test_isa_reference_is_current():
    assert (GUIDE / "isa.md").read_text() == docgen.render(), \
        "regenerate: python -m isa.docgen > vendor_guide/isa.md"


# The integer semantics, against exact rational arithmetic.

def _round_half_even(value: Fraction) -> int:
    return round(value)  # Fraction.__round__ rounds half to even


@settings(max_examples=500, deadline=None)
@given(st.integers(-(1 << 31), (1 << 31) - 1), st.integers(0, (1 << 31) - 1), st.integers(-31, 31),
       st.integers(-128, 127), st.integers(-128, 127), st.integers(-128, 127))
def test_requantize_matches_exact_rounding(x, multiplier, shift, zero_point, a, b):
    lo, hi = sorted((a, b))
    expected = min(max(_round_half_even(Fraction(x * multiplier, 1 << (31 + shift))) + zero_point, lo), hi)
    got = numerics.requantize(np.array([x], np.int32), multiplier, shift, zero_point, lo, hi)
    assert got.dtype == np.int8 and int(got[0]) == expected


def test_requantize_per_channel_and_ties():
    x = np.array([[3, -3, 5, -5]], np.int32)
    # multiplier 2^30 with shift 0 halves: 1.5 -> 2, -1.5 -> -2, 2.5 -> 2, -2.5 -> -2 (half to even).
    assert numerics.requantize(x, 1 << 30, 0, 0).tolist() == [[2, -2, 2, -2]]
    per_channel = numerics.requantize(x, np.array([1 << 30] * 4), np.array([-1, -1, 0, 0]), 10)
    assert per_channel.tolist() == [[13, 7, 12, 8]]  # shift -1 keeps x; shift 0 halves 5 -> 2, -5 -> -2


@settings(max_examples=300, deadline=None)
@given(st.floats(2.0 ** -40, 2.0 ** 30))
def test_quantize_multiplier_is_close(real):
    multiplier, shift = numerics.quantize_multiplier(real)
    assert 0 <= multiplier < 1 << 31 and -31 <= shift <= 31
    represented = multiplier * 2.0 ** -(31 + shift)
    assert abs(represented - real) <= 2.0 ** -(31 + shift)
    if real >= 2.0 ** -31:
        assert multiplier >= 1 << 30


@settings(max_examples=300, deadline=None)
@given(st.integers(-128 * 225, 127 * 225), st.integers(1, 225))
def test_rounded_average_matches_exact_rounding(total, count):
    assert int(numerics.rounded_average(total, count)) == _round_half_even(Fraction(total, count))


def test_vector_ops_saturate_to_the_destination_and_shifts_clamp():
    a = np.array([100, -100, 2 ** 30, -7], np.int64)
    b = np.array([100, 100, 4, 40], np.int64)
    assert numerics.binary("ADD", a, b, "spad").tolist() == [127, 0, 127, 33]
    assert numerics.binary("MUL", a, b, "acc").tolist() == [10000, -10000, 2 ** 31 - 1, -280]
    assert numerics.binary("SHR", a, b, "acc").tolist() == [0, -1, 2 ** 26, -1]
    assert numerics.binary("SHL", np.array([1, 3]), np.array([-5, 35]), "acc").tolist() == [1, 2 ** 31 - 1]
    assert numerics.wrap32(np.array([2 ** 31, -(2 ** 31) - 1])).tolist() == [-(2 ** 31), 2 ** 31 - 1]
