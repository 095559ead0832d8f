"""The architecture configuration: one frozen record, presets, files, hash.

Every number the simulator and the compiler need about the machine lives in
`ArchConfig`. Each parameter is declared once in `PARAMETERS` (type, legal
range, unit, meaning); validation, file loading, the printed table and the
datasheet's preset table all follow from it. The ISA's address fields bound
the memories (scratchpad <= 4 MiB, accumulator <= 4 MiB, DRAM <= 4 GiB,
32 semaphores).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib

from .errors import ConfigError

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
DATAFLOWS = ("ws", "os", "both")
"""The array's dataflows: weight-stationary only, output-stationary only, or either, chosen per MATMUL."""
HASH_SCHEMA = 1
"""Bumped when the canonical serialisation hashed by `config_hash` changes."""


@dataclass(frozen=True)
class Parameter:
    """One configuration parameter: its type, legal range, unit and meaning."""

    name: str
    kind: type
    lo: float
    hi: float
    unit: str
    doc: str


PARAMETERS: tuple[Parameter, ...] = (
    Parameter("array_rows", int, 1, 1024, "PEs",
              "systolic array rows R (reduction dimension K under weight-stationary)"),
    Parameter("array_cols", int, 1, 1024, "PEs", "systolic array columns C (output channels N)"),
    Parameter("scratchpad_bytes", int, 4 * KiB, 4 * MiB, "bytes", "int8 scratchpad SRAM (22-bit byte address)"),
    Parameter("accumulator_bytes", int, 1 * KiB, 4 * MiB, "bytes", "int32 accumulator SRAM (20-bit word address)"),
    Parameter("dram_bytes", int, 1 * MiB, 4 * GiB, "bytes", "DRAM capacity (32-bit byte address)"),
    Parameter("dram_bytes_per_cycle", int, 1, 4096, "B/cycle", "peak DRAM data bandwidth, shared by both DMA engines"),
    Parameter("dram_latency_cycles", int, 1, 100_000, "cycles", "DRAM request latency before its data phase"),
    Parameter("dram_max_outstanding", int, 1, 4096, "requests", "DRAM requests in flight at once (both engines)"),
    Parameter("dma_burst_bytes", int, 4, 4096, "bytes", "largest DRAM request; a power of two"),
    Parameter("clock_ghz", float, 0.001, 100.0, "GHz", "core clock; every timing is in cycles of it"),
    Parameter("vector_lanes", int, 1, 4096, "lanes", "vector-engine elements (int8 or int32) per cycle"),
    Parameter("vector_pipeline_cycles", int, 0, 1000, "cycles", "vector-engine pipeline fill per instruction"),
    Parameter("queue_depth", int, 1, 4096, "instrs", "entries in each engine's instruction queue"),
    Parameter("semaphores", int, 1, 32, "count", "counting semaphores s0..s(n-1)"),
    Parameter("dataflow", str, 0, 0, "ws, os or both",
              "the dataflows the array has: weight- or output-stationary only, or both (chosen per MATMUL)"),
)
_BY_NAME = {p.name: p for p in PARAMETERS}


@dataclass(frozen=True)
class ArchConfig:
    """The reference NPU's parameters; `name` labels it and is not part of the hash."""

    name: str
    array_rows: int
    array_cols: int
    scratchpad_bytes: int
    accumulator_bytes: int
    dram_bytes: int
    dram_bytes_per_cycle: int
    dram_latency_cycles: int
    dram_max_outstanding: int
    dma_burst_bytes: int
    clock_ghz: float
    vector_lanes: int
    vector_pipeline_cycles: int
    queue_depth: int
    semaphores: int
    dataflow: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"architecture name must be a non-empty string, got {self.name!r}")
        for p in PARAMETERS:
            problem = check_value(p.name, getattr(self, p.name))
            if problem:
                raise ConfigError(f"architecture '{self.name}': {problem}")

    @property
    def macs_per_cycle(self) -> int:
        return self.array_rows * self.array_cols

    @property
    def dataflows(self) -> tuple[str, ...]:
        """The dataflows a MATMUL may use on this machine; the compiler picks among them, the simulator faults others."""
        return ("ws", "os") if self.dataflow == "both" else (self.dataflow,)

    @property
    def reset_dataflow(self) -> str:
        """The matrix engine's dataflow register at reset: the array's only one, or ws when it has both."""
        return self.dataflows[0]

    def replace(self, **changes: Any) -> ArchConfig:
        """A copy with some parameters changed (validated again)."""
        return dataclasses.replace(self, **changes)


def check_value(name: str, value: Any) -> str | None:
    """Why `value` is not legal for parameter `name`, or None if it is."""
    p = _BY_NAME[name]
    if p.kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"key '{name}': expected a number, got {type(value).__name__}"
    elif isinstance(value, bool) or not isinstance(value, p.kind):
        return f"key '{name}': expected {'an integer' if p.kind is int else 'a string'}, got {type(value).__name__}"
    if p.name == "dataflow":
        return None if value in DATAFLOWS else f"key 'dataflow' = {value!r} is not one of {', '.join(DATAFLOWS)}"
    if not p.lo <= value <= p.hi:
        shown = f"an integer of {value.bit_length()} bits" if isinstance(value, int) and value.bit_length() > 64 \
            else value  # str() refuses integers of over 4300 digits, and no one reads them
        return f"key '{name}' = {shown} is out of range {_show(p, p.lo)}..{_show(p, p.hi)}"
    if name == "accumulator_bytes" and value % 4:
        return f"key 'accumulator_bytes' = {value} is not a multiple of 4 (int32 words)"
    if name == "dma_burst_bytes" and value & (value - 1):
        return f"key 'dma_burst_bytes' = {value} is not a power of two"
    return None


def _show(p: Parameter, value: float) -> str:
    return format_size(int(value)) if p.unit == "bytes" else f"{value:g}"


def format_size(n: int) -> str:
    """Bytes as the largest binary unit that divides them: 262144 -> '256 KiB'."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


_SIZE = re.compile(r"^\s*([0-9]{1,20})\s*(B|KiB|MiB|GiB)\s*$")
"""At most 20 ASCII digits: more is out of every range, and `int` refuses over 4300."""


def _parse_size(text: str) -> int | None:
    match = _SIZE.match(text)
    if not match:
        return None
    return int(match.group(1)) * {"B": 1, "KiB": KiB, "MiB": MiB, "GiB": GiB}[match.group(2)]


def _preset(name: str, rows: int, spad: int, acc: int, bw: int, dram: int, outstanding: int, burst: int,
            queue: int) -> ArchConfig:
    return ArchConfig(name=name, array_rows=rows, array_cols=rows, scratchpad_bytes=spad, accumulator_bytes=acc,
                      dram_bytes=dram, dram_bytes_per_cycle=bw, dram_latency_cycles=100,
                      dram_max_outstanding=outstanding, dma_burst_bytes=burst, clock_ghz=1.0, vector_lanes=rows,
                      vector_pipeline_cycles=4, queue_depth=queue, semaphores=32, dataflow="both")


# Outstanding requests x burst cover bandwidth x latency (Little's law), so one engine can reach peak bandwidth.
PRESETS: dict[str, ArchConfig] = {
    "edge": _preset("edge", 16, 256 * KiB, 64 * KiB, 8, 512 * MiB, 16, 64, 16),
    "default": _preset("default", 32, 512 * KiB, 128 * KiB, 32, 2 * GiB, 32, 128, 32),
    "server": _preset("server", 64, 2 * MiB, 512 * KiB, 64, 4 * GiB, 32, 256, 64),
}


def load_config(path: str | Path) -> ArchConfig:
    """Read a TOML or JSON configuration: optional `preset` (the base, else 'default'), `name`, parameters."""
    path = Path(path)
    where = str(path)
    if path.suffix not in (".toml", ".json"):
        raise ConfigError(f"{where}: unknown configuration format '{path.suffix}' (use .toml or .json)")
    if path.is_dir():
        raise ConfigError(f"{where}: is a folder, not a configuration file")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not a text file (a configuration is TOML or JSON)") from None
    if path.suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{where}: not valid TOML: {exc}") from None
        except (ValueError, RecursionError) as exc:  # an integer of over 4300 digits, arrays nested too deeply
            raise ConfigError(f"{where}: not a usable TOML file: {_parser_refusal(exc)}") from None
    elif path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not valid JSON: {exc}") from None
        except (ValueError, RecursionError) as exc:
            raise ConfigError(f"{where}: not a usable JSON file: {_parser_refusal(exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table of parameters at top level, got {type(data).__name__}")
    return config_from_mapping(data, where)


def _parser_refusal(exc: Exception) -> str:
    """Why a parser gave up other than on a syntax error, in a few words."""
    if isinstance(exc, RecursionError):
        return "values nested too deeply"
    return "an integer with too many digits" if "digits" in str(exc) else " ".join(str(exc).split())[:200]


def config_from_mapping(data: dict[str, Any], where: str = "configuration") -> ArchConfig:
    """Build a configuration from parsed keys, naming `where` and the key in every error."""
    base_name = data.get("preset", "default")
    if not isinstance(base_name, str):  # not its repr: str() refuses an integer of over 4300 digits
        raise ConfigError(f"{where}: key 'preset': expected one of {', '.join(PRESETS)}, "
                          f"got {type(base_name).__name__}")
    if base_name not in PRESETS:
        raise ConfigError(f"{where}: key 'preset' = {base_name!r} is not one of {', '.join(PRESETS)}")
    values: dict[str, Any] = {"name": data.get("name", Path(where).stem or "custom")}
    if not isinstance(values["name"], str) or not values["name"] or not values["name"].isprintable():
        raise ConfigError(f"{where}: key 'name': expected a non-empty string of printable characters")
    for key, value in data.items():
        if key in ("preset", "name"):
            continue
        if key not in _BY_NAME:
            raise ConfigError(f"{where}: unknown key {key!r} (known: preset, name, {', '.join(_BY_NAME)})")
        if isinstance(value, str) and _BY_NAME[key].unit == "bytes":
            size = _parse_size(value)
            if size is None:
                raise ConfigError(f"{where}: key '{key}' = {value!r} is not a size such as 262144 or '256 KiB'")
            value = size
        problem = check_value(key, value)  # before float(): an integer past a double's range is refused here
        if problem:
            raise ConfigError(f"{where}: {problem}")
        if _BY_NAME[key].kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        values[key] = value
    return PRESETS[base_name].replace(**values)


def resolve_config(spec: str | Path | ArchConfig) -> ArchConfig:
    """A preset name ('edge', 'default', 'server'), the path of a TOML/JSON file, or a configuration itself
    (a sweep builds its points in memory: no file per point)."""
    if isinstance(spec, ArchConfig):
        return spec
    if isinstance(spec, str) and spec in PRESETS:
        return PRESETS[spec]
    if isinstance(spec, str) and not Path(spec).suffix and not Path(spec).exists():
        raise ConfigError(f"unknown architecture preset '{spec}' "
                          f"(presets: {', '.join(PRESETS)}; or a .toml/.json file)")
    return load_config(spec)


def canonical_json(config: ArchConfig) -> str:
    """The parameters (not the name) as sorted, compact JSON: the bytes `config_hash` hashes."""
    body = {p.name: getattr(config, p.name) for p in PARAMETERS}
    body["clock_ghz"] = float(body["clock_ghz"])
    return json.dumps({"hash_schema": HASH_SCHEMA, **body}, sort_keys=True, separators=(",", ":"))


def config_hash(config: ArchConfig) -> str:
    """SHA-256 (hex) of the canonical serialisation; binaries record it to refuse a different machine."""
    return hashlib.sha256(canonical_json(config).encode("ascii")).hexdigest()


def _value_text(p: Parameter, value: Any) -> str:
    return format_size(value) if p.unit == "bytes" else f"{value:g}" if p.kind is float else str(value)


def derived_figures(config: ArchConfig) -> dict[str, str]:
    """Headline figures that follow from the parameters."""
    ghz = config.clock_ghz
    return {
        "peak int8 throughput": f"{2 * config.macs_per_cycle * ghz / 1000:.3g} TOPS "
                                f"({config.macs_per_cycle} MAC/cycle)",
        "DRAM bandwidth": f"{config.dram_bytes_per_cycle * ghz:.3g} GB/s",
        "ridge point": f"{2 * config.macs_per_cycle / config.dram_bytes_per_cycle:.3g} ops/byte",
    }


def format_config(config: ArchConfig) -> str:
    """A printable table of every parameter with its unit and meaning, plus derived figures."""
    lines = [f"NPU architecture '{config.name}' (config hash {config_hash(config)[:16]})"]
    for p in PARAMETERS:
        lines.append(f"  {p.name:<24}{_value_text(p, getattr(config, p.name)):>12}  {p.doc}")
    for key, text in derived_figures(config).items():
        lines.append(f"  {key:<24}{text}")
    return "\n".join(lines)


def presets_markdown() -> str:
    """The datasheet's preset table (vendor_guide/npu_architecture.md embeds it; a test keeps it current)."""
    names = list(PRESETS)
    lines = ["| parameter | " + " | ".join(f"`{n}`" for n in names) + " | meaning |",
             "|---|" + "---|" * len(names) + "---|"]
    for p in PARAMETERS:
        cells = " | ".join(_value_text(p, getattr(PRESETS[n], p.name)) for n in names)
        lines.append(f"| {p.name} | {cells} | {p.doc} ({p.unit}) |")
    derived = {n: derived_figures(PRESETS[n]) for n in names}
    for key in derived[names[0]]:
        lines.append(f"| *{key}* | " + " | ".join(derived[n][key] for n in names) + " | derived |")
    return "\n".join(lines)
