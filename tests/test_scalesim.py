"""The SCALE-Sim-compatible model: its stall-free limit is the closed form, its stalls are SCALE-Sim v3's,
and bad input files are one line naming file and line."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from glowsdk.cli.main import main
from isa.config import PRESETS
from sim.errors import SimInputError
from sim.scalesim.inputs import Layer, ScaleConfig, read_config, read_topology
from sim.scalesim.model import simulate_layer
from sim.scalesim.reports import report_texts
from sim.timing import matmul_cycles

EXAMPLES = Path(__file__).resolve().parents[1] / "bench" / "scalesim_examples"


def _config(rows: int, cols: int, dataflow: str, bandwidth=None, kb: int = 64) -> ScaleConfig:
    return ScaleConfig("t", rows, cols, kb, kb, kb, dataflow, bandwidth)


@pytest.mark.parametrize("dataflow", ["ws", "os"])
@pytest.mark.parametrize("layer", [Layer("conv", 9, 9, 3, 3, 5, 7, 1), Layer("strided", 11, 10, 3, 2, 3, 20, 2),
                                   Layer("gemm", 37, 19, 1, 19, 1, 11, 1)])
def test_stall_free_limit_is_the_closed_form(layer: Layer, dataflow: str) -> None:
    # unbounded bandwidth (CALC) and SRAMs larger than the layer: the fold model is sim.timing's closed form
    config = _config(4, 6, dataflow)
    arch = replace(PRESETS["edge"], array_rows=4, array_cols=6)
    result = simulate_layer(layer, config)
    assert result.stall_cycles == 0
    assert result.total_cycles == matmul_cycles(layer.pixels, layer.window, layer.filters, dataflow, arch)


def test_bandwidth_bound_layer_matches_scalesim() -> None:
    # SCALE-Sim v3.0.0 on its example layer (topologies/conv_nets/test.csv, 32x32 os, 64 KiB SRAMs, USER 10
    # words/cycle): Total Cycles 67667, Stall Cycles 46188, DRAM ifmap reads 393240, filter reads 688170
    config = replace(read_config(EXAMPLES / "scale.cfg"), bandwidth=(10, 10, 10))
    result = simulate_layer(read_topology(EXAMPLES / "test.csv")[0], config)
    assert (result.total_cycles, result.stall_cycles) == (67667, 46188)
    assert (result.dram[0][2], result.dram[1][2]) == (393240, 688170)
    assert result.sram_reads == (518400, 663552) and result.sram_writes == 10368


@pytest.mark.parametrize("dataflow, m, n, k, total, stalls", [
    ("os", 300, 48, 70, 19203, 13504), ("os", 40, 200, 160, 54567, 47158),
    ("ws", 128, 128, 128, 52630, 41495), ("ws", 40, 200, 160, 125442, 114263)])
def test_small_srams_match_scalesim(dataflow: str, m: int, n: int, k: int, total: int, stalls: int) -> None:
    # SCALE-Sim v3.0.0, GEMM layers on a 16x16 array with 8/8/1 KiB SRAMs at USER 10 words/cycle: the ofmap
    # SRAM drains during the layer and the read windows move within folds
    config = ScaleConfig("t", 16, 16, 8, 8, 1, dataflow, (10, 10, 10))
    result = simulate_layer(Layer("fc", m, k, 1, k, 1, n, 1), config)
    assert (result.total_cycles, result.stall_cycles) == (total, stalls)


def test_less_bandwidth_never_fewer_cycles() -> None:
    layer = Layer("conv", 12, 12, 3, 3, 16, 24, 1)
    cycles = [simulate_layer(layer, _config(8, 8, "ws", bw, kb=4)).total_cycles
              for bw in (None, (64, 64, 64), (16, 16, 16), (4, 4, 4))]
    assert cycles == sorted(cycles) and cycles[-1] > cycles[0]


def test_reports_have_scalesims_columns(tmp_path: Path) -> None:
    config = _config(4, 4, "os")
    texts = report_texts([simulate_layer(Layer("g", 8, 8, 1, 8, 1, 8, 1), config)])
    assert texts["COMPUTE_REPORT.csv"].splitlines()[0] == (
        "LayerID, Total Cycles (incl. prefetch), Total Cycles, Stall Cycles, Overall Util %, Mapping Efficiency %, "
        "Compute Util %,")
    assert texts["DETAILED_ACCESS_REPORT.csv"].splitlines()[0].startswith(
        "LayerID, SRAM IFMAP Start Cycle, SRAM IFMAP Stop Cycle, SRAM IFMAP Reads, SRAM Filter Start Cycle")
    assert texts["BANDWIDTH_REPORT.csv"].splitlines()[1].startswith("0, ")


def test_command_writes_the_reports(tmp_path: Path, capsys) -> None:
    assert main(["scalesim", "--config", str(EXAMPLES / "scale.cfg"), "--topology",
                 str(EXAMPLES / "test_mnk_input.csv"), "-o", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "BANDWIDTH_REPORT.csv", "COMPUTE_REPORT.csv", "DETAILED_ACCESS_REPORT.csv"]
    # SCALE-Sim v3.0.0, scale.cfg (CALC) on test_mnk_input.csv: Total Cycles 10175
    assert (tmp_path / "out" / "COMPUTE_REPORT.csv").read_text().splitlines()[1].split(", ")[2] == "10175"
    assert "Test 1" in capsys.readouterr().out


CFG = "[general]\nrun_name = x\n[architecture_presets]\nArrayHeight: 8\nArrayWidth: 8\nIfmapSramSzkB: 4\n" \
      "FilterSramSzkB: 4\nOfmapSramSzkB: 4\nDataflow : ws\nBandwidth : 10\n[run_presets]\nInterfaceBandwidth: USER\n"


@pytest.mark.parametrize("text, message", [
    (CFG.replace("ArrayWidth: 8", "ArrayWidth: eight"), "c.cfg:5: key 'ArrayWidth' = 'eight' is not a positive"),
    (CFG.replace("Dataflow : ws", "Dataflow : is"), "c.cfg:9: key 'Dataflow' = 'is' is not one of ws, os"),
    (CFG.replace("Bandwidth : 10", "Bandwidth : 0"), "c.cfg:10: key 'Bandwidth' = '0'"),
    (CFG.replace("ArrayHeight: 8\n", ""), "c.cfg:3: section [architecture_presets] has no key 'ArrayHeight'"),
    (CFG.replace("[run_presets]", "[run_presets"), "c.cfg:11: not a valid SCALE-Sim .cfg"),
    ("\x00\xff", "c.cfg:1: not a valid SCALE-Sim .cfg"),
    (CFG.replace("Bandwidth : 10\n", "Bandwidth : 10\nBandwidth : 3\n"), "c.cfg:11: not a valid SCALE-Sim .cfg"),
])
def test_bad_config_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.cfg"
    path.write_text(text)
    with pytest.raises(SimInputError) as err:
        read_config(path)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("text, message", [
    ("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,\n"
     "a, 7, 7, 3, 3, 4, 4, 1,\nb, 7, x, 3, 3, 4, 4, 1,\n", "t.csv:3: IFMAP Width = 'x' is not a positive integer"),
    ("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, Num Filter, Strides,\n"
     "a, 2, 7, 3, 3, 4, 4, 1,\n", "t.csv:2: the 3x3 filter is larger than the 2x7 ifmap"),
    ("Layer Name, M, N, K,\nfc, 4, 4,\n", "t.csv:2: expected a name and 3 numbers, got 3 fields"),
    ("name, a, b\n", "t.csv:1: header is neither"),
    ("Layer Name, M, N, K,\n", "t.csv: no layers after the header"),
])
def test_bad_topology_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(SimInputError) as err:
        read_topology(path)
    assert message in str(err.value)


def test_command_refuses_bad_input_before_writing(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "t.csv"
    bad.write_text("Layer Name, M, N, K,\nfc, 4, -4, 4,\n")
    assert main(["scalesim", "--config", str(EXAMPLES / "scale.cfg"), "--topology", str(bad),
                 "-o", str(tmp_path / "out")]) == 2
    assert "t.csv:2: N = '-4' is not a positive integer" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
