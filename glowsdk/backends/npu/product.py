"""The element-wise product of two int8 tensors computed at run time: a recurrent cell's gates (i * g, f * c).

`Rescale(Mul(a, b))` with a and b of one shape: the quantizer's exact int32 product (q_a - z_a)(q_b - z_b),
then one requantization. Both operands stream in flat chunks of one layout (vector.py's chunks): VSUBI each zero
point into the accumulator (|q - z| <= 255), VMUL the two (exact: below 2^17), REQUANT to the result's type.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from isa.config import ArchConfig

from .gemm import Requant
from .instructions import CONFIG_LOAD, CONFIG_REQUANT, CONFIG_STORE, LOAD, REQUANT, STORE, VMUL, VSUBI, Op
from .pipeline import Step, Tile
from .tensors import DramTensor
from .vector import CHUNK


@dataclass
class ProductLayer:
    lhs: DramTensor
    rhs: DramTensor
    result: DramTensor
    zeros: tuple[int, int]
    requant: Requant

    def tiles(self, base: Callable[[DramTensor], int], config: ArchConfig) -> list[Tile]:
        if not (self.lhs.same_layout(self.result) and self.rhs.same_layout(self.result)):
            raise AssertionError("a product streams operands of one layout")
        chunk = max(64, min(CHUNK, config.scratchpad_bytes // 6, config.accumulator_bytes // 16) // 64 * 64)
        total = self.result.elements
        r = self.requant
        tiles = []
        for k, start in enumerate(range(0, total, chunk)):
            n = min(chunk, total - start)
            slot = (k % 2) * 3 * chunk
            a, b, out = slot, slot + chunk, slot + 2 * chunk
            acc_a, acc_b = (k % 2) * 2 * chunk, (k % 2) * 2 * chunk + chunk
            flat = dict(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=n)
            loads: list[Op] = [CONFIG_LOAD(**flat)] + [
                LOAD(dram=base(t) + start, space="spad", sram=at, planes=1, rows=1, cols=1)
                for t, at in ((self.lhs, a), (self.rhs, b))]
            vector: list[Op] = [
                VSUBI(dst_space="acc", dst=acc_a, src_space="spad", src=a, count=n, imm=self.zeros[0]),
                VSUBI(dst_space="acc", dst=acc_b, src_space="spad", src=b, count=n, imm=self.zeros[1]),
                VMUL(dst_space="acc", dst=acc_a, src1_space="acc", src1=acc_a, src2_space="acc", src2=acc_b,
                     rows=1, cols=n, bcast=0),
                CONFIG_REQUANT(multiplier=int(r.multipliers[0]), shift=int(r.shifts[0]), zero_point=r.zero,
                               clamp_lo=-128, clamp_hi=127, per_channel=0, table=0, bias_row=0, bias=0),
                REQUANT(dst=out, src=acc_a, rows=1, cols=n)]
            stores: list[Op] = [CONFIG_STORE(**flat), STORE(dram=base(self.result) + start, space="spad",
                                                            sram=out, planes=1, rows=1, cols=1)]
            tiles.append(Tile([Step(loads)], vector, stores))
        return tiles
