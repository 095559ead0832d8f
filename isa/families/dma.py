"""The DMA engines' instructions (LOAD, GATHER, STORE): semantics, memory extents and DRAM transfers.

The ISA table's records name these rules; the semantics are the reference's words vectorised
(strided views of DRAM, never a loop per element).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..behaviour import (Box, ExecutionFault, Extent, ProgramError, Registers, State, Transfer, Write, sram, sram_extent,
                         strided, write_to)

if TYPE_CHECKING:
    from ..config import ArchConfig
    from ..encoding import Instr


def load(state: State, i: Instr, r: Registers) -> list[Write]:
    e = r["elem_bytes"]
    box = strided(state.dram, i.dram, (i.planes, i.rows, i.cols, e),
                  (r["plane_stride"], r["row_stride"], r["col_stride"], 1))
    pads = r["pad_top"], r["pad_bottom"], r["pad_left"], r["pad_right"]
    # Copied now: the LOAD reads DRAM as it starts, whatever is stored there before it completes.
    if i.space == "acc":
        box = box.copy().view("<i4")
        dtype, lanes = np.int32, e // 4
    else:
        box = box.view(np.int8)
        dtype, lanes = np.int8, e
    if any(pads):
        top, bottom, left, right = pads
        image = np.full((i.planes, top + i.rows + bottom, left + i.cols + right, lanes), r["pad_value"], dtype)
        image[:, top:top + i.rows, left:left + i.cols] = box
    else:
        image = box if i.space == "acc" else box.copy()
    return write_to(sram(state, i.space), i.sram, image)


def gather(state: State, i: Instr, r: Registers) -> list[Write]:
    e = r["elem_bytes"]
    raw = state.acc[i.idx:i.idx + i.count].astype(np.int64)
    rows = np.where(raw < 0, raw + i.rows, raw)
    bad = np.flatnonzero((rows < 0) | (rows >= i.rows))
    if bad.size:
        k = int(bad[0])
        raise ExecutionFault(f"GATHER: index {int(raw[k])} (at acc {i.idx + k:#x}) is outside the table's "
                             f"{i.rows} rows")
    table = strided(state.dram, i.dram, (i.rows, e), (r["row_stride"], 1))
    return write_to(state.spad, i.sram, table[rows].view(np.int8))


def _disjoint(counts_strides: list[tuple[int, int]], elem: int) -> bool:
    """True when no two elements of a strided box share a byte (a sufficient test)."""
    reach = elem
    for count, stride in sorted((cs for cs in counts_strides if cs[0] > 1), key=lambda cs: cs[1]):
        if stride < reach:
            return False
        reach = stride * (count - 1) + reach
    return True


def store(state: State, i: Instr, r: Registers) -> list[Write]:
    e = r["elem_bytes"]
    count = i.planes * i.rows * i.cols * e
    if i.space == "acc":
        image = state.acc[i.sram:i.sram + count // 4].astype("<i4").view(np.uint8)
    else:
        image = state.spad[i.sram:i.sram + count].view(np.uint8).copy()
    dims = [(i.planes, r["plane_stride"]), (i.rows, r["row_stride"]), (i.cols, r["col_stride"])]
    image = image.reshape(i.planes, i.rows, i.cols, e)
    if _disjoint(dims, e):
        view = as_strided(state.dram[i.dram:], (i.planes, i.rows, i.cols, e), (*(s for _, s in dims), 1))
        return [Write(view, Ellipsis, image)]
    # Overlapping destinations: the element later in (p, r, c) order wins.
    address = np.zeros(1, np.int64)
    for n, stride in (*dims, (e, 1)):
        address = (address[:, None] + np.arange(n, dtype=np.int64) * stride).ravel()
    last_first = address[::-1]
    unique, at = np.unique(last_first, return_index=True)
    return [Write(state.dram, i.dram + unique, image.ravel()[::-1][at])]


def _box(base: int, counts_strides: Iterable[tuple[int, int]], elem: int) -> tuple[int, int]:
    """start, stop of a strided box of elem-byte elements (strides are never negative)."""
    return base, base + sum((count - 1) * stride for count, stride in counts_strides) + elem


def _box_extents(i: Instr, r: Registers, write_dram: bool) -> list[Extent]:
    elem = r["elem_bytes"]
    if i.space == "acc" and elem % 4:
        raise ProgramError(f"elem_bytes = {elem} is not a multiple of 4, as an accumulator transfer needs")
    start, stop = _box(i.dram, ((i.planes, r["plane_stride"]), (i.rows, r["row_stride"]), (i.cols, r["col_stride"])),
                       elem)
    if write_dram:
        image = i.planes * i.rows * i.cols * elem
    else:
        image = i.planes * (r["pad_top"] + i.rows + r["pad_bottom"]) * (r["pad_left"] + i.cols + r["pad_right"]) * elem
    elements = image // 4 if i.space == "acc" else image
    return [Extent("dram", start, stop, write_dram), sram_extent(i.space, i.sram, elements, not write_dram)]


def load_extents(i: Instr, r: Registers) -> list[Extent]:
    return _box_extents(i, r, write_dram=False)


def store_extents(i: Instr, r: Registers) -> list[Extent]:
    return _box_extents(i, r, write_dram=True)


def gather_extents(i: Instr, r: Registers) -> list[Extent]:
    return [Extent("acc", i.idx, i.idx + i.count, False),
            Extent("dram", *_box(i.dram, ((i.rows, r["row_stride"]),), r["elem_bytes"]), False),
            Extent("spad", i.sram, i.sram + i.count * r["elem_bytes"], True)]


def _dram_box(i: Instr, r: Registers) -> Box:
    return Box(i.dram, i.planes, i.rows, i.cols, r["plane_stride"], r["row_stride"], r["col_stride"], r["elem_bytes"])


def load_transfer(i: Instr, r: Registers, config: ArchConfig) -> Transfer:
    """The box, plus the padding CONFIG_PAD adds around each plane (SRAM writes without DRAM requests)."""
    height = r["pad_top"] + i.rows + r["pad_bottom"]
    width = r["pad_left"] + i.cols + r["pad_right"]
    return Transfer(_dram_box(i, r), i.planes * (height * width - i.rows * i.cols) * r["elem_bytes"], False)


def store_transfer(i: Instr, r: Registers, config: ArchConfig) -> Transfer:
    return Transfer(_dram_box(i, r), 0, True)


def gather_transfer(i: Instr, r: Registers, config: ArchConfig) -> Transfer:
    """N runs of E bytes, spaced so that no two merge into one request."""
    burst = config.dma_burst_bytes
    apart = (-(-r["elem_bytes"] // burst) + 1) * burst
    return Transfer(Box(i.dram, 1, i.count, 1, 0, apart, 0, r["elem_bytes"]), 0, False)
