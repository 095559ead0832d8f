"""The product of two int8 activations on the array: attention's Q.K^T and P.V, batched over heads.

`MatMul(a, b) -> Rescale` with both operands computed at run time, a: [..., M, K], b: [..., K, N] (the same
leading dims), int8 with zero points za, zb, into int32 exactly as the reference evaluator computes it:
C = sum_k (a - za)(b - zb) = sum ab - zb sum_k a - za sum_k b + K za zb. The array multiplies raw int8, so
the zero points are folded with two tricks that keep every operand int8:

* a row of za is placed under the P rows of a's tile (A' = [A; za], P + 1 rows): row P of A'.B is
  za sum_k b, the column term;
* a K x N block filled with -zb (two blocks, 127 and 1, when zb = -128) is multiplied by A' into the same
  accumulator (acc_mode 1): rows 0..P-1 gain -zb sum_k a, row P gains -K za zb.

The vector engine then subtracts row P from every row (VSUB with a broadcast row) and REQUANTs the P x N
result to int8. The operands are loaded straight from their DRAM views by strided DMA: a Transpose in front
of the product (K^T) is never copied, its permuted strides are the load pattern. One tile is a batch
index, a block of P rows and a block of N columns; tiles alternate between two slots (pipeline.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import TYPE_CHECKING, Callable

import numpy as np

from isa.config import ArchConfig
from isa.roofline import Workload

from ...errors import UnsupportedError
from ...graph.node import Node
from .gemm import Requant, best_dataflow
from .instructions import (CONFIG_LOAD, CONFIG_MATMUL, CONFIG_REQUANT, CONFIG_STORE, LOAD, MATMUL, REQUANT, STORE, VSUB,
                           Op)
from .pipeline import Step, Tile
from .scratchpad import align
from .tensors import DramTensor

if TYPE_CHECKING:
    from .layers import LayerBuilder

MAX_K, MAX_N, MAX_ROWS = 8191, 4095, 65535
"""MATMUL's k (13 bits), n (12 bits) and rows (16 bits) fields."""
MAX_COL_STRIDE = 65535
"""CONFIG_LOAD's 16-bit col_stride: a transposed operand's element stride."""


def zero_fills(zb: int) -> list[int]:
    """int8 values summing to -zb: the weight blocks that fold b's zero point."""
    if zb == 0:
        return []
    return [127, 1] if zb == -128 else [-zb]


def plan_block(m: int, k: int, n: int, fills: int, config: ArchConfig) -> tuple[int, int] | None:
    """The largest (rows, cols) tile of the M x N result whose buffers fit twice in the SRAMs, or None."""
    cols = min(n, MAX_N)
    while cols >= 1:
        rows = min(m, MAX_ROWS - 1)
        while rows >= 1:
            spad = fills * align(k * cols) + 2 * (align((rows + 1) * k) + align(k * cols) + align(rows * cols))
            acc = 2 * (rows + 1) * cols * 4
            if spad <= config.scratchpad_bytes and acc <= config.accumulator_bytes:
                return rows, cols
            rows = rows // 2 if rows > 1 else 0
        cols //= 2
    return None


def bmm_limits(lhs: tuple[int, ...], rhs: tuple[int, ...]) -> list[str]:
    """What the array cannot do for a product of two run-time operands of these shapes."""
    problems = []
    if len(lhs) < 2 or len(lhs) != len(rhs) or tuple(lhs[:-2]) != tuple(rhs[:-2]):
        problems.append(f"operands of shapes {list(lhs)} and {list(rhs)} (the NPU multiplies run-time operands "
                        f"of one batch shape, no broadcasting)")
    elif lhs[-1] > MAX_K:
        problems.append(f"a reduction of {lhs[-1]} > {MAX_K}")
    return problems


def _box(view: DramTensor, inner: int) -> dict[str, int]:
    """CONFIG_LOAD/STORE fields moving a 2-D block (rows, `inner` elements) of `view`'s last two dims."""
    row_stride, col_stride = view.strides[-2], view.strides[-1]
    if col_stride == 1 or inner == 1:
        return dict(row_stride=row_stride, plane_stride=0, col_stride=0, elem_bytes=inner)
    if col_stride > MAX_COL_STRIDE:
        raise UnsupportedError(f"'{view.name}': an element stride of {col_stride} bytes > {MAX_COL_STRIDE}")
    return dict(row_stride=row_stride, plane_stride=0, col_stride=col_stride, elem_bytes=1)


def _cols(box: dict[str, int], inner: int) -> int:
    return 1 if box["elem_bytes"] == inner else inner


@dataclass
class BatchMatMulLayer:
    """a . b -> int8, both operands DRAM views read in place; `tiles` makes the instructions."""

    lhs: DramTensor
    rhs: DramTensor
    result: DramTensor
    lhs_zero: int
    fills: list[int]
    requant: Requant
    zero_row: int
    """constants offset of K bytes of za"""
    fill_blocks: list[int]
    """constants offsets of the K x N blocks of each fill value"""
    block: tuple[int, int]

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.lhs.shape[-2], self.lhs.shape[-1], self.rhs.shape[-1]

    def workload(self) -> Workload:
        """The product's MACs (the zero-point folding's are the schedule's, not the problem's), its operands
        once, its result once, and the constants it reads (the za row, the fill blocks)."""
        m, k, n = self.shape
        batch = self.result.elements // (m * n)
        constants = (k if self.lhs_zero else 0) + len(self.fills) * k * self.block[1]
        return Workload(batch * m * k * n, "array", constants, self.lhs.elements + self.rhs.elements,
                        self.result.elements)

    def prologue(self, constants: int) -> list[Op]:
        """The fill blocks, once, at the bottom of the scratchpad."""
        size = self.shape[1] * self.block[1]
        return [spec for f, offset in enumerate(self.fill_blocks) for spec in (
            CONFIG_LOAD(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=size),
            LOAD(dram=constants + offset, space="spad", sram=f * align(size), planes=1, rows=1,
                 cols=1))]

    def tiles(self, base: Callable[[DramTensor], int], constants: int,
              config: ArchConfig) -> tuple[list[Tile], Op]:
        m, k, n = self.shape
        rows, cols = self.block
        fill_base = [f * align(k * cols) for f in range(len(self.fills))]
        slot0 = len(self.fills) * align(k * cols)
        a_bytes, b_bytes, out_bytes = align((rows + 1) * k), align(k * cols), align(rows * cols)
        slot = [slot0 + s * (a_bytes + b_bytes + out_bytes) for s in (0, 1)]
        accs = [s * (rows + 1) * cols for s in (0, 1)]
        folded = self.lhs_zero != 0
        r = self.requant
        requant = CONFIG_REQUANT(multiplier=int(r.multipliers[0]), shift=int(r.shifts[0]),
                                 zero_point=r.zero, clamp_lo=-128, clamp_hi=127, per_channel=0, table=0,
                                 bias_row=0, bias=0)
        tiles: list[Tile] = []
        config_mm: Op | None = None
        for index in product(*(range(d) for d in self.result.shape[:-2])):
            offsets = [base(t) + sum(i * s for i, s in zip(index, t.strides)) for t in (self.lhs, self.rhs,
                                                                                     self.result)]
            for m0 in range(0, m, rows):
                p = min(rows, m - m0)
                for n0 in range(0, n, cols):
                    c = min(cols, n - n0)
                    s = len(tiles) % 2
                    a, b, out = slot[s], slot[s] + a_bytes, slot[s] + a_bytes + b_bytes
                    a_box, b_box = _box(self.lhs, k), _box(self.rhs, c)
                    loads: list[Op] = [
                        CONFIG_LOAD(**a_box),
                        LOAD(dram=offsets[0] + m0 * self.lhs.strides[-2], space="spad", sram=a, planes=1,
                             rows=p, cols=_cols(a_box, k)),
                        CONFIG_LOAD(**b_box),
                        LOAD(dram=offsets[1] + n0 * self.rhs.strides[-1], space="spad", sram=b, planes=1,
                             rows=k, cols=_cols(b_box, c))]
                    if folded:
                        loads += [CONFIG_LOAD(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=k),
                                  LOAD(dram=constants + self.zero_row, space="spad", sram=a + p * k,
                                       planes=1, rows=1, cols=1)]
                    a_rows = p + folded
                    config_mm = CONFIG_MATMUL(dataflow=best_dataflow(a_rows, k, c, config), im2col=0,
                                              out_w=1, channels=1, kw=1, stride_h=1, stride_w=1, dil_h=1,
                                              dil_w=1, row_pitch=0, pixel_pitch=0)
                    matmuls: list[Op] = [config_mm, MATMUL(inp=a, wgt=b, acc=accs[s], rows=a_rows, k=k,
                                                           n=c, acc_mode=0)]
                    matmuls += [MATMUL(inp=a, wgt=w, acc=accs[s], rows=a_rows, k=k, n=c, acc_mode=1)
                                for w in fill_base]
                    vector: list[Op] = []
                    if folded:
                        vector.append(VSUB(dst_space="acc", dst=accs[s], src1_space="acc", src1=accs[s],
                                           src2_space="acc", src2=accs[s] + p * c, rows=p, cols=c,
                                           bcast=1))
                    vector += [requant, REQUANT(dst=out, src=accs[s], rows=p, cols=c)]
                    out_box = _box(self.result, c)
                    stores: list[Op] = [
                        CONFIG_STORE(**out_box),
                        STORE(dram=offsets[2] + m0 * self.result.strides[-2] + n0, space="spad", sram=out,
                              planes=1, rows=p, cols=_cols(out_box, c))]
                    tiles.append(Tile([Step(loads, matmuls)], vector, stores))
        return tiles, config_mm


def bmm_layer(builder: LayerBuilder, node: Node, rescale: Node, requant: Requant) -> BatchMatMulLayer:
    """The layer of `node` (a MatMul of two int8 activations) and its Rescale, operands read in place."""
    lhs, rhs = builder.tensor(node.lhs), builder.tensor(node.rhs)
    za, zb = lhs.zero, rhs.zero
    m, k = node.lhs.type.shape[-2:]
    n = node.rhs.type.shape[-1]
    fills = zero_fills(zb)
    block = plan_block(m, k, n, len(fills), builder.config)
    if block is None:
        raise UnsupportedError(f"MatMul '{node.name}': a {k}-deep product does not fit the SRAMs")
    out = builder._new(rescale.result())
    builder.values[rescale.result()] = out
    size = k * block[1]
    zero_row = builder.add_constant(np.full(k, za, np.int8).tobytes()) if za else 0
    fill_blocks = [builder.add_constant(np.full(size, f, np.int8).tobytes()) for f in fills]
    return BatchMatMulLayer(lhs, rhs, out, za, fills, requant, zero_row, fill_blocks, block)
