"""`glowsdk disasm`: an `.npub` file as commented assembly text, or as JSON.

The text is assembly the assembler reads back: everything but the instructions is a
`#` comment (header, section table, memory plan, tensors, bindings, debug ranges,
metadata), and the instructions follow one per line, grouped under the debug table's
layers, each with its index in a trailing comment. `isa.asm.assemble(format_npub(b))`
gives back `b.instructions`.
"""
from __future__ import annotations

import json

from .asm import format_instr
from .container import NpuBinary
from .encoding import encode
from .origins import origins_from_metadata
from .sections import DebugRange, TensorInfo

_INDEX_COLUMN = 88
"""Instruction lines are padded to this column (or the longest line, if shorter) before their index."""


def _hex_range(start: int, end: int) -> str:
    return f"0x{start:08x}..0x{end:08x}"


def _quantization(t: TensorInfo) -> str:
    return f"scale {t.scale:.9g} offset {t.offset}" if t.scale else ""


def _columns(rows: list[list[str]], indent: str = "#   ") -> list[str]:
    """Rows as left-aligned columns (numbers right-aligned), each line a comment."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [c.rjust(w) if c.isdigit() else c.ljust(w) for c, w in zip(row, widths)]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def _type(t: TensorInfo) -> str:
    return f"{t.elem}[{'x'.join(map(str, t.shape))}]"


def format_npub(binary: NpuBinary, name: str) -> str:
    """The whole file as text: comments, then the instructions grouped by layer."""
    version = ".".join(map(str, binary.format_version))
    isa = ".".join(map(str, binary.isa_version))
    lines = [f"# NPU binary {name}: format {version}, ISA {isa}, {binary.file_size} bytes",
             f"# configuration {binary.config_hash.hex()}", "#", "# sections"]
    lines += _columns([["kind", "offset", "size", "align", "crc32"]] +
                      [[s.kind.label, str(s.offset), str(s.size), str(s.alignment), f"0x{s.crc32:08x}"]
                       for s in binary.sections])
    lines += ["#", f"# memory plan (DRAM 0x0..0x{binary.plan.dram_size:x})"]
    lines += _columns([["region", "DRAM", "bytes"]] + [[kind.label, _hex_range(r.base, r.end), str(r.size)]
                                                       for kind, r in binary.plan.regions().items()])
    lines += ["#", f"# tensors ({len(binary.tensors)})"]
    if binary.tensors:
        lines += _columns([["#", "name", "type", "DRAM", "bytes", "region", "quantization"]] + [
            [str(i), t.name, _type(t), _hex_range(t.dram_address, t.dram_address + t.size_bytes),
             str(t.size_bytes), _region(binary, t), _quantization(t)] for i, t in enumerate(binary.tensors)])
    lines += ["#", "# bindings"]
    bound = [["input", n, "->", f"tensor {i} ({binary.tensors[i].name})"] for n, i in binary.bindings.inputs.items()]
    bound += [["output", n, "->", f"tensor {i} ({binary.tensors[i].name})"]
              for n, i in binary.bindings.outputs.items()]
    lines += _columns(bound) if bound else ["#   none"]
    lines += ["#", f"# debug ranges ({len(binary.debug)})"]
    origins = origins_from_metadata(binary.metadata)
    if binary.debug:
        lines += _columns([[f"{r.start}..{r.stop}", r.name, r.kind, _onnx(origins, r.name)] for r in binary.debug])
    lines += ["#", f"# metadata {json.dumps(binary.metadata, sort_keys=True)}", "#",
              f"# instructions ({len(binary.instructions)})"]
    texts = [format_instr(instr) for instr in binary.instructions]
    column = min(max(map(len, texts), default=0), _INDEX_COLUMN)
    width = len(str(max(len(texts) - 1, 0)))
    layers = _layer_per_instruction(binary)
    layer = None
    for index, text in enumerate(texts):
        current = layers[index]
        if index == 0 or current is not layer:
            layer = current
            title = f"{layer.name} ({layer.kind})" if layer and layer.kind else layer.name if layer else "(no layer)"
            if layer and layer.name in origins:
                title += " from ONNX {1} '{0}'".format(*origins[layer.name])
            span = f": instructions {layer.start}..{layer.stop}" if layer else ""
            lines += ["", f"# == {title}{span}"]
        lines.append(f"{text.ljust(column)}  # {index:>{width}}")
    return "\n".join(lines)


def _onnx(origins: dict[str, tuple[str, str]], layer: str) -> str:
    """The debug-range listing's ONNX column: the model node a layer implements, when the binary says."""
    return f"<- ONNX {origins[layer][1]} '{origins[layer][0]}'" if layer in origins else ""


def _layer_per_instruction(binary: NpuBinary) -> list[DebugRange | None]:
    layers: list[DebugRange | None] = [None] * len(binary.instructions)
    for r in binary.debug:
        layers[r.start:r.stop] = [r] * (r.stop - r.start)
    return layers


def _region(binary: NpuBinary, t: TensorInfo) -> str:
    kind = binary.plan.region_of(t.dram_address, t.size_bytes)
    return kind.label if kind else "-"


def npub_json(binary: NpuBinary, name: str) -> dict:
    """The whole file as a JSON-ready dict, for machines."""
    return {
        "file": name,
        "file_size": binary.file_size,
        "format_version": list(binary.format_version),
        "isa_version": list(binary.isa_version),
        "config_hash": binary.config_hash.hex(),
        "sections": [{"kind": s.kind.label, "offset": s.offset, "size": s.size, "alignment": s.alignment,
                      "crc32": s.crc32} for s in binary.sections],
        "memory_plan": {kind.label: {"base": r.base, "size": r.size} for kind, r in binary.plan.regions().items()},
        "tensors": [{"index": i, "name": t.name, "elem": t.elem, "shape": list(t.shape),
                     "dram_address": t.dram_address, "size_bytes": t.size_bytes, "region": _region(binary, t),
                     "scale": t.scale, "offset": t.offset} for i, t in enumerate(binary.tensors)],
        "bindings": {"inputs": binary.bindings.inputs, "outputs": binary.bindings.outputs},
        "debug": [{"start": r.start, "stop": r.stop, "name": r.name, "kind": r.kind} for r in binary.debug],
        "metadata": binary.metadata,
        "instructions": [{"index": i, "text": format_instr(instr), "hex": encode(instr).hex(),
                          "layer": layer.name if layer else None}
                         for i, (instr, layer) in enumerate(zip(binary.instructions, _layer_per_instruction(binary)))],
    }
