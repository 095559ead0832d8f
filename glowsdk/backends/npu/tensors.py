"""Tensors in the NPU's DRAM: logical shape, physical strides, address, and the DRAM memory plan.

A graph value keeps its logical shape (NCHW for images, as the graph types say) while its bytes may
be laid out otherwise: images made on the NPU are stored NHWC, channels innermost, because that is
what the matrix engine's implicit im2col and the pooling unit read. Strides (bytes per logical
index) say where each element is, so a channel slice of a concatenation or an NHWC image seen as
NCHW is just another view of the same bytes, and every DMA is derived from strides.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from isa.sections import MemoryPlan, Region, TensorInfo

ALIGN = 64
"""Region bases and tensor addresses are at least 64-byte aligned (the planner aligns them to the DMA burst
when it is larger, so a tensor's rows start on a burst and need no extra DRAM request)."""


def dense_strides(shape: tuple[int, ...], itemsize: int = 1) -> tuple[int, ...]:
    strides, step = [], itemsize
    for dim in reversed(shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


def nhwc_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Byte strides of a logical N x C x H x W int8 image stored N, H, W, C."""
    n, c, h, w = shape
    return (h * w * c, 1, w * c, c)


@dataclass(frozen=True)
class DramTensor:
    """A view of int8 (or int32) bytes in one region of DRAM, by logical index."""

    name: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    region: str
    offset: int
    """bytes from the start of its region (the plan fixes the bases)"""
    scale: float = 0.0
    zero: int = 0
    itemsize: int = 1

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def extent(self) -> int:
        """Bytes from the first to one past the last element."""
        if not self.elements:
            return 0
        return sum((d - 1) * s for d, s in zip(self.shape, self.strides)) + self.itemsize

    def is_dense(self) -> bool:
        """Row-major in logical order, as the host binds inputs and reads outputs."""
        return all(s == d for s, d, n in zip(self.strides, dense_strides(self.shape, self.itemsize), self.shape)
                   if n > 1)

    def is_nhwc(self) -> bool:
        """A 4-D image with channels innermost and contiguous (pixels may be further apart)."""
        return len(self.shape) == 4 and (self.shape[1] == 1 or self.strides[1] == 1) and \
            self.strides[3] >= self.shape[1] and self.strides[2] >= self.shape[3] * self.strides[3]

    def same_layout(self, other: DramTensor) -> bool:
        """Whether both put the element of each logical index at the same offset from their start (the
        stride of a dim of size 1 is never used, so it may differ)."""
        return self.shape == other.shape and all(
            a == b for a, b, n in zip(self.strides, other.strides, self.shape) if n > 1)

    def at(self, index: tuple[int, ...]) -> int:
        """Byte offset in the region of the element at a (possibly partial) leading index."""
        return self.offset + sum(i * s for i, s in zip(index, self.strides))

    def sliced(self, axis: int, start: int, size: int, name: str | None = None) -> DramTensor:
        shape = self.shape[:axis] + (size,) + self.shape[axis + 1:]
        return replace(self, name=name or self.name, shape=shape, offset=self.offset + start * self.strides[axis])


class DramPlanner:
    """Bump allocation per region; region bases are fixed at the end (constants, inputs, outputs, activations)."""

    REGIONS = ("constants", "activations", "inputs", "outputs")

    def __init__(self, alignment: int = ALIGN) -> None:
        self.alignment = max(alignment, ALIGN)
        self.tops = {name: 0 for name in self.REGIONS}
        self.tensors: list[DramTensor] = []

    def allocate(self, name: str, shape: tuple[int, ...], region: str, *, nhwc: bool = False, scale: float = 0.0,
                 zero: int = 0, itemsize: int = 1, record: bool = True) -> DramTensor:
        strides = nhwc_strides(shape) if nhwc else dense_strides(shape, itemsize)
        size = int(np.prod(shape, dtype=np.int64)) * itemsize
        offset = self.tops[region]
        self.tops[region] = offset + -(-max(size, 1) // self.alignment) * self.alignment
        tensor = DramTensor(name, tuple(shape), strides, region, offset, scale, zero, itemsize)
        if record:
            self.tensors.append(tensor)
        return tensor

    def plan(self, constants_size: int) -> MemoryPlan:
        """The plan: each region after the previous one, aligned like the tensors."""
        sizes = dict(self.tops, constants=constants_size)
        base, regions = 0, {}
        for name in self.REGIONS:
            regions[name] = Region(base, sizes[name])
            base += -(-sizes[name] // self.alignment) * self.alignment
        return MemoryPlan(**regions)


def tensor_info(tensor: DramTensor, plan: MemoryPlan) -> TensorInfo:
    """The tensor table's record of a tensor (its dims as stored: NHWC images list N, H, W, C)."""
    order = sorted(range(len(tensor.shape)), key=lambda i: -tensor.strides[i]) if not tensor.is_dense() \
        else range(len(tensor.shape))
    shape = tuple(tensor.shape[i] for i in order)
    elem = "int8" if tensor.itemsize == 1 else "int32"
    layout = "nhwc" if len(tensor.shape) == 4 and tensor.is_nhwc() and not tensor.is_dense() else "row-major"
    return TensorInfo(tensor.name, elem, shape, getattr(plan, tensor.region).base + tensor.offset,
                      max(tensor.extent, 0), tensor.scale, tensor.zero, layout)
