"""SCALE-Sim v3's input files: the `.cfg` architecture and the topology CSV (conv or GEMM form).

Every problem is a one-line `SimInputError` naming the file and, where there is one, the line.
The keys read are the ones SCALE-Sim v3 reads; keys it ignores ([general] aside from run_name,
offsets, request-buffer sizes, sparsity off) are ignored here too. In USER bandwidth mode v3
feeds the ifmap and filter SRAMs at the [layout] section's `IfmapSRAMBankBandwidth` and
`FilterSRAMBankBandwidth` and the ofmap SRAM at `Bandwidth`; without a [layout] section all three
use `Bandwidth` (v3 itself requires the section).
"""
from __future__ import annotations

import configparser
import re
from dataclasses import dataclass
from pathlib import Path

from glowsdk.files import read_text_file

from ..errors import SimInputError

DATAFLOWS = ("ws", "os")


@dataclass(frozen=True)
class ScaleConfig:
    """The architecture a SCALE-Sim run models: array, SRAM sizes, dataflow and DRAM words per cycle."""

    run_name: str
    rows: int
    cols: int
    ifmap_kb: int
    filter_kb: int
    ofmap_kb: int
    dataflow: str
    bandwidth: tuple[int, int, int] | None
    """(ifmap, filter, ofmap) words per cycle in USER mode; None in CALC mode (no stalls, bandwidth reported)."""


@dataclass(frozen=True)
class Layer:
    """One topology row as a convolution (a GEMM M x K times K x N is a 1 x K filter over an M x K ifmap)."""

    name: str
    ifmap_h: int
    ifmap_w: int
    filter_h: int
    filter_w: int
    channels: int
    filters: int
    stride: int

    @property
    def ofmap_h(self) -> int:
        return -(-(self.ifmap_h - self.filter_h + self.stride) // self.stride)

    @property
    def ofmap_w(self) -> int:
        return -(-(self.ifmap_w - self.filter_w + self.stride) // self.stride)

    @property
    def pixels(self) -> int:
        """Output pixels per filter (GEMM M)."""
        return self.ofmap_h * self.ofmap_w

    @property
    def window(self) -> int:
        """Reduction length (GEMM K)."""
        return self.filter_h * self.filter_w * self.channels

    @property
    def macs(self) -> int:
        return self.pixels * self.window * self.filters


def _line_of(text: str, section: str, key: str | None) -> int | None:
    """The 1-based line of `key` in `[section]` (or of the section header), for error messages."""
    current = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        header = re.match(r"^\[(.+)\]$", stripped)
        if header:
            current = header.group(1).strip()
            if key is None and current == section:
                return number
        elif current == section and key is not None and re.split(r"[:=]", stripped, 1)[0].strip().lower() == key.lower():
            return number
    return None


def read_config(path: str | Path) -> ScaleConfig:
    """Parse a SCALE-Sim v3 `.cfg`."""
    where = str(path)
    text = read_text_file(path, "SCALE-Sim .cfg file", "a SCALE-Sim .cfg is INI text", SimInputError)
    parser = configparser.ConfigParser()
    try:
        parser.read_string(text, source=where)
    except configparser.MissingSectionHeaderError as exc:
        raise SimInputError(f"{where}:{exc.lineno}: not a valid SCALE-Sim .cfg (a key before any [section])") \
            from None
    except configparser.ParsingError as exc:
        line, content = exc.errors[0]
        raise SimInputError(f"{where}:{line}: not a valid SCALE-Sim .cfg (cannot parse {content.strip()[:80]})") \
            from None
    except configparser.Error as exc:  # a duplicate section or key
        line = getattr(exc, "lineno", None)
        message = " ".join(str(exc).split("]: ")[-1].split())[:120]
        raise SimInputError(f"{where}{f':{line}' if line else ''}: not a valid SCALE-Sim .cfg ({message})") from None

    def get(section: str, key: str) -> str:
        if not parser.has_section(section):
            raise SimInputError(f"{where}: missing section [{section}]")
        if not parser.has_option(section, key):
            line = _line_of(text, section, None)
            raise SimInputError(f"{where}:{line}: section [{section}] has no key '{key}'")
        return parser.get(section, key).strip()

    def positive(section: str, key: str) -> int:
        value = get(section, key)
        if not re.fullmatch(r"[0-9]{1,9}", value) or int(value) == 0:
            raise SimInputError(f"{where}:{_line_of(text, section, key)}: key '{key}' = {value!r} "
                                f"is not a positive integer")
        return int(value)

    arch = "architecture_presets"
    rows, cols = positive(arch, "ArrayHeight"), positive(arch, "ArrayWidth")
    sizes = [positive(arch, key) for key in ("IfmapSramSzkB", "FilterSramSzkB", "OfmapSramSzkB")]
    dataflow = get(arch, "Dataflow")
    if dataflow not in DATAFLOWS:
        raise SimInputError(f"{where}:{_line_of(text, arch, 'Dataflow')}: key 'Dataflow' = {dataflow!r} is not "
                            f"one of {', '.join(DATAFLOWS)} (glowsdk's array is weight- or output-stationary)")
    mode = get("run_presets", "InterfaceBandwidth")
    if mode not in ("USER", "CALC"):
        raise SimInputError(f"{where}:{_line_of(text, 'run_presets', 'InterfaceBandwidth')}: key "
                            f"'InterfaceBandwidth' = {mode!r} is not USER or CALC")
    bandwidth = None
    if mode == "USER":
        ofmap = _first_number(get(arch, "Bandwidth"), where, _line_of(text, arch, "Bandwidth"))
        ifmap = filt = ofmap
        if parser.has_section("layout"):
            ifmap = positive("layout", "IfmapSRAMBankBandwidth")
            filt = positive("layout", "FilterSRAMBankBandwidth")
        bandwidth = (ifmap, filt, ofmap)
    return ScaleConfig(get("general", "run_name") if parser.has_option("general", "run_name") else Path(where).stem,
                       rows, cols, *sizes, dataflow, bandwidth)


def _first_number(value: str, where: str, line: int | None) -> int:
    """`Bandwidth` is a comma-separated list in v3; the first entry is the one it uses."""
    first = value.split(",")[0].strip()
    if not re.fullmatch(r"[0-9]{1,9}", first) or int(first) == 0:
        raise SimInputError(f"{where}:{line}: key 'Bandwidth' = {value!r} is not a positive integer")
    return int(first)


CONV_FIELDS = ("IFMAP Height", "IFMAP Width", "Filter Height", "Filter Width", "Channels", "Num Filter", "Strides")
GEMM_FIELDS = ("M", "N", "K")


def read_topology(path: str | Path) -> list[Layer]:
    """Parse a topology CSV; its header says which form: conv (7 numbers a row) or GEMM (M, N, K)."""
    where = str(path)
    lines = read_text_file(path, "topology CSV", "a topology is CSV", SimInputError).splitlines()
    if not lines or not lines[0].strip():
        raise SimInputError(f"{where}:1: empty file (expected a header row)")
    header = [h.strip() for h in lines[0].split(",") if h.strip()]
    gemm = [h.upper() for h in header[1:4]] == list(GEMM_FIELDS)
    if not gemm and [h.lower() for h in header[1:8]] != [f.lower() for f in CONV_FIELDS]:
        raise SimInputError(f"{where}:1: header is neither the conv form (Layer name, {', '.join(CONV_FIELDS)}) "
                            f"nor the GEMM form (Layer Name, M, N, K)")
    layers = []
    for number, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        while cells and cells[-1] == "":
            cells.pop()
        wanted = 3 if gemm else 7
        if len(cells) < wanted + 1:
            raise SimInputError(f"{where}:{number}: expected a name and {wanted} numbers, got {len(cells)} fields")
        numbers = []
        for field, cell in zip(GEMM_FIELDS if gemm else CONV_FIELDS, cells[1:wanted + 1]):
            if not re.fullmatch(r"[0-9]{1,7}", cell) or int(cell) == 0:
                raise SimInputError(f"{where}:{number}: {field} = {cell!r} is not a positive integer")
            numbers.append(int(cell))
        if gemm:
            m, n, k = numbers
            layer = Layer(cells[0], m, k, 1, k, 1, n, 1)
        else:
            layer = Layer(cells[0], *numbers)
            if layer.filter_h > layer.ifmap_h or layer.filter_w > layer.ifmap_w:
                raise SimInputError(f"{where}:{number}: the {layer.filter_h}x{layer.filter_w} filter is larger "
                                    f"than the {layer.ifmap_h}x{layer.ifmap_w} ifmap")
        layers.append(layer)
    if not layers:
        raise SimInputError(f"{where}: no layers after the header")
    return layers
