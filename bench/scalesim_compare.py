"""`glowsdk scalesim` against SCALE-Sim v3 itself: Total Cycles per layer and both tools' run times.

SCALE-Sim is the oracle: it is installed from PyPI into its own virtualenv (it needs numpy<2):

    python -m venv /work/scalesim-venv && /work/scalesim-venv/bin/pip install scalesim 'numpy<2'
    nice -n 10 python bench/scalesim_compare.py [--venv /work/scalesim-venv] [--quick] [--json FILE]

Cases: SCALE-Sim's example configurations (scale.cfg, google.cfg, eyeriss.cfg in
bench/scalesim_examples, copied from its repository) on its example topologies (test, the GEMM
test, AlexNet: SCALE-Sim takes minutes on it), then a grid of 16x16 and 32x32 arrays, ws and os,
CALC (unbounded) and USER bandwidth of 64, 20 and 10 words/cycle, on conv and GEMM topologies,
and 8/8/1 KiB SRAMs at 10 words/cycle. Every case writes one complete v3 .cfg that both tools
read. Each tool runs as its own process; the table gives each process's wall time (SCALE-Sim's
includes its import, ~0.5 s; glowsdk's its start-up, which loads the scalesim command's modules
only, about as long) and the simulation alone as each tool times it. Run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import configparser
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE / "scalesim_examples"


def cases(quick: bool) -> list[tuple[str, str, str, dict]]:
    """(label, cfg file, topology file, overrides) for every comparison."""
    found = [("scale.cfg test", "scale.cfg", "test.csv", {}),
             ("scale.cfg mnk", "scale.cfg", "test_mnk_input.csv", {}),
             ("google.cfg mnk", "google.cfg", "test_mnk_input.csv", {}),
             ("eyeriss.cfg test", "eyeriss.cfg", "test.csv", {}),
             ("scale.cfg test USER 10", "scale.cfg", "test.csv", {"bw": "10"}),
             ("scale.cfg alexnet", "scale.cfg", "alexnet.csv", {})]
    arrays = (16, 32)
    bandwidths = ("CALC", "64", "20", "10") if not quick else ("CALC", "10")
    for size in arrays:
        for dataflow in ("ws", "os"):
            for bw in bandwidths:
                for topo in ("small.csv", "gemm.csv"):
                    found.append((f"{size}x{size} {dataflow} bw {bw} {topo}", "scale.cfg", topo,
                                  {"rows": size, "df": dataflow, "bw": bw}))
    for dataflow in ("ws", "os"):  # small SRAMs: the ofmap SRAM drains within a layer, read windows move within folds
        found.append((f"16x16 {dataflow} 8/8/1 KiB bw 10 gemm.csv", "scale.cfg", "gemm.csv",
                      {"rows": 16, "df": dataflow, "bw": "10", "kb": (8, 8, 1)}))
    return [f for f in found if "alexnet" not in f[0]][:6] if quick else found


def write_cfg(source: Path, overrides: dict, target: Path) -> None:
    """A complete v3 .cfg: the source's keys, the case's overrides, and the sections v3 insists on."""
    cp = configparser.ConfigParser()
    cp.optionxform = str
    cp.read(source)
    arch = cp["architecture_presets"]
    if "rows" in overrides:
        arch["ArrayHeight"] = arch["ArrayWidth"] = str(overrides["rows"])
    if "kb" in overrides:
        arch["IfmapSramSzkB"], arch["FilterSramSzkB"], arch["OfmapSramSzkB"] = (str(k) for k in overrides["kb"])
    if "df" in overrides:
        arch["Dataflow"] = overrides["df"]
    bw = overrides.get("bw")
    if bw == "CALC":
        cp["run_presets"]["InterfaceBandwidth"] = "CALC"
    elif bw:
        cp["run_presets"]["InterfaceBandwidth"] = "USER"
        arch["Bandwidth"] = bw
    words = arch.get("Bandwidth", "10").split(",")[0].strip()
    layout = cp["layout"] if cp.has_section("layout") else None
    if layout is None or bw not in (None, "CALC"):
        cp["layout"] = {"IfmapCustomLayout": "False", "IfmapSRAMBankBandwidth": words, "IfmapSRAMBankNum": "1",
                        "IfmapSRAMBankPort": "2", "FilterCustomLayout": "False", "FilterSRAMBankBandwidth": words,
                        "FilterSRAMBankNum": "1", "FilterSRAMBankPort": "2"}
    if not cp.has_section("sparsity"):
        cp["sparsity"] = {"SparsitySupport": "false"}
    cp["run_presets"].setdefault("UseRamulatorTrace", "False")
    for key in ("ReadRequestBuffer", "WriteRequestBuffer"):
        arch.setdefault(key, "512")
    with open(target, "w") as f:
        cp.write(f)


def total_cycles(report: Path) -> list[int]:
    with open(report) as f:
        rows = list(csv.reader(f, skipinitialspace=True))
    return [int(float(r[2])) for r in rows[1:] if r and r[0]]


def run_case(venv: Path, label: str, cfg: str, topo: str, overrides: dict, work: Path) -> dict:
    case_dir = work / label.replace(" ", "_").replace("/", "_")
    case_dir.mkdir(parents=True)
    cfg_path = case_dir / "case.cfg"
    write_cfg(EXAMPLES / cfg, overrides, cfg_path)
    form = "gemm" if "mnk" in topo or "gemm" in topo else "conv"
    began = time.perf_counter()
    done = subprocess.run([str(venv / "bin" / "python"), str(HERE / "scalesim_oracle.py"), str(cfg_path),
                           str(EXAMPLES / topo), form, str(case_dir / "oracle")], check=True, capture_output=True,
                          text=True)
    oracle_seconds = time.perf_counter() - began
    oracle_sim = float(done.stdout.split("seconds")[-1])
    run_name = configparser.ConfigParser()
    run_name.read(cfg_path)
    oracle = total_cycles(case_dir / "oracle" / run_name["general"]["run_name"] / "COMPUTE_REPORT.csv")
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "glowsdk.cli.main", "scalesim", "--config", str(cfg_path), "--topology",
                    str(EXAMPLES / topo), "-o", str(case_dir / "glowsdk"), "--json", str(case_dir / "ours.json")],
                   check=True, capture_output=True)
    ours_seconds = time.perf_counter() - began
    ours_sim = json.loads((case_dir / "ours.json").read_text())["seconds"]
    ours = total_cycles(case_dir / "glowsdk" / "COMPUTE_REPORT.csv")
    errors = [100.0 * (o - s) / s for o, s in zip(ours, oracle)]
    return {"case": label, "scalesim_cycles": oracle, "glowsdk_cycles": ours, "error_percent": errors,
            "scalesim_seconds": oracle_seconds, "glowsdk_seconds": ours_seconds,
            "scalesim_simulation_seconds": oracle_sim, "glowsdk_simulation_seconds": ours_sim}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", default="/work/scalesim-venv", help="SCALE-Sim's virtualenv")
    parser.add_argument("--quick", action="store_true", help="a few cases only")
    parser.add_argument("--only", metavar="TEXT", help="only the cases whose label contains TEXT")
    parser.add_argument("--json", metavar="FILE", help="write every case's numbers as JSON")
    parser.add_argument("--markdown", metavar="FILE", help="write the tables as Markdown (vendor_guide/scalesim.md)")
    parser.add_argument("--from-json", metavar="FILE", help="render --markdown from an earlier --json, running nothing")
    args = parser.parse_args()
    if args.from_json:
        Path(args.markdown or "/dev/stdout").write_text(markdown(json.loads(Path(args.from_json).read_text())))
        return 0
    venv = Path(args.venv)
    if not (venv / "bin" / "python").exists():
        print(f"scalesim_compare: no virtualenv at {venv} (see this script's docstring)", file=sys.stderr)
        return 2
    todo = [case for case in cases(args.quick) if not args.only or args.only in case[0]]
    results = []
    print(f"{'case':<34} {'layers':>6} {'max |err| %':>11} {'SCALE-Sim s':>11} {'glowsdk s':>9} {'speed-up':>8}"
          f"   {'(simulation only:':>17} {'SCALE-Sim s':>11} {'glowsdk s':>9} {'speed-up':>8})")
    with tempfile.TemporaryDirectory() as tmp:
        for n, (label, cfg, topo, overrides) in enumerate(todo, 1):
            print(f"[{n}/{len(todo)}] {label}", file=sys.stderr, flush=True)
            r = run_case(venv, label, cfg, topo, overrides, Path(tmp))
            results.append(r)
            if args.json:  # after every case, so that an interrupted run keeps what it measured
                Path(args.json).write_text(json.dumps(results, indent=1))
            worst = max(abs(e) for e in r["error_percent"])
            print(f"{label:<34} {len(r['error_percent']):>6} {worst:>11.3f} {r['scalesim_seconds']:>11.2f} "
                  f"{r['glowsdk_seconds']:>9.2f} {r['scalesim_seconds'] / r['glowsdk_seconds']:>7.1f}x   {'':>17} "
                  f"{r['scalesim_simulation_seconds']:>11.2f} {r['glowsdk_simulation_seconds']:>9.2f} "
                  f"{r['scalesim_simulation_seconds'] / r['glowsdk_simulation_seconds']:>7.1f}x", flush=True)
    print("\nper layer: case, layer, SCALE-Sim Total Cycles, glowsdk Total Cycles, error %")
    for r in results:
        for i, (s, o, e) in enumerate(zip(r["scalesim_cycles"], r["glowsdk_cycles"], r["error_percent"])):
            print(f"  {r['case']:<34} {i:>2} {s:>10,} {o:>10,} {e:>8.3f}")
    slow, fast = sum(r["scalesim_seconds"] for r in results), sum(r["glowsdk_seconds"] for r in results)
    slow_sim = sum(r["scalesim_simulation_seconds"] for r in results)
    fast_sim = sum(r["glowsdk_simulation_seconds"] for r in results)
    print(f"\n{len(results)} cases, {sum(len(r['error_percent']) for r in results)} layers; worst |error| "
          f"{max(abs(e) for r in results for e in r['error_percent']):.3f}%; processes: SCALE-Sim {slow:.1f} s, "
          f"glowsdk {fast:.1f} s ({slow / fast:.1f}x); simulation only: SCALE-Sim {slow_sim:.1f} s, glowsdk "
          f"{fast_sim:.1f} s ({slow_sim / fast_sim:.1f}x)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    if args.markdown:
        Path(args.markdown).write_text(markdown(results))
    return 0


def markdown(results: list[dict]) -> str:
    """Per case: layers, worst error, both tools' times; then every layer's Total Cycles."""
    lines = ["| case | layers | worst abs. error | SCALE-Sim (s) | glowsdk (s) | speed-up | SCALE-Sim simulation (s) | "
             "glowsdk simulation (s) | speed-up |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['case']} | {len(r['error_percent'])} | {max(abs(e) for e in r['error_percent']):.3f} % | "
                     f"{r['scalesim_seconds']:.2f} | {r['glowsdk_seconds']:.2f} | "
                     f"{r['scalesim_seconds'] / r['glowsdk_seconds']:.1f}x | {r['scalesim_simulation_seconds']:.2f} | "
                     f"{r['glowsdk_simulation_seconds']:.2f} | "
                     f"{r['scalesim_simulation_seconds'] / r['glowsdk_simulation_seconds']:.0f}x |")
    slow, fast = sum(r["scalesim_seconds"] for r in results), sum(r["glowsdk_seconds"] for r in results)
    slow_sim = sum(r["scalesim_simulation_seconds"] for r in results)
    fast_sim = sum(r["glowsdk_simulation_seconds"] for r in results)
    lines.append(f"| **all {len(results)} cases** | {sum(len(r['error_percent']) for r in results)} | "
                 f"{max(abs(e) for r in results for e in r['error_percent']):.3f} % | {slow:.1f} | {fast:.1f} | "
                 f"{slow / fast:.1f}x | {slow_sim:.1f} | {fast_sim:.1f} | {slow_sim / fast_sim:.0f}x |")
    lines += ["", "| case | layer | SCALE-Sim Total Cycles | glowsdk Total Cycles | error |", "|---|---|---|---|---|"]
    for r in results:
        for i, (s, o, e) in enumerate(zip(r["scalesim_cycles"], r["glowsdk_cycles"], r["error_percent"])):
            lines.append(f"| {r['case']} | {i} | {s:,} | {o:,} | {e:.3f} % |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
