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
from typing import TYPE_CHECKING, Any

from sim.binding import run_binary
from sim.html_report import decisions_html, format_html
from sim.results import SimResult

from ...progress import Progress
from ...table import format_table
from .epilogue import AddTensor, Clamp8, Lut8, Rescale8
from .gemm import GemmLayer
from .overlap import Beside

if TYPE_CHECKING:
    from .backend import NpuFunction


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
    steps = [names[type(op)] + ("(rescaled)" if isinstance(op, AddTensor) and op.pre else "")
             + ("+lut" if isinstance(op, AddTensor) and op.post else "") for op in layer.epilogue]
    steps += [f"global {layer.pool} pool"] if layer.pool else []
    return f"; fused {'+'.join(steps)}" if steps else ""


def _decision(body: Any, batch: int) -> tuple[str, int, int | None, float | None]:
    if isinstance(body, Beside):  # the convolution's decision; the pool beside it moves its own bytes
        decision, sram, expected_bytes, expected_cycles = _decision(body.host.body, batch)
        return f"{decision}; beside it {body.rider.name}", sram, expected_bytes, expected_cycles
    if isinstance(body, GemmLayer):
        s, t = body.shape, body.tiling
        tiles = (f"{-(-s.out_height // t.rows)}x{-(-s.out_channels // t.n)}x{-(-s.channels // t.c)} tiles")
        stacked = f"{t.images} images x " if t.images > 1 else ""
        decision = (f"tile {stacked}{t.rows}x{s.out_width} px, {t.n} out-ch, {t.c} in-ch ({tiles}){_epilogue(body)}")
        return decision, t.spad_bytes(s), t.traffic * batch, t.expected * batch
    return type(body).__name__.replace("Layer", "").lower(), 0, None, None


def report_rows(compiled: NpuFunction, result: SimResult) -> list[ReportRow]:
    """One row per layer of the binary (its debug ranges are the compiler's layers, in order)."""
    measured = result.layer_rows()
    if len(measured) != len(compiled.layers):
        raise AssertionError(f"{len(measured)} simulated layers for {len(compiled.layers)} compiled ones")
    rows = []
    for layer, run in zip(compiled.layers, measured):
        body = layer.body
        host = body.host.body if isinstance(body, Beside) else body
        batch = host.source.batch if isinstance(host, GemmLayer) else 1
        decision, sram, expected_bytes, expected_cycles = _decision(body, batch)
        rows.append(ReportRow(layer.name, layer.kind, decision, sram, expected_bytes, expected_cycles,
                              run.roofline_cycles, run.cycles, run.dram_read + run.dram_written, run.utilisation))
    return rows


LEGEND = ("ONNX node: the model node the layer implements; sim cycles: the simulated run (seeded random inputs); "
          "bound: the layer's roofline bound; expected: the tiler's cost model; util: MACs / (cycles x the "
          "array's MAC/cycle); SRAM: the scratchpad its tiles take; decision: the tiling chosen")


def format_report(compiled: NpuFunction, result: SimResult) -> str:
    """Each layer's tiling decision next to the simulated numbers, named after the model's nodes."""
    def num(value: float | None) -> str:
        return "-" if value is None else f"{value:,.0f}"

    rows = []
    for r in report_rows(compiled, result):
        node, op = result.origins.get(r.layer, ("-", ""))
        rows.append([node, op, r.layer, r.kind, f"{r.cycles:,}", num(r.bound_cycles), num(r.expected_cycles),
                     f"{r.dram_bytes:,}", num(r.expected_bytes), f"{r.utilisation:.1%}", f"{r.sram_bytes:,}",
                     r.decision])
    total = result.total_row()
    table = format_table(["ONNX node", "op", "layer", "kind", "sim cycles", "bound (cycles)", "expected (cycles)",
                          "DRAM (B)", "expected DRAM (B)", "util", "SRAM (B)", "decision"], rows, LEGEND)
    return (f"{table}\ntotal: {result.cycles:,} simulated cycles, roofline bound {total.roofline_cycles:,.0f} "
            f"({total.ratio:.3f}x), array utilisation {total.utilisation:.1%} on '{compiled.config.name}'")


def compile_report(compiled: NpuFunction, page: bool, title: str) -> str:
    """`NpuFunction.report`: the binary simulated once on seeded random inputs, layer by layer, as text
    (`format_report`) or a page called `title` with the roofline plot and the tiling decisions."""
    binary = compiled.binary
    with Progress("simulating", len(binary.instructions), "instr") as bar:
        result = run_binary(binary, compiled.config, {}, progress=bar).result
    if not page:
        return format_report(compiled, result)
    rows = [[*result.origins.get(r.layer, ("-", "")), r.layer, r.kind, f"{r.sram_bytes:,}",
             "-" if r.expected_cycles is None else f"{r.expected_cycles:,.0f}", r.decision]
            for r in report_rows(compiled, result)]
    table = decisions_html(["ONNX node", "op", "layer", "kind", "SRAM (B)", "expected (cycles)", "decision"],
                           rows, [False] * 4 + [True] * 2 + [False])
    with Progress("drawing the report", None, ""):
        return format_html(result, title, sections=[("Tiling decisions", table)])
