"""Energy, area, access counts and root-caused stalls of a run (sim.architect, sim.energy, sim.stalls)."""
from __future__ import annotations

from pathlib import Path

import pytest

from isa import PRESETS, assemble
from isa.sections import DebugRange
from sim.energy import DEFAULT_TABLE, load_energy_table
from sim.errors import SimInputError
from sim.simulator import simulate

# A 16 KiB LOAD at 8 B/cycle (edge) feeds a MATMUL, which feeds a vector add: both wait on DRAM bandwidth.
PROGRAM = """
    CONFIG_LOAD row_stride=0 plane_stride=0 col_stride=0 elem_bytes=256
    LOAD dram=0x1000 space=spad sram=0x0 planes=64 rows=1 cols=1 ; signal s1
    MATMUL inp=0x0 wgt=0x0 acc=0x0 rows=16 k=16 n=16 acc_mode=0 ; wait s1 signal s2
    VADDI dst_space=spad dst=0x8000 src_space=spad src=0x0 count=256 imm=1 ; wait s2 signal s3
    END ; wait s3
"""


def run():
    return simulate(assemble(PROGRAM), PRESETS["edge"], layers=[DebugRange(0, 5, "conv", "Conv")])


def test_waits_are_booked_to_the_bandwidth_bound_load() -> None:
    result = run()
    stalls = result.architect()["layers"][0]["stall_cycles"]
    matrix = stalls["matrix"]
    # the MATMUL waited for the LOAD's 16 KiB at 8 B/cycle (2048 cycles) after its 100-cycle latency
    assert matrix["dram_bandwidth"] == pytest.approx(2048, abs=2) and matrix["dram_latency"] == pytest.approx(100, abs=2)
    # the vector engine waits on the MATMUL, which itself waited: the chain ends at the LOAD
    assert stalls["vector"]["dram_bandwidth"] > 2000 and stalls["vector"]["matrix"] == 0
    # every stalled cycle of the matrix engine is accounted for
    assert sum(matrix.values()) == sum(result.timeline.units[e].stalls[r] for e in [result.steps[2].engine]
                                       for r in result.timeline.units[e].stalls)


def test_access_counts_and_energy() -> None:
    report = run().architect()
    layer = report["layers"][0]
    accesses = layer["accesses_bytes"]
    assert accesses["dram"]["read"] == {"activations": 64 * 256}
    assert accesses["spad"]["read"] == {"input": 256, "weights": 256, "vector": 256}
    assert accesses["acc"]["write"] == {"output": 16 * 16 * 4}
    energy = layer["energy_pj"]
    assert energy["matrix"] == pytest.approx(16 * 16 * 16 * DEFAULT_TABLE.mac_pj)
    assert energy["dram"] == pytest.approx(64 * 256 * DEFAULT_TABLE.dram_pj_per_byte)
    assert energy["total"] == pytest.approx(report["energy_pj"]["total"])  # one layer covers the program
    assert report["pj_per_mac"] == pytest.approx(energy["total"] / 4096)
    area = report["area_mm2"]
    assert area["matrix"] == pytest.approx(16 * 16 * DEFAULT_TABLE.mac_um2 / 1e6)
    assert area["total"] == pytest.approx(sum(v for k, v in area.items() if k != "total"))


def test_sram_energy_per_byte_follows_horowitz_points() -> None:
    # 10 pJ (8 KiB), 20 pJ (32 KiB), 100 pJ (1 MiB) per 64-bit access
    assert DEFAULT_TABLE.sram_pj_per_byte(8 << 10) * 8 == pytest.approx(10)
    assert DEFAULT_TABLE.sram_pj_per_byte(32 << 10) * 8 == pytest.approx(20, rel=0.05)
    assert DEFAULT_TABLE.sram_pj_per_byte(1 << 20) * 8 == pytest.approx(100, rel=0.01)


def test_energy_table_overrides(tmp_path: Path) -> None:
    path = tmp_path / "e.toml"
    path.write_text('node = "7 nm (my estimates)"\nmac_pj = 0.05\n')
    table = load_energy_table(path)
    assert table.mac_pj == 0.05 and table.node.startswith("7 nm") and table.dram_pj_per_byte == 162.5
    for text, message in (("mac_pj = -1\n", "'mac_pj' = -1 is not a non-negative number"),
                          ("macs = 1\n", "unknown key 'macs'"), ("mac_pj = \n", "not a valid TOML")):
        path.write_text(text)
        with pytest.raises(SimInputError, match=message):
            load_energy_table(path)


def test_every_table_entry_is_documented() -> None:
    from dataclasses import fields

    from sim.energy import EnergyTable

    doc = (Path(__file__).resolve().parents[1] / "vendor_guide" / "energy_area.md").read_text()
    assert [f.name for f in fields(EnergyTable) if f"`{f.name}`" not in doc] == []


def test_text_and_json_reports_carry_it() -> None:
    import json

    from sim.report import format_json, format_text

    result = run()
    text = format_text(result)
    assert "pJ/MAC" in text and "area" in text and "stall: DRAM bw" in text
    report = json.loads(format_json(result))["architect"]
    assert report["layers"][0]["stall_cycles"]["matrix"]["dram_bandwidth"] > 0
    assert set(report["energy_pj"]) == {"total", "matrix", "vector", "scratchpad", "accumulator", "dram", "dma"}
