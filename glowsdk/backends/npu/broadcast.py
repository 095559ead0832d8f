"""Element-wise Min, Max and Add of an int8 tensor and a row computed at run time, broadcast over its leading dims.

`Min(scores, mask)` with scores [B, H, S, S] and a padding mask [1, 1, 1, S] given by the host: the operand of
fewer elements is one row of R elements (its dims all 1 but trailing ones that match the result's) repeated over
the result's rows. Each tile loads a block of whole rows and the row, and one vector instruction with the
broadcast flag (`bcast`, b read as one row for every row) combines them: VMIN/VMAX straight into int8, an Add
as VADD into the accumulator then VSUBI of the shared zero point (saturate(a + b - zero), as vector.py's).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from isa.config import ArchConfig

from ...errors import UnsupportedError
from .instructions import CONFIG_LOAD, CONFIG_STORE, LOAD, STORE, VADD, VSUBI, Op
from .pipeline import Step, Tile
from .tensors import DramTensor
from .vector import BINARY, CHUNK


def row_length(operand: tuple[int, ...], result: tuple[int, ...]) -> int | None:
    """R when `operand` is one row of the result's trailing dims (leading dims 1), repeated over its other rows."""
    padded = (1,) * (len(result) - len(operand)) + tuple(operand)
    if len(padded) != len(result):
        return None
    first = next((i for i, d in enumerate(padded) if d != 1), len(padded))
    if padded[first:] != tuple(result[first:]):
        return None
    return int(np.prod(padded[first:], dtype=np.int64))


@dataclass
class RowBroadcastLayer:
    op: str
    full: DramTensor
    row: DramTensor
    result: DramTensor
    zero: int = 0
    """Add: the shared zero point"""

    def tiles(self, base: Callable[[DramTensor], int], config: ArchConfig) -> list[Tile]:
        width = self.row.elements
        rows_total = self.result.elements // width
        budget = min(CHUNK, config.scratchpad_bytes // 6, config.accumulator_bytes // 8)
        rows = min(rows_total, max(1, budget // width), 65535)
        if 3 * rows * width > config.scratchpad_bytes // 2:
            raise UnsupportedError(f"a broadcast row of {width} elements does not fit the scratchpad")
        size = rows * width
        tiles = []
        for k, first in enumerate(range(0, rows_total, rows)):
            n = min(rows, rows_total - first)
            slot = (k % 2) * 3 * size
            a, b, out, acc = slot, slot + size, slot + 2 * size, (k % 2) * size
            flat = dict(row_stride=0, plane_stride=0, col_stride=0)
            loads: list[Op] = [
                CONFIG_LOAD(**flat, elem_bytes=n * width),
                LOAD(dram=base(self.full) + first * width, space="spad", sram=a, planes=1, rows=1, cols=1),
                CONFIG_LOAD(**flat, elem_bytes=width),
                LOAD(dram=base(self.row), space="spad", sram=b, planes=1, rows=1, cols=1)]
            shape = dict(rows=n, cols=width, bcast=1, src1_space="spad", src1=a, src2_space="spad", src2=b)
            if self.op == "Add":
                vector: list[Op] = [VADD(dst_space="acc", dst=acc, **shape),
                                      VSUBI(dst_space="spad", dst=out, src_space="acc", src=acc,
                                            count=n * width, imm=self.zero)]
            else:
                vector = [BINARY[self.op](dst_space="spad", dst=out, **shape)]
            stores: list[Op] = [CONFIG_STORE(**flat, elem_bytes=n * width),
                                  STORE(dram=base(self.result) + first * width, space="spad", sram=out,
                                        planes=1, rows=1, cols=1)]
            tiles.append(Tile([Step(loads)], vector, stores))
        return tiles
