"""Property-based fuzzing of the .npub reader: whatever the bytes, it raises a one-line GlowError or succeeds."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glowsdk.errors import GlowError
from isa import PRESETS, config_hash
from isa.container import MAGIC, pack_npub, read_npub
from isa.npub_layout import SectionKind
from test_container import DATA, LAYOUT, reseal, sample


def _read_or_glow_error(data: bytes, config=None) -> None:
    try:
        read_npub(data, config=config)
    except GlowError as err:
        assert "\n" not in str(err)


FUZZ = settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=2048))
def test_fuzz_random_bytes(data):
    _read_or_glow_error(data)
    _read_or_glow_error(MAGIC + data)


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(DATA) - 1), st.integers(0, 255)), min_size=1, max_size=8),
       st.integers(0, len(DATA)), st.booleans())
def test_fuzz_mutated_files(edits, cut, fix_crcs):
    data = bytearray(DATA)
    for at, value in edits:
        data[at] = value
    data = data[:cut] if cut < len(data) else data
    if fix_crcs and len(data) == len(DATA):
        data = bytearray(reseal(data))
    _read_or_glow_error(bytes(data))


@FUZZ
@given(st.sampled_from([SectionKind.TENSORS, SectionKind.BINDINGS, SectionKind.MEMORY_PLAN, SectionKind.DEBUG,
                        SectionKind.METADATA, SectionKind.INSTRUCTIONS]),
       st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1, max_size=6))
def test_fuzz_section_contents_behind_valid_crcs(kind, edits):
    s = LAYOUT[kind]
    data = bytearray(DATA)
    for at, value in edits:
        data[s.offset + at % s.size] = value
    _read_or_glow_error(reseal(data))


ON_DEFAULT = pack_npub(sample(config_hash=config_hash(PRESETS["default"])))


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 127), st.integers(0, 255)), min_size=1, max_size=4))
def test_fuzz_instructions_on_a_machine(edits):
    s = LAYOUT[SectionKind.INSTRUCTIONS]
    data = bytearray(ON_DEFAULT)
    for at, value in edits:
        data[s.offset + at] = value
    _read_or_glow_error(reseal(data), PRESETS["default"])
