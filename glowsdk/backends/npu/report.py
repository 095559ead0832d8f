"""`glowsdk compile --target npu --report`: each layer's tiling decisions next to what the simulator measured.

Per layer of the binary: what the compiler decided (for a convolution or matrix layer, the tile
shape, the tile counts, the SRAM its buffers take, the element-wise steps fused into it, and the
DRAM bytes and cycles its cost model expected; for the others, the bytes they move), and the
simulator's cycles, DRAM bytes, array utilisation and roofline bound from one run on seeded random
inputs. The bound is the simulator's, from the workloads the binary records (isa/roofline.py), so
this table and `glowsdk simulate`'s agree row by row; the totals compare the run with the bound.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.results import SimResult

from .backend import NpuFunction
from .gemm import AddTensor, Clamp8, GemmLayer, Lut8, Rescale8


@dataclass(frozen=True)
class ReportRow:
    layer: str
    kind: str
    decision: str
    sram_bytes: int
    expected_bytes: int | None
    expected_cycles: float | None
    bound_cycles: float | None
    cycles: int
    dram_bytes: int
    utilisation: float


def _epilogue(layer: GemmLayer) -> str:
    names = {Rescale8: "rescale", Clamp8: "clamp", Lut8: "lut", AddTensor: "add"}
    steps = [names[type(op)] + ("(rescaled)" if isinstance(op, AddTensor) and op.pre else "") for op in layer.epilogue]
    return f"; fused {'+'.join(steps)}" if steps else ""


def _decision(body: Any, batch: int) -> tuple[str, int, int | None, float | None]:
    if isinstance(body, GemmLayer):
        s, t = body.shape, body.tiling
        tiles = (f"{-(-s.out_height // t.rows)}x{-(-s.out_channels // t.n)}x{-(-s.channels // t.c)} tiles")
        decision = (f"tile {t.rows}x{s.out_width} px, {t.n} out-ch, {t.c} in-ch ({tiles}){_epilogue(body)}")
        return decision, t.spad_bytes(s), t.traffic * batch, t.cycles * batch
    return type(body).__name__.replace("Layer", "").lower(), 0, None, None


def report_rows(compiled: NpuFunction, result: SimResult) -> list[ReportRow]:
    """One row per layer of the binary (its debug ranges are the compiler's layers, in order)."""
    measured = result.layer_rows()
    if len(measured) != len(compiled.layers):
        raise AssertionError(f"{len(measured)} simulated layers for {len(compiled.layers)} compiled ones")
    rows = []
    for layer, run in zip(compiled.layers, measured):
        body = layer.body
        batch = body.source.batch if isinstance(body, GemmLayer) else 1
        decision, sram, expected_bytes, expected_cycles = _decision(body, batch)
        rows.append(ReportRow(layer.name, layer.kind, decision, sram, expected_bytes, expected_cycles,
                              run.roofline_cycles, run.cycles, run.dram_read + run.dram_written, run.utilisation))
    return rows


def format_report(compiled: NpuFunction, result: SimResult) -> str:
    rows = report_rows(compiled, result)
    total = result.total_row()
    width = max(len(r.layer) for r in rows)

    def num(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f}"

    lines = [f"{'layer':{width}}  {'kind':11} {'sim cycles':>11} {'bound':>10} {'expected':>10} "
             f"{'DRAM bytes':>12} {'expected B':>12} {'util':>6} {'SRAM B':>9}  decision"]
    for r in rows:
        lines.append(f"{r.layer:{width}}  {r.kind:11} {r.cycles:>11,} {num(r.bound_cycles):>10} "
                     f"{num(r.expected_cycles):>10} {r.dram_bytes:>12,} {num(r.expected_bytes):>12} "
                     f"{r.utilisation:>6.1%} {r.sram_bytes:>9,}  {r.decision}")
    lines.append(f"total: {result.cycles:,} simulated cycles, roofline bound {total.roofline_cycles:,.0f} "
                 f"({total.ratio:.3f}x), array utilisation {total.utilisation:.1%} on '{compiled.config.name}'")
    return "\n".join(lines)
