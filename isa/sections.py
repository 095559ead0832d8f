"""The content of the `.npub` table sections, and their bytes in both directions.

Each `unpack_*` reads one section from a `Span` and checks everything about it: record
counts against the section size, strings inside the pool and printable, enum codes
known, reserved fields zero, and its relations to the sections read before it (the
memory plan first, then tensors, bindings, debug ranges). Counts read from the file
are checked against the section size before anything is built from them, so no file
can make the reader allocate more than the file's own size.
"""
from __future__ import annotations

import json
import math
import unicodedata
from dataclasses import dataclass, field

from .npub_layout import (BINDING, DEBUG_RANGE, DRAM_ALIGNMENT, ELEM_CODES, ELEM_KINDS, LAYOUTS, MAX_RANK, REGION,
                          TABLE_HEADER, TENSOR, Direction, Record, RegionKind, Span)

MAX_NAME_BYTES = 1024
_UNPRINTABLE = {"Cc", "Cf", "Zl", "Zp", "Cs"}


@dataclass(frozen=True)
class TensorInfo:
    """A tensor the program reads or writes in DRAM: where it is and how to read its bytes.

    `scale` and `offset` quantize it (real = (q - offset) * scale); a scale of 0.0 means not quantized.
    `shape` lists the dims as stored; layout "nhwc" stores an N, C, H, W image as N, H, W, C (the host
    binding transposes), so `logical_shape` is what a caller gives and gets.
    """

    name: str
    elem: str
    shape: tuple[int, ...]
    dram_address: int
    size_bytes: int
    scale: float = 0.0
    offset: int = 0
    layout: str = "row-major"

    @property
    def logical_shape(self) -> tuple[int, ...]:
        if self.layout == "nhwc":
            n, h, w, c = self.shape
            return n, c, h, w
        return self.shape

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return ELEM_KINDS[ELEM_CODES[self.elem]][1]


@dataclass(frozen=True)
class Region:
    """A DRAM address range [base, base + size)."""

    base: int
    size: int

    @property
    def end(self) -> int:
        return self.base + self.size

    def holds(self, address: int, size: int = 1) -> bool:
        return self.base <= address and address + size <= self.end


@dataclass(frozen=True)
class MemoryPlan:
    """The DRAM plan: one region per kind. Addresses in the binary are absolute within it."""

    constants: Region
    activations: Region
    inputs: Region
    outputs: Region

    def regions(self) -> dict[RegionKind, Region]:
        return {kind: getattr(self, kind.label) for kind in RegionKind}

    def region_of(self, address: int, size: int = 1) -> RegionKind | None:
        """The region that holds all of [address, address + size), if one does."""
        for kind, region in zip(RegionKind, (self.constants, self.activations, self.inputs, self.outputs)):
            if region.base <= address and address + size <= region.base + region.size:
                return kind
        return None

    @property
    def dram_size(self) -> int:
        return max(r.end for r in self.regions().values())


@dataclass(frozen=True)
class DebugRange:
    """Instructions [start, stop) implement graph node `name` (of node kind `kind`)."""

    start: int
    stop: int
    name: str
    kind: str = ""


@dataclass
class Bindings:
    """Network input and output names -> tensor-table indices, in the network's order."""

    inputs: dict[str, int] = field(default_factory=dict)
    outputs: dict[str, int] = field(default_factory=dict)


class _Pool:
    """A string pool being written: each distinct string once, addressed by (offset, length)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.seen: dict[str, tuple[int, int]] = {}

    def add(self, text: str) -> tuple[int, int]:
        if text not in self.seen:
            raw = text.encode("utf-8")
            self.seen[text] = (len(self.data), len(raw))
            self.data += raw
        return self.seen[text]


def _pack_table(records: list[bytes], pool: _Pool | None = None) -> bytes:
    pool_bytes = bytes(pool.data) if pool else b""
    return TABLE_HEADER.pack(count=len(records), pool_size=len(pool_bytes)) + b"".join(records) + pool_bytes


def _table(span: Span, rec: Record, what: str) -> tuple[list[tuple[int, dict]], Span]:
    """The records of a table section (with their offsets in the span) and its string pool."""
    if span.size < TABLE_HEADER.size:
        raise span.error(0, f"section is {span.size} bytes, shorter than its {TABLE_HEADER.size}-byte header")
    head = span.record(TABLE_HEADER, 0, "section header")
    count, pool_size = head["count"], head["pool_size"]
    expected = TABLE_HEADER.size + count * rec.size + pool_size
    if expected != span.size:
        raise span.error(0, f"header declares {count} {what} records of {rec.size} bytes and a {pool_size}-byte "
                         f"string pool ({expected} bytes), but the section has {span.size} bytes")
    rows = []
    for i in range(count):
        at = TABLE_HEADER.size + i * rec.size
        rows.append((at, span.record(rec, at, f"{what} {i}")))
    return rows, span.sub(TABLE_HEADER.size + count * rec.size, pool_size)


def _string(span: Span, pool: Span, where: int, values: dict, prefix: str, what: str,
            optional: bool = False) -> str:
    """The pool string named by fields `<prefix>_offset`/`<prefix>_length`; `where` is the first's offset."""
    offset, length = values[f"{prefix}_offset"], values[f"{prefix}_length"]
    if length == 0 and optional:
        return ""
    if not 0 < length <= MAX_NAME_BYTES:
        raise span.error(where, f"{what}: {prefix} length {length} outside 1..{MAX_NAME_BYTES}")
    if offset + length > pool.size:
        raise span.error(where, f"{what}: {prefix} at pool bytes {offset}..{offset + length} runs past "
                         f"the {pool.size}-byte string pool")
    raw = bytes(pool.data[pool.start + offset:pool.start + offset + length])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise pool.error(offset + err.start, f"{what}: {prefix} is not valid UTF-8") from None
    for i, ch in enumerate(text):
        if unicodedata.category(ch) in _UNPRINTABLE:
            raise pool.error(offset + len(text[:i].encode()), f"{what}: {prefix} holds unprintable "
                             f"character U+{ord(ch):04X}")
    return text


def pack_tensors(tensors: list[TensorInfo]) -> bytes:
    pool = _Pool()
    records = []
    for t in tensors:
        name_offset, name_length = pool.add(t.name)
        records.append(TENSOR.pack(name_offset=name_offset, name_length=name_length, elem=ELEM_CODES[t.elem],
                                   rank=len(t.shape), layout=LAYOUTS.index(t.layout), offset=t.offset, scale=t.scale,
                                   dram_address=t.dram_address, size_bytes=t.size_bytes,
                                   dims=tuple(t.shape) + (0,) * (MAX_RANK - len(t.shape))))
    return _pack_table(records, pool)


def _describe(plan: MemoryPlan) -> str:
    return ", ".join(f"{kind.label} 0x{r.base:x}..0x{r.end:x}" for kind, r in plan.regions().items())


def unpack_tensors(span: Span, plan: MemoryPlan) -> list[TensorInfo]:
    """The tensor table; every tensor lies inside one region of `plan`."""
    rows, pool = _table(span, TENSOR, "tensor")
    tensors: list[TensorInfo] = []
    seen: dict[str, int] = {}
    for i, (at, v) in enumerate(rows):
        what = f"tensor {i}"
        name = _string(span, pool, at + TENSOR.offsets["name_offset"], v, "name", what)
        what = f"tensor {i} '{name}'"
        if name in seen:
            raise span.error(at, f"{what}: name already used by tensor {seen[name]}")
        seen[name] = i
        if v["elem"] not in ELEM_KINDS:
            raise span.error(at + TENSOR.offsets["elem"], f"{what}: unknown element kind code {v['elem']} "
                             f"(known: {', '.join(f'{c}={n}' for c, (n, _) in ELEM_KINDS.items())})")
        elem, itemsize = ELEM_KINDS[v["elem"]]
        rank, dims = v["rank"], v["dims"]
        if rank > MAX_RANK:
            raise span.error(at + TENSOR.offsets["rank"], f"{what}: rank {rank} exceeds {MAX_RANK}")
        dims_at = at + TENSOR.offsets["dims"]
        for d, size in enumerate(dims):
            if (size == 0) != (d >= rank):
                rule = "must be 0 past the rank" if d >= rank else "must be at least 1"
                raise span.error(dims_at + 4 * d, f"{what}: dimension {d} is {size}; {rule}")
        scale, offset = v["scale"], v["offset"]
        if not (scale == 0.0 or float32_scale(scale)):
            raise span.error(at + TENSOR.offsets["scale"], f"{what}: quantization scale {scale!r} is not "
                             f"finite and positive in float32, where it is divided by, between "
                             f"{F32_TINY!r} and {F32_MAX!r} (0.0 = not quantized)")
        if scale == 0.0 and offset:
            raise span.error(at + TENSOR.offsets["offset"], f"{what}: quantization offset {offset} without a scale")
        if scale and elem == "float32":
            raise span.error(at + TENSOR.offsets["scale"], f"{what}: a float32 tensor cannot be quantized")
        shape = tuple(dims[:rank])
        if v["layout"] >= len(LAYOUTS) or (LAYOUTS[v["layout"]] == "nhwc" and rank != 4):
            raise span.error(at + TENSOR.offsets["layout"], f"{what}: layout code {v['layout']} is not one of "
                             f"{', '.join(f'{c}={n}' for c, n in enumerate(LAYOUTS))} (nhwc needs rank 4)")
        need = math.prod(shape) * itemsize
        if v["size_bytes"] < need:
            raise span.error(at + TENSOR.offsets["size_bytes"], f"{what}: {v['size_bytes']} bytes cannot hold "
                             f"{elem}{list(shape)} ({need} bytes)")
        address, size = v["dram_address"], v["size_bytes"]
        if plan.region_of(address, size) is None:
            raise span.error(at + TENSOR.offsets["dram_address"], f"{what}: DRAM bytes 0x{address:x}..0x"
                             f"{address + size:x} are not inside one region of the plan ({_describe(plan)})")
        tensors.append(TensorInfo(name, elem, shape, v["dram_address"], v["size_bytes"], scale, offset,
                                  LAYOUTS[v["layout"]]))
    return tensors


F32_TINY = 2.0 ** -126
"""The smallest normal float32: a scale below it is 0 or denormal once rounded to float32."""
F32_MAX = float.fromhex("0x1.fffffep127")


def float32_scale(scale: float) -> bool:
    """Whether `scale` is a usable quantization scale: inputs are divided by it in float32, so it must be
    a normal, finite, positive float32 (a float64 scale of 1e-50 would be 0 there, 1e50 infinity)."""
    return F32_TINY <= scale <= F32_MAX


def pack_bindings(bindings: Bindings) -> bytes:
    pool = _Pool()
    records = []
    for direction, table in ((Direction.INPUT, bindings.inputs), (Direction.OUTPUT, bindings.outputs)):
        for name, tensor in table.items():
            name_offset, name_length = pool.add(name)
            records.append(BINDING.pack(direction=direction, tensor=tensor, name_offset=name_offset,
                                        name_length=name_length))
    return _pack_table(records, pool)


def unpack_bindings(span: Span, tensors: list[TensorInfo], plan: MemoryPlan) -> Bindings:
    """Inputs and outputs; each names a tensor that lies in the inputs (or outputs) region."""
    rows, pool = _table(span, BINDING, "binding")
    bindings = Bindings()
    for i, (at, v) in enumerate(rows):
        name = _string(span, pool, at + BINDING.offsets["name_offset"], v, "name", f"binding {i}")
        if v["direction"] not in set(Direction):
            raise span.error(at, f"binding {i} '{name}': direction {v['direction']} is neither 1 (input) "
                             f"nor 2 (output)")
        direction = Direction(v["direction"])
        table = bindings.inputs if direction is Direction.INPUT else bindings.outputs
        what = f"{direction.name.lower()} '{name}'"
        if name in table:
            raise span.error(at, f"{what} is bound twice")
        index = v["tensor"]
        if index >= len(tensors):
            raise span.error(at + BINDING.offsets["tensor"], f"{what}: tensor index {index} is past the "
                             f"tensor table ({len(tensors)} tensors)")
        tensor = tensors[index]
        want = RegionKind.INPUTS if direction is Direction.INPUT else RegionKind.OUTPUTS
        found = plan.region_of(tensor.dram_address, tensor.size_bytes)
        if found is not want:
            raise span.error(at + BINDING.offsets["tensor"], f"{what}: tensor {index} '{tensor.name}' lies in "
                             f"the {found.label if found else 'no'} region, not the {want.label} region")
        table[name] = index
    return bindings


def pack_plan(plan: MemoryPlan) -> bytes:
    return _pack_table([REGION.pack(kind=kind, base=r.base, size=r.size) for kind, r in plan.regions().items()])


def unpack_plan(span: Span) -> MemoryPlan:
    rows, pool = _table(span, REGION, "region")
    if pool.size:
        raise span.error(TABLE_HEADER.offsets["pool_size"], "the memory plan has no string pool; pool_size must be 0")
    regions: dict[RegionKind, Region] = {}
    for i, (at, v) in enumerate(rows):
        if v["kind"] not in set(RegionKind):
            raise span.error(at, f"region {i}: unknown region kind {v['kind']}")
        kind = RegionKind(v["kind"])
        if kind in regions:
            raise span.error(at, f"region {i}: a second {kind.label} region")
        if v["base"] % DRAM_ALIGNMENT:
            raise span.error(at + REGION.offsets["base"], f"{kind.label} region: base 0x{v['base']:x} is not a "
                             f"multiple of {DRAM_ALIGNMENT}")
        if v["base"] + v["size"] > 1 << 64:
            raise span.error(at + REGION.offsets["size"], f"{kind.label} region: ends past the 64-bit address space")
        region = Region(v["base"], v["size"])
        for other_kind, other in regions.items():
            if region.size and other.size and region.base < other.end and other.base < region.end:
                raise span.error(at, f"{kind.label} region 0x{region.base:x}..0x{region.end:x} overlaps the "
                                 f"{other_kind.label} region 0x{other.base:x}..0x{other.end:x}")
        regions[kind] = region
    missing = [k.label for k in RegionKind if k not in regions]
    if missing:
        raise span.error(0, f"the plan has no {', '.join(missing)} region (every kind appears once)")
    return MemoryPlan(**{kind.label: region for kind, region in regions.items()})


def pack_debug(ranges: list[DebugRange]) -> bytes:
    pool = _Pool()
    records = []
    for r in ranges:
        name_offset, name_length = pool.add(r.name)
        kind_offset, kind_length = pool.add(r.kind) if r.kind else (0, 0)
        records.append(DEBUG_RANGE.pack(start=r.start, stop=r.stop, name_offset=name_offset,
                                        name_length=name_length, kind_offset=kind_offset, kind_length=kind_length))
    return _pack_table(records, pool)


def unpack_debug(span: Span, instruction_count: int) -> list[DebugRange]:
    rows, pool = _table(span, DEBUG_RANGE, "debug range")
    ranges: list[DebugRange] = []
    for i, (at, v) in enumerate(rows):
        what = f"debug range {i}"
        name = _string(span, pool, at + DEBUG_RANGE.offsets["name_offset"], v, "name", what)
        kind = _string(span, pool, at + DEBUG_RANGE.offsets["kind_offset"], v, "kind", what, optional=True)
        if not kind and v["kind_offset"]:
            raise span.error(at + DEBUG_RANGE.offsets["kind_offset"], f"{what}: kind_offset {v['kind_offset']} "
                             f"must be 0 when kind_length is 0")
        start, stop = v["start"], v["stop"]
        if not start < stop <= instruction_count:
            raise span.error(at, f"{what} '{name}': instructions {start}..{stop} are not a non-empty range within "
                             f"the {instruction_count} instructions")
        if ranges and start < ranges[-1].stop:
            raise span.error(at, f"{what} '{name}': starts at instruction {start}, before the previous range "
                             f"'{ranges[-1].name}' stops ({ranges[-1].stop}); ranges ascend without overlap")
        ranges.append(DebugRange(start, stop, name, kind))
    return ranges


def pack_metadata(metadata: dict) -> bytes:
    return json.dumps(metadata, sort_keys=True, ensure_ascii=False, allow_nan=False).encode("utf-8")


def unpack_metadata(span: Span) -> dict:
    """The metadata object: parsed with `json` only (never pickle or eval)."""
    raw = span.bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise span.error(err.start, "metadata is not valid UTF-8") from None
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as err:
        reason = err.msg.removesuffix(" at")
        raise span.error(len(text[:err.pos].encode()), f"metadata is not valid JSON ({reason})") from None
    except RecursionError:
        raise span.error(0, "metadata JSON is nested too deeply") from None
    except ValueError as err:
        raise span.error(0, f"metadata is not acceptable JSON ({' '.join(str(err).split())})") from None
    if not isinstance(value, dict):
        raise span.error(0, f"metadata is a JSON {type(value).__name__}, not an object")
    return value


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")
