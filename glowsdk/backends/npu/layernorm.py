"""The int8 LayerNorm layer (quant.IntegerLayerNorm) on the vector engine, bit-exact with layernorm_int8.py.

A tile is T groups (tokens) of D elements, loaded transposed into a D x T scratchpad block (one token per
column, by a strided LOAD), so that every per-token statistic is a row of T: REDUCE sums the columns (mean and
variance), VSUB and VDIV broadcast a row over the D rows, and Newton's square-root steps run on one row of T for
all the tile's tokens at once. Gamma and beta, per element, become D x T blocks in the accumulator by a LOAD
that repeats each value along its row (col_stride 0), once in the layer's prologue, with a row of T copies of D
for the divisions by D. REQUANT by 2^-shift gives the int8 result, stored back transposed.

Every tile has the same T (a divisor of the group count), so the prologue's blocks fit every tile. The strided
loads and stores move one byte per DRAM run: a LayerNorm layer is DRAM-bound (the report's bound column says
so), the price of having no transpose inside the SRAMs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from isa.config import ArchConfig

from ...errors import UnsupportedError
from ...graph.node import Node
from ...graph.nodes.layernorm_int8 import NEWTON_STEPS, NORM_BITS, ROOT_START, VAR_BITS
from .pipeline import Spec, Step, Tile
from .tensors import DramTensor

if TYPE_CHECKING:
    from .layers import LayerBuilder

MAX_LENGTH = 65535
"""The transposed load's col_stride (16 bits) is D."""
MAX_TOKENS = 4095
"""VDIV's 12-bit cols field is T."""


def tokens_per_tile(groups: int, length: int, config: ArchConfig) -> int:
    """The largest divisor T of `groups` whose buffers fit: the scratchpad two slots of 2 x D x T bytes, the
    accumulator the gamma and beta blocks, one row of D, and two slots of 2 x D x T + 4 x T words."""
    words = config.accumulator_bytes // 4
    best = 0
    for t in range(1, min(groups, MAX_TOKENS) + 1):
        if groups % t:
            continue
        if 2 * 2 * length * t <= config.scratchpad_bytes and 2 * length * t + t + 2 * (2 * length * t + 4 * t) <= words:
            best = t
    return best


def layernorm_limits(length: int) -> list[str]:
    return [f"a group of {length} elements > {MAX_LENGTH}"] if length > MAX_LENGTH else []


@dataclass
class LayerNormLayer:
    source: DramTensor
    result: DramTensor
    length: int
    gamma: DramTensor
    beta: DramTensor
    lengths: DramTensor
    """MAX_TOKENS-or-fewer int32 copies of D, among the constants"""
    epsilon: int
    shift: int
    zero: int
    tokens: int
    """T"""

    def _blocks(self) -> tuple[int, int, int]:
        """Accumulator word addresses of the gamma block, the beta block and the row of D."""
        block = self.length * self.tokens
        return 0, block, 2 * block

    def prologue(self, constants: int, base: Callable[[DramTensor], int]) -> list[Spec]:
        d, t = self.length, self.tokens
        gamma, beta, lengths = self._blocks()
        repeat = dict(row_stride=4, plane_stride=0, col_stride=0, elem_bytes=4)
        return [("CONFIG_LOAD", repeat),
                ("LOAD", dict(dram=base(self.gamma), space="acc", sram=gamma, planes=1, rows=d, cols=t)),
                ("LOAD", dict(dram=base(self.beta), space="acc", sram=beta, planes=1, rows=d, cols=t)),
                ("CONFIG_LOAD", dict(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=4 * t)),
                ("LOAD", dict(dram=base(self.lengths), space="acc", sram=lengths, planes=1, rows=1, cols=1))]

    def tiles(self, base: Callable[[DramTensor], int], config: ArchConfig) -> list[Tile]:
        d, t = self.length, self.tokens
        block = d * t
        gamma, beta, lengths = self._blocks()
        acc0 = 2 * block + t
        tiles = []
        for k, first in enumerate(range(0, self.source.elements // d, t)):
            slot = k % 2
            x, y = slot * 2 * block, slot * 2 * block + block
            diff = acc0 + slot * (2 * block + 4 * t)
            square, total, var, root, step = diff + block, diff + 2 * block, diff + 2 * block + t, \
                diff + 2 * block + 2 * t, diff + 2 * block + 3 * t
            transposed = dict(row_stride=1, plane_stride=0, col_stride=d, elem_bytes=1)
            loads: list[Spec] = [("CONFIG_LOAD", transposed), ("LOAD", dict(
                dram=base(self.source) + first * d, space="spad", sram=x, planes=1, rows=d, cols=t))]
            matrix, row = dict(rows=d, cols=t), dict(rows=1, cols=t)
            vector: list[Spec] = [
                ("REDUCE", dict(op="sum", accumulate=0, dst=total, src_space="spad", src=x, **matrix)),
                _div(total, total, lengths, row, 0, 0),                                   # mu
                ("VSUB", dict(dst_space="acc", dst=diff, src1_space="spad", src1=x, src2_space="acc", src2=total,
                              bcast=1, **matrix)),                                       # d = x - mu
                ("VMUL", dict(dst_space="acc", dst=square, src1_space="acc", src1=diff, src2_space="acc",
                              src2=diff, bcast=0, **matrix)),
                ("REDUCE", dict(op="sum", accumulate=0, dst=var, src_space="acc", src=square, **matrix)),
                _div(var, var, lengths, row, 0, VAR_BITS),                                # W
                _imm("VADDI", var, var, t, self.epsilon), _imm("VMAXI", var, var, t, 1),  # n
                _imm("VMULI", root, var, t, 0), _imm("VADDI", root, root, t, ROOT_START)]
            for _ in range(NEWTON_STEPS):  # r = min(r, (r + round(n / r)) >> 1)
                vector += [_div(step, var, root, row, 0, 0),
                           ("VADD", dict(dst_space="acc", dst=step, src1_space="acc", src1=step, src2_space="acc",
                                         src2=root, bcast=0, **row)),
                           _imm("VSHRI", step, step, t, 1),
                           ("VMIN", dict(dst_space="acc", dst=root, src1_space="acc", src1=root, src2_space="acc",
                                         src2=step, bcast=0, **row))]
            vector += [
                _div(diff, diff, root, matrix, 1, VAR_BITS // 2 + NORM_BITS),             # q
                ("VMUL", dict(dst_space="acc", dst=diff, src1_space="acc", src1=diff, src2_space="acc", src2=gamma,
                              bcast=0, **matrix)),
                ("VADD", dict(dst_space="acc", dst=diff, src1_space="acc", src1=diff, src2_space="acc", src2=beta,
                              bcast=0, **matrix)),
                ("CONFIG_REQUANT", dict(multiplier=1 << 30, shift=self.shift - 1, zero_point=self.zero,
                                        clamp_lo=-128, clamp_hi=127, per_channel=0, table=0, bias_row=0, bias=0)),
                ("REQUANT", dict(dst=y, src=diff, **matrix))]
            stores: list[Spec] = [("CONFIG_STORE", transposed), ("STORE", dict(
                dram=base(self.result) + first * d, space="spad", sram=y, planes=1, rows=d, cols=t))]
            tiles.append(Tile([Step(loads)], vector, stores))
        return tiles


def _div(dst: int, src1: int, src2: int, shape: dict, bcast: int, shift: int) -> Spec:
    return ("VDIV", dict(dst_space="acc", dst=dst, src1_space="acc", src1=src1, src2_space="acc", src2=src2,
                         bcast=bcast, shift=shift, **shape))


def _imm(mnemonic: str, dst: int, src: int, count: int, imm: int) -> Spec:
    return (mnemonic, dict(dst_space="acc", dst=dst, src_space="acc", src=src, count=count, imm=imm))


def layernorm_layer(builder: LayerBuilder, node: Node) -> LayerNormLayer:
    d = node.input.type.shape[-1]
    source = builder.laid_out(node.input, nhwc=False)
    groups = source.elements // d
    tokens = tokens_per_tile(groups, d, builder.config)
    if not tokens:
        raise UnsupportedError(f"IntegerLayerNorm '{node.name}': a group of {d} elements does not fit the "
                               f"'{builder.config.name}' configuration's SRAMs")
    out = builder._new(node.result())
    builder.values[node.result()] = out
    lengths = DramTensor(f"{node.name}/lengths", (tokens,), (4,), "constants",
                         builder.add_constant((d).to_bytes(4, "little") * tokens), itemsize=4)
    gamma, beta = (DramTensor(f"{node.name}/{what}", (d,), (4,), "constants", builder.add_constant(
        np.asarray(value.node.value).astype("<i4").tobytes()), itemsize=4)
        for what, value in (("gamma", node.gamma), ("beta", node.beta)))
    return LayerNormLayer(source, out, d, gamma, beta, lengths, node.epsilon, node.shift, int(node.type.offset),
                          tokens)
