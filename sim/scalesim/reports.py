"""SCALE-Sim v3's report files, column for column, and a readable table of the same numbers."""
from __future__ import annotations

from glowsdk.table import format_table as render

from .model import LayerResult

COMPUTE_HEADER = ("LayerID", "Total Cycles (incl. prefetch)", "Total Cycles", "Stall Cycles", "Overall Util %",
                  "Mapping Efficiency %", "Compute Util %")
BANDWIDTH_HEADER = ("LayerID", "Avg IFMAP SRAM BW", "Avg FILTER SRAM BW", "Avg OFMAP SRAM BW", "Avg IFMAP DRAM BW",
                    "Avg FILTER DRAM BW", "Avg OFMAP DRAM BW")
DETAILED_HEADER = ("LayerID", *(f"{level} {operand} {what}" for level in ("SRAM", "DRAM")
                                for operand, verb in (("IFMAP", "Reads"), ("Filter", "Reads"), ("OFMAP", "Writes"))
                                for what in ("Start Cycle", "Stop Cycle", verb)))


def _line(cells: list) -> str:
    """v3's CSV dialect: ', ' between cells and a trailing comma."""
    return ", ".join(str(c) for c in cells) + ",\n"


def compute_row(r: LayerResult) -> list:
    return [r.total_with_prefetch, r.total_cycles, r.stall_cycles, r.overall_util, r.mapping_efficiency,
            r.compute_util]


def bandwidth_row(r: LayerResult) -> list:
    sram = [r.sram_reads[0] / r.total_cycles, r.sram_reads[1] / r.total_cycles, r.sram_writes / r.total_cycles]
    return sram + [words / (stop - start + 1) if stop >= start else 0.0 for start, stop, words in r.dram]


def detailed_row(r: LayerResult) -> list:
    counts = (*r.sram_reads, r.sram_writes)
    cells = []
    for (start, stop), count in zip(r.sram_cycles, counts):
        cells += [float(start), float(stop), count]
    for start, stop, words in r.dram:
        cells += [float(start), float(stop), words]
    return cells


REPORTS = {"COMPUTE_REPORT.csv": (COMPUTE_HEADER, compute_row),
           "BANDWIDTH_REPORT.csv": (BANDWIDTH_HEADER, bandwidth_row),
           "DETAILED_ACCESS_REPORT.csv": (DETAILED_HEADER, detailed_row)}


def report_texts(results: list[LayerResult]) -> dict[str, str]:
    """File name -> contents of each report."""
    return {name: _line(list(header)) + "".join(_line([i, *row(r)]) for i, r in enumerate(results))
            for name, (header, row) in REPORTS.items()}


def format_table(results: list[LayerResult]) -> str:
    """The per-layer summary a person reads: cycles, stalls, utilisation and DRAM words."""
    rows = [[r.name, f"{r.total_cycles:,}", f"{r.stall_cycles:,}", f"{r.overall_util:.2f}",
             f"{r.mapping_efficiency:.2f}", f"{r.dram[0][2]:,}", f"{r.dram[1][2]:,}", f"{r.dram[2][2]:,}"]
            for r in results]
    rows.append(["(total)", f"{sum(r.total_cycles for r in results):,}", f"{sum(r.stall_cycles for r in results):,}",
                 "", "", *(f"{sum(r.dram[k][2] for r in results):,}" for k in range(3))])
    return render(["layer", "total cycles", "stall cycles", "util %", "mapping eff %", "DRAM ifmap (words)",
                   "DRAM filter (words)", "DRAM ofmap (words)"], rows)
