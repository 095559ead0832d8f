"""Data movement between two strided views of DRAM: Reshape, Transpose, Slice, Concat, relayouts.

A copy of one logical shape from a source view to a destination view (each with its own byte
strides) becomes LOAD/STORE pairs through the scratchpad: the DMA engines move boxes of up to three
strided dimensions of `elem_bytes` contiguous bytes, and since the scratchpad side is dense in the
box's own order, the same box order on both sides makes the SRAM image the same for the load and the
store. Dimensions contiguous on both sides are merged first; the innermost dimension contiguous on
both sides becomes the element; the box's column dimension is one whose strides fit its 16-bit field.
Boxes larger than a scratchpad slot are split, and dimensions beyond three are looped.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product

from .instructions import CONFIG_LOAD, CONFIG_STORE, LOAD, STORE
from .pipeline import Step, Tile
from .tensors import DramTensor

MAX_ELEM = 65535
MAX_COL_STRIDE = 65535
LIMITS = (4095, 65535, 65535)
"""planes, rows, cols"""


@dataclass(frozen=True)
class Dim:
    size: int
    src: int
    dst: int


@dataclass(frozen=True)
class Transfer:
    src: int
    dst: int
    dims: tuple[Dim, Dim, Dim]
    """planes, rows, cols"""
    elem: int

    @property
    def bytes(self) -> int:
        return self.dims[0].size * self.dims[1].size * self.dims[2].size * self.elem


def _merged(dims: list[Dim]) -> list[Dim]:
    out: list[Dim] = []
    for d in dims:  # outermost first
        if out and out[-1].src == d.size * d.src and out[-1].dst == d.size * d.dst:
            out[-1] = Dim(out[-1].size * d.size, d.src, d.dst)
        else:
            out.append(d)
    return out


def _split(size: int, limit: int) -> int:
    """The largest divisor of `size` not above `limit`."""
    for d in range(min(size, limit), 0, -1):
        if size % d == 0:
            return d
    return 1


def transfers(src: DramTensor, dst: DramTensor, src_base: int, dst_base: int, budget: int) -> list[Transfer]:
    """The boxes that copy every element of `src` to the same index of `dst` (equal shapes)."""
    if src.shape != dst.shape:
        raise AssertionError(f"copy between shapes {src.shape} and {dst.shape}")
    item = src.itemsize
    dims = _merged([Dim(n, s, d) for n, s, d in zip(src.shape, src.strides, dst.strides) if n > 1])
    elem = item
    inner = [d for d in dims if d.src == item and d.dst == item]
    if inner:
        dims.remove(inner[0])
        count = _split(inner[0].size, min(MAX_ELEM, budget) // item)
        elem = count * item
        if count < inner[0].size:
            dims.append(Dim(inner[0].size // count, elem, elem))
    fitting = [d for d in dims if d.src <= MAX_COL_STRIDE and d.dst <= MAX_COL_STRIDE]
    col = min(fitting, key=lambda d: (d.src, d.dst)) if fitting else Dim(1, 0, 0)
    rest = sorted((d for d in dims if d is not col), key=lambda d: -d.size)
    box = [Dim(1, 0, 0), Dim(1, 0, 0), col]
    for position, d in zip((1, 0), rest[:2]):
        box[position] = d
    loops = rest[2:]
    return [t for index in product(*(range(d.size) for d in loops))
            for t in _chunks(src_base + sum(i * d.src for i, d in zip(index, loops)),
                             dst_base + sum(i * d.dst for i, d in zip(index, loops)), box, elem, budget)]


def _chunks(src: int, dst: int, box: list[Dim], elem: int, budget: int) -> list[Transfer]:
    """Split the box along its dimensions (outermost first) until each piece fits its limits and `budget`."""
    room = max(budget // elem, 1)
    cols = min(box[2].size, LIMITS[2], room)
    rows = min(box[1].size, LIMITS[1], max(room // cols, 1)) if cols == box[2].size else 1
    whole = cols == box[2].size and rows == box[1].size
    planes = min(box[0].size, LIMITS[0], max(room // (cols * rows), 1)) if whole else 1
    sizes = (planes, rows, cols)
    out = []
    for starts in product(*(range(0, d.size, n) for d, n in zip(box, sizes))):
        dims = tuple(Dim(min(n, d.size - s), d.src, d.dst) for d, n, s in zip(box, sizes, starts))
        out.append(Transfer(src + sum(s * d.src for s, d in zip(starts, box)),
                            dst + sum(s * d.dst for s, d in zip(starts, box)), dims, elem))
    return out


def copy_tiles(moves: list[Transfer], slots: tuple[int, int]) -> list[Tile]:
    """One load-then-store tile per transfer, alternating between the two scratchpad slots."""
    tiles = []
    for k, t in enumerate(moves):
        planes, rows, cols = t.dims
        sram = slots[k % 2]
        box = dict(space="spad", sram=sram, planes=planes.size, rows=rows.size, cols=cols.size)
        loads = [CONFIG_LOAD(row_stride=rows.src, plane_stride=planes.src, col_stride=cols.src,
                             elem_bytes=t.elem), LOAD(dram=t.src, **box)]
        stores = [CONFIG_STORE(row_stride=rows.dst, plane_stride=planes.dst, col_stride=cols.dst,
                               elem_bytes=t.elem), STORE(dram=t.dst, **box)]
        tiles.append(Tile([Step(loads)], [], stores))
    return tiles
