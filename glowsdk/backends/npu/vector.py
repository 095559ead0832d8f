"""Vector-engine layers: element-wise Add/Max/Min and Rescale of int8 tensors, max and average pooling.

Element-wise layers stream flat chunks of tensors that share one layout (NHWC or row-major), so
the chunks line up element for element. Same-type Add is `saturate(a + b - zp)`: VADD into the
accumulator (exact in int32), then VSUBI back to int8, which saturates. A Rescale from int8 subtracts
the input zero point into the accumulator and REQUANTs with the output's. Pooling tiles over output
rows (and channels when a row is too wide), each tile's window padding set by its own CONFIG_POOL; a
scratchpad slot's input and output buffers sit at fixed offsets, whatever the tile's padding. A Rescale
that is a pool's only reader (the rescale of a ShuffleNet shortcut into its Concat's scale) is a table the
pool's tiles look their result up in (LUT), so its image never reaches DRAM.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from isa.config import ArchConfig
from isa.program import LUT_BYTES

from ...errors import UnsupportedError
from .instructions import (CONFIG_LOAD, CONFIG_POOL, CONFIG_REQUANT, CONFIG_STORE, LOAD, LUT, LUT_LOAD, POOL, REQUANT,
                           STORE, VADD, VADDI, VMAX, VMIN, VSUB, VSUBI, Op)
from .pipeline import Step, Tile
from .tensors import DramTensor
from .tile_loads import Image

CHUNK = 32768
PIPELINE_TILES = 4
"""A pool's image in at least this many row tiles: one tile's load, pooling and store overlap the others'."""

BINARY: dict[str, Callable[..., Op]] = {"Add": VADD, "Sub": VSUB, "Max": VMAX, "Min": VMIN}
"""The vector instruction of each element-wise graph op (broadcast.py's too)."""


def _slots(config: ArchConfig, buffers: int, acc_per_byte: int) -> int:
    """Bytes per chunk so that `buffers` int8 buffers and an int32 temporary fit twice in the SRAMs."""
    spad = config.scratchpad_bytes // (2 * buffers)
    acc = config.accumulator_bytes // (2 * 4) if acc_per_byte else CHUNK
    return max(64, min(CHUNK, spad, acc) // 64 * 64)


def _flat(tensor: DramTensor) -> bool:
    return tensor.extent == tensor.elements


def check_requant(multiplier: int, shift: int, what: str) -> None:
    if not -31 <= shift <= 31:
        raise UnsupportedError(f"{what}: requantize factor {multiplier} * 2^-(31 + {shift}) is outside the NPU's "
                               f"shift range -31..31")


@dataclass
class ElementwiseLayer:
    """Add, Max, Min (two int8 operands, one type) or Rescale (one operand) over flat chunks."""

    op: str
    operands: list[DramTensor]
    result: DramTensor
    zero: int = 0
    """Add: the shared zero point; Rescale: the input zero point"""
    requant: tuple[int, int, int] = (0, 0, 0)
    """Rescale: multiplier, shift, output zero point"""

    def tiles(self, base: Callable[[DramTensor], int], config: ArchConfig) -> list[Tile]:
        if not all(_flat(t) and t.same_layout(self.result) for t in (*self.operands, self.result)):
            raise AssertionError("element-wise operands must share one compact layout")
        chunk = _slots(config, len(self.operands) + 1, self.op in ("Add", "Sub", "Rescale"))
        slot_bytes = chunk * (len(self.operands) + 1)
        total = self.result.elements
        tiles = []
        for k, start in enumerate(range(0, total, chunk)):
            n = min(chunk, total - start)
            sram = (k % 2) * slot_bytes
            acc = (k % 2) * chunk
            ins = [sram + i * chunk for i in range(len(self.operands))]
            out = sram + len(self.operands) * chunk
            loads: list[Op] = [CONFIG_LOAD(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=n)]
            loads += [LOAD(dram=base(t) + start, space="spad", sram=a, planes=1, rows=1, cols=1)
                      for t, a in zip(self.operands, ins)]
            stores = [CONFIG_STORE(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=n),
                      STORE(dram=base(self.result) + start, space="spad", sram=out, planes=1, rows=1,
                            cols=1)]
            tiles.append(Tile([Step(loads)], self._vector(ins, out, acc, n), stores))
        return tiles

    def spad_end(self, config: ArchConfig) -> int:
        """The end of the scratchpad the layer's tiles use (`tiles`: one slot per tile, two at most), so that a
        convolution before it may load the first weights of the convolution after it above it (prefetch.py)."""
        chunk = _slots(config, len(self.operands) + 1, self.op in ("Add", "Sub", "Rescale"))
        return min(2, -(-self.result.elements // chunk)) * chunk * (len(self.operands) + 1)

    def _vector(self, ins: list[int], out: int, acc: int, n: int) -> list[Op]:
        if self.op in ("Add", "Sub"):  # saturate(a +- b -+ zero): exact in the accumulator, saturated back
            return [BINARY[self.op](dst_space="acc", dst=acc, src1_space="spad", src1=ins[0], src2_space="spad",
                                    src2=ins[1], rows=1, cols=n, bcast=0),
                    (VSUBI if self.op == "Add" else VADDI)(dst_space="spad", dst=out, src_space="acc", src=acc,
                                                           count=n, imm=self.zero)]
        if self.op in ("Max", "Min"):
            return [BINARY[self.op](dst_space="spad", dst=out, src1_space="spad", src1=ins[0], src2_space="spad",
                                    src2=ins[1], rows=1, cols=n, bcast=0)]
        multiplier, shift, zero = self.requant
        return [VSUBI(dst_space="acc", dst=acc, src_space="spad", src=ins[0], count=n, imm=self.zero),
                CONFIG_REQUANT(multiplier=multiplier, shift=shift, zero_point=zero, clamp_lo=-128,
                               clamp_hi=127, per_channel=0, table=0, bias_row=0, bias=0),
                REQUANT(dst=out, src=acc, rows=1, cols=n)]


@dataclass
class PoolLayer:
    """MaxPool or AveragePool of an NHWC int8 image."""

    op: str
    source: Image
    result: Image
    channels: int
    height: int
    width: int
    out_height: int
    out_width: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    count_pad: bool
    zero: int
    table: DramTensor | None = None
    """a 256-entry int8 table (among the constants) every pooled value is looked up in: a Rescale after the pool"""

    def prologue(self, base: Callable[[DramTensor], int], config: ArchConfig) -> list[Op]:
        """The table into the scratchpad above both slots (nothing without one)."""
        if self.table is None:
            return []
        return [CONFIG_LOAD(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=LUT_BYTES),
                LOAD(dram=base(self.table), space="spad", sram=self._table_at(config), planes=1, rows=1, cols=1)]

    def _table_at(self, config: ArchConfig) -> int:
        return 2 * (config.scratchpad_bytes // 4)

    def tiles(self, base: Callable[[DramTensor], int], config: ArchConfig) -> list[Tile]:
        (kh, kw), (sh, sw) = self.kernel, self.stride
        budget = config.scratchpad_bytes // 4
        c = self.channels
        while c > 1 and (kh * self.width + self.out_width) * c > budget:
            c = -(-c // 2)
        rows, most = 1, -(-self.out_height // PIPELINE_TILES)
        while rows < most and ((rows * sh + kh) * self.width + (rows + 1) * self.out_width) * c <= budget:
            rows += 1
        if (((rows - 1) * sh + kh) * self.width + rows * self.out_width) * c > budget:
            raise UnsupportedError(f"a {kh}x{kw} pool over {self.width}-pixel rows does not fit the scratchpad")
        src, dst = self.source, self.result
        # A slot holds the input rows of the tallest tile, then the output: the same offsets for every tile,
        # so the next load into the slot (which waits only for the POOL) never reaches the output that the
        # slot's STORE may still be reading.
        in_bytes = min((rows - 1) * sh + kh, self.height) * self.width * c
        tiles = []
        for b in range(src.batch):
            for oy0 in range(0, self.out_height, rows):
                oy1 = min(self.out_height, oy0 + rows)
                first = oy0 * sh - self.pads[0]
                last = first + (oy1 - oy0 - 1) * sh + kh - 1
                y0, y1 = max(first, 0), min(last, self.height - 1)
                for c0 in range(0, self.channels, c):
                    n = min(c, self.channels - c0)
                    sram = (len(tiles) % 2) * budget
                    out = sram + in_bytes
                    loads: list[Op] = [
                        CONFIG_LOAD(row_stride=src.row_stride, plane_stride=0, col_stride=src.pixel_stride,
                                    elem_bytes=n),
                        LOAD(dram=base(src.tensor) + b * src.batch_stride + y0 * src.row_stride + c0,
                             space="spad", sram=sram, planes=1, rows=y1 - y0 + 1, cols=self.width)]
                    vector = [CONFIG_POOL(kh=kh, kw=kw, stride_h=sh, stride_w=sw, pad_top=y0 - first,
                                          pad_bottom=last - y1, pad_left=self.pads[1],
                                          pad_right=self.pads[3], count_pad=int(self.count_pad),
                                          pad_value=self.zero),
                              POOL(op="max" if self.op == "MaxPool" else "avg", dst=out, src=sram,
                                   height=y1 - y0 + 1, width=self.width, channels=n)]
                    if self.table is not None:
                        vector += [LUT_LOAD(src=self._table_at(config)),
                                   LUT(dst=out, src=out, count=(oy1 - oy0) * self.out_width * n)]
                    stores = [CONFIG_STORE(row_stride=dst.row_stride, plane_stride=0,
                                           col_stride=dst.pixel_stride, elem_bytes=n),
                              STORE(dram=base(dst.tensor) + b * dst.batch_stride + oy0 * dst.row_stride + c0,
                                    space="spad", sram=out, planes=1, rows=oy1 - oy0, cols=self.out_width)]
                    tiles.append(Tile([Step(loads)], vector, stores))
        return tiles
