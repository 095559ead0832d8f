"""`glowsdk sweep`: a 2x2 grid over the digits CNN (a few milliseconds per point) on each executor, resume
after a kill, and grid files that are refused in one line before anything is written."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from glowsdk.cli.main import main
from glowsdk.sweep.pareto import front
from glowsdk.sweep.point import METRICS
from glowsdk.zoo.digits import digits_model_path

GRID = 'preset = "edge"\n[grid]\narray_rows = [8, 16]\ndram_bytes_per_cycle = [8, 16]\n'
MODEL = str(digits_model_path())


def _sweep(tmp_path: Path, out: str, *extra: str, grid: str = GRID) -> int:
    path = tmp_path / "grid.toml"
    path.write_text(grid)
    return main(["sweep", "--models", MODEL, "--batch", "1", "--calibration-random", "1", "--grid", str(path),
                 "-o", str(tmp_path / out), *extra])


def _rows(folder: Path) -> list[dict[str, str]]:
    with open(folder / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def _measured(folder: Path) -> list[tuple]:
    """What a point measures, in a fixed order (executors finish points in any order; wall times differ)."""
    keys = ("model", "point", "array_rows", "dram_bytes_per_cycle", "status", "error", *METRICS)
    return sorted(tuple(row[k] for k in keys) for row in _rows(folder))


def test_local_sweep_runs_the_cross_product(tmp_path, capsys):
    assert _sweep(tmp_path, "one", "--workers", "1") == 0
    rows = _rows(tmp_path / "one")
    assert sorted((r["array_rows"], r["dram_bytes_per_cycle"]) for r in rows) == \
        [("16", "16"), ("16", "8"), ("8", "16"), ("8", "8")]
    assert all(r["status"] == "ok" and int(r["cycles"]) > 0 and float(r["energy_uj"]) > 0 for r in rows)
    # a bigger array is bigger, a wider DRAM port is no slower
    by = {(r["array_rows"], r["dram_bytes_per_cycle"]): r for r in rows}
    assert float(by["16", "8"]["area_mm2"]) > float(by["8", "8"]["area_mm2"])
    assert int(by["8", "16"]["cycles"]) <= int(by["8", "8"]["cycles"])
    out = capsys.readouterr().out
    assert "Pareto front" in out and "4 points run" in out
    page = (tmp_path / "one" / "report.html").read_text()
    assert "<h2>Pareto fronts</h2>" in page and "<h2>Sensitivity</h2>" in page and page.count("<svg") == 3
    assert page.count("<tr>") >= 1 + 4 and 'class="sortable"' in page  # every point, in a table to sort
    # processes give the same figures as one process
    assert _sweep(tmp_path, "two", "--workers", "2") == 0
    assert _measured(tmp_path / "two") == _measured(tmp_path / "one")


def test_ray_sweep_matches_local(tmp_path):
    pytest.importorskip("ray", reason="ray is the optional 'distributed' extra, not in .[test]: "
                                      "pip install -e '.[distributed]' to run this test")
    assert _sweep(tmp_path, "local", "--workers", "1") == 0
    assert _sweep(tmp_path, "ray", "--executor", "ray", "--workers", "2") == 0
    assert _measured(tmp_path / "ray") == _measured(tmp_path / "local")


def test_resume_runs_only_what_a_killed_sweep_left(tmp_path, capsys):
    assert _sweep(tmp_path, "out", "--workers", "1") == 0
    results = tmp_path / "out" / "results.csv"
    lines = results.read_text().splitlines(keepends=True)
    kept = lines[:3]  # the header and two finished points; then a row the kill cut in half
    results.write_text("".join(kept) + lines[3][:20])
    capsys.readouterr()
    assert _sweep(tmp_path, "out", "--workers", "1") == 2  # a folder with results needs --resume
    assert "--resume" in capsys.readouterr().err
    assert _sweep(tmp_path, "out", "--workers", "1", "--resume") == 0
    assert "2 points run" in capsys.readouterr().out
    again = results.read_text().splitlines(keepends=True)
    assert again[:3] == kept  # the finished rows (their wall times too) are untouched: not recomputed
    assert len(again) == 5 and len({tuple(r.values())[:2] for r in _rows(tmp_path / "out")}) == 4
    # a resumed sweep must be the same sweep
    assert _sweep(tmp_path, "out", "--resume", grid=GRID.replace("[8, 16]\n", "[8, 32]\n")) == 2
    assert "records another sweep" in capsys.readouterr().err


def test_a_failed_point_records_its_error_and_the_sweep_goes_on(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Sin", ["x"], ["y"])], "sine",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "sine.onnx")
    (tmp_path / "grid.toml").write_text(GRID)
    assert main(["sweep", "--models", f"{tmp_path / 'sine.onnx'},{MODEL}", "--batch", "1", "--calibration-random",
                 "1", "--grid", str(tmp_path / "grid.toml"), "-o", str(tmp_path / "out"), "--workers", "1"]) == 0
    rows = _rows(tmp_path / "out")
    sine = [r for r in rows if r["model"].endswith("sine.onnx")]
    assert len(sine) == 4 and all(r["status"] == "error" and "Sin" in r["error"] and r["cycles"] == "" for r in sine)
    assert sum(r["status"] == "ok" for r in rows) == 4


@pytest.mark.parametrize("grid, message", [
    ('[grid]\narray_rows = [16, 0]\n', "key 'array_rows' = 0 is out of range"),
    ('[grid]\narray_colz = [16]\n', "unknown key 'grid.array_colz'"),
    ('[grid]\narray_rows = 16\n', "key 'grid.array_rows': expected a non-empty list"),
    ('preset = "huge"\n[grid]\narray_rows = [16]\n', "key 'preset' = 'huge'"),
    ('[grid\narray_rows = [16]\n', "not valid TOML"),
    ('array_rows = 8\n', "key 'grid': expected a [grid] table"),
    ('[grid]\nscratchpad_bytes = ["256 KiB", 262144]\n', "are the same configuration"),
])
def test_bad_grid_is_one_line_and_writes_nothing(tmp_path, capsys, grid, message):
    assert _sweep(tmp_path, "out", grid=grid) == 2
    err = capsys.readouterr().err
    assert message in err and "grid.toml" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_pareto_front_drops_dominated_points():
    rows = [{"point": p, "latency_s": l, "energy_uj": e, "area_mm2": a}
            for p, l, e, a in [("a", 1, 1, 2), ("b", 2, 1, 1), ("c", 2, 2, 2), ("d", 1, 1, 2)]]
    assert [r["point"] for r in front(rows)] == ["a", "d", "b"]
