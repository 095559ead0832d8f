"""A compiled CPU image: everything needed to run a network without compiling it again.

The JIT, the compile cache and the AOT bundle all consume the same image: the
position-independent object files of the module's parts (codegen/split.py; the
first holds the entry points), the constant region as the
static allocator (and the kernels' packed weights) laid it out, the sizes of
the two mutable regions, where each input and output lives in the placeholder
region (in the order of the module's bindings table), and the C signature of
every function the objects export, as read from the module (never restated by
hand). image_file.py stores one on disk.
"""
from __future__ import annotations

import mmap
from dataclasses import dataclass

import numpy as np

from ...compiler.ir.program import Program
from ...errors import UnsupportedError
from ...graph.types import ElemKind, Type
from .codegen.module import placeholder_weights

ALIGNMENT = 64
"""Byte alignment of every region (the allocator's offsets are multiples of it too)."""


HUGE_PAGE = 2 << 20
"""Regions of at least this size go on transparent huge pages where the OS offers them: a
network's weights are streamed from memory every run, and on 4 KiB pages the TLB misses and the
hardware prefetcher (which stops at every page boundary) cost measurable time."""


def aligned_bytes(size: int) -> np.ndarray:
    """A zeroed byte array of `size` whose data starts on an ALIGNMENT-byte boundary (a huge-page
    boundary, advised as huge pages, when it is large: see HUGE_PAGE). The mapping is private:
    Python's default for an anonymous one is shared, which Linux backs with shmem, where huge
    pages are off unless the administrator enables them (shmem_enabled), so the advice did
    nothing (resnet50's kernels took 1.5-3% less thread CPU time on huge pages, resnet18's and
    mobilenet_v2's alike, interleaved in one process)."""
    if size >= HUGE_PAGE and hasattr(mmap, "MADV_HUGEPAGE"):
        area = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        raw = np.frombuffer(area, dtype=np.uint8)
        start = -raw.ctypes.data % HUGE_PAGE
        area.madvise(mmap.MADV_HUGEPAGE, start, size - size % mmap.PAGESIZE)
        return raw[start:start + size]
    raw = np.zeros(size + ALIGNMENT, dtype=np.uint8)
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start:start + size]


@dataclass(frozen=True)
class Argument:
    """One parameter of the entry point: its name in the module and its C type."""

    name: str
    c_type: str


@dataclass(frozen=True)
class Signature:
    """An exported function as the module declares it: symbol, C return type, parameters."""

    symbol: str
    returns: str
    arguments: tuple[Argument, ...]

    def to_json(self) -> dict:
        return {"symbol": self.symbol, "returns": self.returns,
                "arguments": [[a.name, a.c_type] for a in self.arguments]}

    @classmethod
    def from_json(cls, data: dict) -> Signature:
        return cls(data["symbol"], data["returns"], tuple(Argument(n, t) for n, t in data["arguments"]))


@dataclass(frozen=True)
class Binding:
    """A network input or output: its type and byte offset in the placeholder region."""

    name: str
    role: str  # "input" or "output"
    type: Type
    offset: int

    def to_json(self) -> dict:
        t = self.type
        return {"name": self.name, "role": self.role, "elem": t.elem.value, "shape": list(t.shape),
                "scale": t.scale, "offset": t.offset, "axis": t.axis, "byte_offset": self.offset}

    @classmethod
    def from_json(cls, data: dict) -> Binding:
        scale, offset = data["scale"], data["offset"]
        type_ = Type(ElemKind(data["elem"]), tuple(data["shape"]),
                     tuple(scale) if isinstance(scale, list) else scale,
                     tuple(offset) if isinstance(offset, list) else offset, data["axis"])
        return cls(data["name"], data["role"], type_, data["byte_offset"])


@dataclass
class CpuImage:
    """Object code plus the memory layout it was compiled against (see the module docstring)."""

    objects: tuple[bytes, ...]
    exports: tuple[Signature, ...]
    constants: np.ndarray
    activation_bytes: int
    placeholder_bytes: int
    bindings: tuple[Binding, ...]
    triple: str
    cpu: str

    @classmethod
    def from_program(cls, program: Program, objects: tuple[bytes, ...], exports: tuple[Signature, ...],
                     triple: str, cpu: str, constants: np.ndarray | None = None) -> CpuImage:
        """The image of `program` compiled to `objects`, with its `constants` region (made by
        `constant_region` when not given)."""
        plan = program.plan
        constants = constant_region(program) if constants is None else constants
        bindings = tuple(Binding(w.name, w.role, w.type, plan.address(w)[1]) for w in placeholder_weights(program))
        return cls(objects, exports, constants, plan.activation_bytes, plan.placeholder_bytes, bindings,
                   triple, cpu)

    def describe(self, key: str) -> dict:
        """The JSON description written before the sections (everything but the bytes)."""
        return {"key": key, "triple": self.triple, "cpu": self.cpu, "exports": [s.to_json() for s in self.exports],
                "constant_bytes": int(self.constants.size), "activation_bytes": self.activation_bytes,
                "placeholder_bytes": self.placeholder_bytes, "alignment": ALIGNMENT,
                "bindings": [b.to_json() for b in self.bindings]}


def constant_region(program: Program) -> np.ndarray:
    """The constants region of `program`: the weights the code reads (those the plan still places:
    codegen/module.py compacts it) copied to their offsets. Each such weight's value then becomes its
    view of the region, and a constant the code does not read (a filter the kernels use packed) loses
    its value, so that no second copy of a network's weights outlives the compile (resnet50's
    folded filters, packed panels and region were 98 MB each)."""
    plan = program.plan
    constants = aligned_bytes(plan.constant_bytes)
    for weight in program.ir.weights.values():
        if weight.role != "constant":
            continue
        if weight.name not in plan.constant_offsets:
            weight.value = None
            continue
        if weight.value is None:
            raise UnsupportedError(f"constant weight %{weight.name} has no data")
        offset = plan.address(weight)[1]
        view = constants[offset:offset + weight.type.nbytes].view(weight.type.dtype).reshape(weight.type.shape)
        np.copyto(view, weight.value)
        weight.value = view
    return constants
