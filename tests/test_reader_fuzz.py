"""Short runs of the configuration and profile fuzzers (the long ones: bench/fuzz_readers.py), and one
regression test per root cause they found: every bad file gives a one-line GlowError, nothing else."""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from fuzz.reader_harness import run_mutant

from glowsdk.cli.main import main as cli_main
from glowsdk.errors import GlowError
from glowsdk.quantization import Profile, ValueProfile
from glowsdk.quantization.profile import format_profile
from glowsdk.quantization.profile_reader import load_profile
from isa import ConfigError, load_config


def _no_crash(outcomes) -> None:
    bad = [(i, o) for i, o in enumerate(outcomes) if o.verdict not in ("ok", "error")]
    assert not bad, [f"mutant {i} ({o.seed}: {'+'.join(o.log)}): {o.key}: {o.message}" for i, o in bad[:5]]
    verdicts = Counter(o.verdict for o in outcomes)
    assert verdicts["ok"] > len(outcomes) // 50 and verdicts["error"] > len(outcomes) // 2


def test_config_smoke_run(tmp_path):
    _no_crash([run_mutant("config", 11, i, str(tmp_path)) for i in range(600)])


def test_profile_smoke_run(tmp_path):
    _no_crash([run_mutant("profile", 11, i, str(tmp_path)) for i in range(200)])


# -- configuration parser: one test per root cause -----------------------------------------------
def _config_error(tmp_path, text: str, suffix: str = ".toml") -> str:
    path = tmp_path / f"a{suffix}"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "\n" not in message and "\r" not in message
    return message


def test_config_out_of_range_integer_too_long_to_print(tmp_path):
    # str() of an integer over 4300 digits raises ValueError: the message gives its size instead.
    message = _config_error(tmp_path, "array_rows = 0x" + "f" * 4000 + "\n")
    assert "key 'array_rows' = an integer of 16000 bits is out of range 1..1024" in message


def test_config_preset_that_is_an_integer_too_long_to_print(tmp_path):
    # found by atheris (bench/fuzz_atheris.py): a hex 'preset' of 4,000 digits went into the message with repr()
    message = _config_error(tmp_path, "preset = 0x" + "f" * 4000 + "\n")
    assert "key 'preset': expected one of edge, default, server, got int" in message


@pytest.mark.parametrize("suffix, text", [(".toml", "array_rows = " + "1" * 5000),
                                          (".json", '{"a": ' + "1" * 5000 + "}")], ids=["toml", "json"])
def test_config_integer_of_too_many_digits_for_the_parser(tmp_path, suffix, text):
    # tomllib and json raise a plain ValueError (Python's int digit limit), not their decode error.
    assert "an integer with too many digits" in _config_error(tmp_path, text, suffix)


@pytest.mark.parametrize("suffix, text", [(".toml", "a = " + "[" * 100_000), (".json", "[" * 100_000)],
                         ids=["toml", "json"])
def test_config_nested_too_deeply(tmp_path, suffix, text):
    assert "values nested too deeply" in _config_error(tmp_path, text, suffix)


def test_config_preset_of_the_wrong_type(tmp_path):
    # An array is unhashable: `in PRESETS` raised TypeError.
    assert "key 'preset': expected one of edge, default, server, got list" in _config_error(tmp_path, "preset = [1]\n")


def test_config_size_with_too_many_digits(tmp_path):
    message = _config_error(tmp_path, f'dram_bytes = "{"9" * 5000} GiB"\n')
    assert "is not a size such as 262144 or '256 KiB'" in message


def test_config_integer_past_a_double(tmp_path):
    # float() of it raised OverflowError before the range check.
    message = _config_error(tmp_path, f"clock_ghz = {10 ** 400}\n")
    assert "key 'clock_ghz' = an integer of 1329 bits is out of range 0.001..100" in message


def test_config_line_breaks_stay_on_one_line(tmp_path):
    assert "unknown key 'dram\\r_bytes'" in _config_error(tmp_path, '"dram\\r_bytes" = 1\n')
    assert "expected a non-empty string of printable characters" in _config_error(tmp_path, 'name = "a\\nb"\n')


def test_config_cli_gives_one_line(tmp_path, capsys):
    path = tmp_path / "a.toml"
    path.write_text("a = " + "[" * 100_000, encoding="utf-8")
    assert cli_main(["disasm", "missing.npub", "--config", str(path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


# -- profile reader: one test per root cause -------------------------------------------------------
def _profile() -> dict:
    value = ValueProfile("x", "Placeholder", "float32", (4,), bins=16)
    value.add(np.array([0.5, 1.0, 2.0, 3.0], np.float32))
    profile = Profile(model={"name": "m"}, calibration={"inputs": 1}, bins=16)
    profile.values["x"] = value
    return json.loads(format_profile(profile))


def _profile_error(tmp_path, data: dict | str) -> str:
    path = tmp_path / "p.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    with pytest.raises(GlowError) as info:
        load_profile(path)
    message = str(info.value)
    assert "\n" not in message and "\r" not in message
    return message


def test_profile_baseline_reads(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_profile()), encoding="utf-8")
    assert load_profile(path)["x"].count == 4


def test_profile_nested_too_deeply(tmp_path):
    assert "not a profile (JSON nested too deeply)" in _profile_error(tmp_path, "[" * 100_000)


def test_profile_count_past_int64(tmp_path):
    # np.array(..., dtype=np.int64) raised OverflowError.
    data = _profile()
    data["values"][0]["histogram"]["counts"][3] = 1 << 70
    assert "values[0] ('x').histogram.counts: expected an integer of at most" in _profile_error(tmp_path, data)


def test_profile_number_past_a_double(tmp_path):
    data = _profile()
    data["values"][0]["histogram"]["edge"] = 10 ** 400
    assert "histogram.edge: the integer of 1329 bits is past the range of a double" in _profile_error(tmp_path, data)


@pytest.mark.parametrize("edge, width", [(1e300, 2.0 ** -1000), (-(2.0 ** 70), 1.0)])
def test_profile_edge_too_many_bin_widths_from_zero(tmp_path, edge, width):
    # found by atheris (bench/fuzz_atheris.py): math.ldexp(edge, -exponent) raised OverflowError
    data = _profile()
    data["values"][0]["histogram"].update(edge=edge, width=width)
    assert "is more than 2**62 bin widths of" in _profile_error(tmp_path, data)


def test_profile_name_with_a_line_break(tmp_path):
    data = _profile()
    data["values"][0]["name"] = "a\nb"
    data["values"][0]["count"] = "4"
    assert "values[0] ('a\\nb').count: expected an integer, got a string" in _profile_error(tmp_path, data)


def test_profile_huge_bin_count_is_refused_before_allocating(tmp_path):
    # ValueProfile allocated np.zeros(histogram_bins) before the counts' length was checked (MemoryError).
    data = _profile()
    data["histogram_bins"] = 1 << 43
    message = _profile_error(tmp_path, data)
    assert f"expected an array of histogram_bins = {1 << 43} counts, got 16 entries" in message
