"""The architecture configuration: presets as the issue states them, files, printing, hashing."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from isa import PRESETS, ArchConfig, ConfigError, config_hash, format_config, load_config, resolve_config
from isa.config import PARAMETERS, KiB, MiB, canonical_json, presets_markdown

DATASHEET = Path(__file__).resolve().parent.parent / "vendor_guide" / "npu_architecture.md"


@pytest.mark.parametrize("name, dim, spad, acc, bandwidth", [
    ("edge", 16, 256 * KiB, 64 * KiB, 8),
    ("default", 32, 512 * KiB, 128 * KiB, 32),
    ("server", 64, 2 * MiB, 512 * KiB, 64),
])
def test_presets_are_the_issue_s_machines(name, dim, spad, acc, bandwidth):
    c = PRESETS[name]
    assert (c.name, c.array_rows, c.array_cols) == (name, dim, dim)
    assert (c.scratchpad_bytes, c.accumulator_bytes, c.dram_bytes_per_cycle) == (spad, acc, bandwidth)
    assert (c.clock_ghz, c.dram_latency_cycles, c.dataflow) == (1.0, 100, "both")
    # Enough requests in flight to reach peak bandwidth over the latency (Little's law).
    assert c.dram_max_outstanding * c.dma_burst_bytes >= c.dram_bytes_per_cycle * c.dram_latency_cycles
    assert resolve_config(name) is c


def test_hash_is_stable_and_ignores_the_name():
    # Pinned: binaries record these, so a change here must bump HASH_SCHEMA deliberately (or, as when the
    # presets' dataflow became "both", be a deliberate change of the presets themselves).
    assert config_hash(PRESETS["edge"]) == "33b94ca26d409d241269d2e11f569c8e358f3944a0dde3792bf651fbe5497fb6"
    assert config_hash(PRESETS["default"]) == "7046c5c47431c0c3438b4e59bb78bb18550137577dd5e437e04ef494dc02c5be"
    default = PRESETS["default"]
    assert config_hash(default.replace(name="mine")) == config_hash(default)
    assert config_hash(default.replace(dram_latency_cycles=101)) != config_hash(default)
    assert json.loads(canonical_json(default))["array_rows"] == 32
    assert len({config_hash(c) for c in PRESETS.values()}) == 3


def test_format_config_prints_every_parameter():
    text = format_config(PRESETS["server"])
    assert text.startswith("NPU architecture 'server' (config hash d032bc03a457bcc9)")
    for p in PARAMETERS:
        assert f"  {p.name} " in text
    assert "2 MiB" in text and "8.19 TOPS (4096 MAC/cycle)" in text


def test_toml_file_overrides_a_preset(tmp_path):
    path = tmp_path / "wide.toml"
    path.write_text('preset = "edge"\narray_cols = 32\nscratchpad_bytes = "1 MiB"\nclock_ghz = 2\n'
                    'dataflow = "os"\n')
    c = load_config(path)
    assert c.name == "wide" and c.array_rows == 16 and c.array_cols == 32
    assert c.scratchpad_bytes == MiB and c.clock_ghz == 2.0 and c.dataflow == "os"
    assert c.accumulator_bytes == PRESETS["edge"].accumulator_bytes
    assert resolve_config(str(path)) == c


def test_json_file_defaults_to_the_default_preset(tmp_path):
    path = tmp_path / "arch.json"
    path.write_text(json.dumps({"name": "lab", "vector_lanes": 128, "accumulator_bytes": 262144}))
    c = load_config(path)
    assert c == PRESETS["default"].replace(name="lab", vector_lanes=128, accumulator_bytes=256 * KiB)


@pytest.mark.parametrize("name, text, message", [
    ("a.toml", "array_rowz = 4\n", "a.toml: unknown key 'array_rowz' (known: preset, name, array_rows, "),
    ("a.toml", "array_rows = true\n", "a.toml: key 'array_rows': expected an integer, got bool"),
    ("a.toml", "array_rows = 2.5\n", "a.toml: key 'array_rows': expected an integer, got float"),
    ("a.toml", "array_rows = 0\n", "a.toml: key 'array_rows' = 0 is out of range 1..1024"),
    ("a.toml", "scratchpad_bytes = 8388608\n", "a.toml: key 'scratchpad_bytes' = 8388608 is out of range "
                                               "4 KiB..4 MiB"),
    ("a.toml", 'scratchpad_bytes = "lots"\n', "a.toml: key 'scratchpad_bytes' = 'lots' is not a size such as "
                                              "262144 or '256 KiB'"),
    ("a.toml", "accumulator_bytes = 2050\n", "a.toml: key 'accumulator_bytes' = 2050 is not a multiple of 4"),
    ("a.toml", "dma_burst_bytes = 96\n", "a.toml: key 'dma_burst_bytes' = 96 is not a power of two"),
    ("a.toml", 'dataflow = "rs"\n', "a.toml: key 'dataflow' = 'rs' is not one of ws, os, both"),
    ("a.toml", 'clock_ghz = "fast"\n', "a.toml: key 'clock_ghz': expected a number, got str"),
    ("a.toml", 'preset = "huge"\n', "a.toml: key 'preset' = 'huge' is not one of edge, default, server"),
    ("a.toml", "array_rows = \n", "a.toml: not valid TOML: "),
    ("a.json", '{"array_rows": 4,}', "a.json: not valid JSON: "),
    ("a.json", "[1, 2]", "a.json: expected a table of parameters at top level, got list"),
    ("a.yaml", "array_rows: 4", "a.yaml: unknown configuration format '.yaml' (use .toml or .json)"),
])
def test_bad_files_name_file_and_key(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(str(tmp_path / message))
    assert "\n" not in str(info.value)


def test_missing_file_and_unknown_preset(tmp_path):
    with pytest.raises(ConfigError, match=r"nope\.toml: cannot read \(No such file or directory\)"):
        load_config(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match=r"^unknown architecture preset 'tiny' \(presets: edge, default, server; "):
        resolve_config("tiny")


def test_direct_construction_is_validated():
    with pytest.raises(ConfigError, match=r"^architecture 'default': key 'semaphores' = 33 is out of range 1\.\.32$"):
        PRESETS["default"].replace(semaphores=33)
    with pytest.raises(ConfigError, match="name must be a non-empty string"):
        ArchConfig(**{**PRESETS["edge"].__dict__, "name": ""})


def test_datasheet_embeds_the_current_preset_table():
    assert presets_markdown() in DATASHEET.read_text(), \
        "update the preset table in vendor_guide/npu_architecture.md from isa.config.presets_markdown()"
