"""The int8 LayerNorm layer (quant.IntegerLayerNorm) on the vector engine, bit-exact with layernorm_int8.py.

A tile is T groups (tokens) of D elements, loaded as they lie (T x D, one DRAM run) and transposed on the array
into a D x T accumulator block (one token per column): a MATMUL by the T x T identity whose im2col window reads
the tile column by column (out_w = D, row pitch D, pixel pitch 1). Every per-token statistic is then a row of T:
REDUCE sums the columns (mean and variance), VSUB and VDIV broadcast a row over the D rows, and Newton's square-
root steps run on one row of T for all the tile's tokens at once. Gamma and beta, per element, are D x T blocks
among the constants (each value repeated along its row), loaded into the accumulator once, in the layer's
prologue, with a row of T copies of D for the divisions by D. REQUANT by 2^-shift gives the int8 result; a
TransposeLayer turns its D x T blocks back into rows on the array (a MATMUL by the D x D identity, the same
im2col trick) where the identity fits.

Every tile has the same T (a divisor of the group count), so the prologue's blocks fit every tile. Where the
D x D identity does not fit the scratchpad, the result is stored transposed by a strided STORE instead, one
byte per DRAM run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from isa.config import ArchConfig

from ...errors import UnsupportedError
from ...graph.node import Node
from ...graph.nodes.layernorm_int8 import NEWTON_STEPS, NORM_BITS, ROOT_START, VAR_BITS
from .gemm import best_dataflow
from .instructions import (CONFIG_LOAD, CONFIG_MATMUL, CONFIG_REQUANT, CONFIG_STORE, LOAD, MATMUL, REDUCE, REQUANT,
                           STORE, VADD, VADDI, VDIV, VMAXI, VMIN, VMUL, VMULI, VSHRI, VSUB, Op)
from .pipeline import Step, Tile
from .scratchpad import align
from .tensors import DramTensor

if TYPE_CHECKING:
    from .layers import LayerBuilder

MAX_LENGTH = 65535
"""The transposed load's col_stride (16 bits) is D."""
MAX_TOKENS = 4095
"""VDIV's 12-bit cols field is T."""
MAX_ELEM = 65535
"""A DMA element's 16-bit elem_bytes field."""


def tokens_per_tile(groups: int, length: int, config: ArchConfig) -> int:
    """The largest divisor T of `groups` whose buffers fit: the scratchpad two slots of 2 x D x T bytes, the
    accumulator the gamma and beta blocks, one row of D, and two slots of 2 x D x T + 4 x T words."""
    words = config.accumulator_bytes // 4
    best = 0
    for t in range(1, min(groups, MAX_TOKENS) + 1):
        if groups % t:
            continue
        if t * t + 2 * 2 * length * t + 128 <= config.scratchpad_bytes and \
                2 * length * t + t + 2 * (2 * length * t + 4 * t) <= words:
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
    identity: DramTensor
    """the T x T int8 identity the array transposes a tile with"""
    epsilon: int
    shift: int
    zero: int
    tokens: int
    """T"""
    blocks: bool = False
    """store each tile's D x T result as it is (one DRAM run) for a TransposeLayer, not transposed byte by byte"""

    def _blocks(self) -> tuple[int, int, int]:
        """Accumulator word addresses of the gamma block, the beta block and the row of D."""
        block = self.length * self.tokens
        return 0, block, 2 * block

    def prologue(self, constants: int, base: Callable[[DramTensor], int]) -> list[Op]:
        d, t = self.length, self.tokens
        gamma, beta, lengths = self._blocks()
        rows = dict(row_stride=4 * t, plane_stride=0, col_stride=0, elem_bytes=4 * t)
        return [CONFIG_LOAD(**rows),
                LOAD(dram=base(self.gamma), space="acc", sram=gamma, planes=1, rows=d, cols=1),
                LOAD(dram=base(self.beta), space="acc", sram=beta, planes=1, rows=d, cols=1),
                CONFIG_LOAD(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=4 * t),
                LOAD(dram=base(self.lengths), space="acc", sram=lengths, planes=1, rows=1, cols=1),
                *_dense(LOAD, base(self.identity), "spad", 0, t * t, t)]

    def tiles(self, base: Callable[[DramTensor], int], config: ArchConfig) -> tuple[list[Tile], Op]:
        d, t = self.length, self.tokens
        block = d * t
        gamma, beta, lengths = self._blocks()
        acc0 = 2 * block + t
        spad0 = align(t * t)
        transpose = CONFIG_MATMUL(dataflow=best_dataflow(d, t, t, config), im2col=1, out_w=d, channels=1,
                                  kw=1, stride_h=1, stride_w=1, dil_h=1, dil_w=1, row_pitch=d,
                                  pixel_pitch=1)
        tiles = []
        for k, first in enumerate(range(0, self.source.elements // d, t)):
            slot = k % 2
            x, y = spad0 + slot * 2 * block, spad0 + slot * 2 * block + block
            diff = acc0 + slot * (2 * block + 4 * t)
            square, total, var, root, step = diff + block, diff + 2 * block, diff + 2 * block + t, \
                diff + 2 * block + 2 * t, diff + 2 * block + 3 * t
            loads = _dense(LOAD, base(self.source) + first * d, "spad", x, block, d)
            # column j of the T x D tile times the identity: the D x T block, token j in column j
            matmuls: list[Op] = [transpose, MATMUL(inp=x, wgt=0, acc=square, rows=d, k=t, n=t,
                                                   acc_mode=0)]
            matrix, row = dict(rows=d, cols=t), dict(rows=1, cols=t)
            vector: list[Op] = [
                REDUCE(op="sum", accumulate=0, dst=total, src_space="acc", src=square, **matrix),
                _div(total, total, lengths, row, 0, 0),                                   # mu
                VSUB(dst_space="acc", dst=diff, src1_space="acc", src1=square, src2_space="acc",
                     src2=total, bcast=1, **matrix),                           # d = x - mu
                VMUL(dst_space="acc", dst=square, src1_space="acc", src1=diff, src2_space="acc",
                     src2=diff, bcast=0, **matrix),
                REDUCE(op="sum", accumulate=0, dst=var, src_space="acc", src=square, **matrix),
                _div(var, var, lengths, row, 0, VAR_BITS),                                # W
                _imm(VADDI, var, var, t, self.epsilon), _imm(VMAXI, var, var, t, 1),  # n
                _imm(VMULI, root, var, t, 0), _imm(VADDI, root, root, t, ROOT_START)]
            for _ in range(NEWTON_STEPS):  # r = min(r, (r + round(n / r)) >> 1)
                vector += [_div(step, var, root, row, 0, 0),
                           VADD(dst_space="acc", dst=step, src1_space="acc", src1=step, src2_space="acc",
                                src2=root, bcast=0, **row),
                           _imm(VSHRI, step, step, t, 1),
                           VMIN(dst_space="acc", dst=root, src1_space="acc", src1=root, src2_space="acc",
                                src2=step, bcast=0, **row)]
            vector += [
                _div(diff, diff, root, matrix, 1, VAR_BITS // 2 + NORM_BITS),             # q
                VMUL(dst_space="acc", dst=diff, src1_space="acc", src1=diff, src2_space="acc", src2=gamma,
                     bcast=0, **matrix),
                VADD(dst_space="acc", dst=diff, src1_space="acc", src1=diff, src2_space="acc", src2=beta,
                     bcast=0, **matrix),
                CONFIG_REQUANT(multiplier=1 << 30, shift=self.shift - 1, zero_point=self.zero,
                               clamp_lo=-128, clamp_hi=127, per_channel=0, table=0, bias_row=0, bias=0),
                REQUANT(dst=y, src=diff, **matrix)]
            if self.blocks:
                stores = _dense(STORE, base(self.result) + first * d, "spad", y, block, t)
            else:
                transposed = dict(row_stride=1, plane_stride=0, col_stride=d, elem_bytes=1)
                stores = [CONFIG_STORE(**transposed), STORE(
                    dram=base(self.result) + first * d, space="spad", sram=y, planes=1, rows=d, cols=t)]
            tiles.append(Tile([Step(loads, matmuls)], vector, stores))
        return tiles, transpose


@dataclass
class TransposeLayer:
    """D x T blocks of int8 (a LayerNorm's tiles, token j in column j) back to T x D rows, on the array: a MATMUL by
    the D x D identity whose im2col window reads each block column by column, then VADDI to int8 (exact)."""

    source: DramTensor
    result: DramTensor
    length: int
    tokens: int
    identity: DramTensor

    def prologue(self, base: Callable[[DramTensor], int]) -> list[Op]:
        return _dense(LOAD, base(self.identity), "spad", 0, self.length ** 2, self.length)

    def tiles(self, base: Callable[[DramTensor], int], config: ArchConfig) -> tuple[list[Tile], Op]:
        d, t = self.length, self.tokens
        block = d * t
        spad0 = align(d * d)
        transpose = CONFIG_MATMUL(dataflow=best_dataflow(t, d, d, config), im2col=1, out_w=t, channels=1,
                                  kw=1, stride_h=1, stride_w=1, dil_h=1, dil_w=1, row_pitch=t,
                                  pixel_pitch=1)
        tiles = []
        for k, first in enumerate(range(0, self.source.elements // d, t)):
            slot = k % 2
            x, y, acc = spad0 + slot * 2 * block, spad0 + slot * 2 * block + block, slot * block
            loads = _dense(LOAD, base(self.source) + first * d, "spad", x, block, t)
            matmuls: list[Op] = [transpose, MATMUL(inp=x, wgt=0, acc=acc, rows=t, k=d, n=d, acc_mode=0)]
            vector: list[Op] = [VADDI(dst_space="spad", dst=y, src_space="acc", src=acc, count=block,
                                      imm=0)]
            stores = _dense(STORE, base(self.result) + first * d, "spad", y, block, d)
            tiles.append(Tile([Step(loads, matmuls)], vector, stores))
        return tiles, transpose


def _transposes(length: int, tokens: int, config: ArchConfig) -> bool:
    """Whether the D x D identity and two slots of (block in, block out) fit the scratchpad, and the accumulator two
    T x D blocks, for a TransposeLayer."""
    block = length * tokens
    return (length <= MAX_TOKENS and length * length + 4 * block + 64 <= config.scratchpad_bytes
            and 2 * block * 4 <= config.accumulator_bytes)


def _div(dst: int, src1: int, src2: int, shape: dict, bcast: int, shift: int) -> Op:
    return VDIV(dst_space="acc", dst=dst, src1_space="acc", src1=src1, src2_space="acc", src2=src2,
                bcast=bcast, shift=shift, **shape)


def _imm(op: Callable[..., Op], dst: int, src: int, count: int, imm: int) -> Op:
    return op(dst_space="acc", dst=dst, src_space="acc", src=src, count=count, imm=imm)


_CONFIG = {LOAD: CONFIG_LOAD, STORE: CONFIG_STORE}
"""The DMA configuration instruction of each transfer."""


def _dense(move: Callable[..., Op], dram: int, space: str, sram: int, size: int, row: int) -> list[Op]:
    """CONFIG_LOAD/STORE and the LOAD/STORE moving `size` contiguous bytes between DRAM and a dense SRAM image, as
    one element where it fits elem_bytes' 16 bits, else as rows of a multiple of `row` bytes (a divisor of `size`
    within the field) one after another in DRAM: the same bytes, the same single DRAM run."""
    elem = size
    if size > MAX_ELEM:
        count = size // row
        per = max(k for k in range(1, min(count, MAX_ELEM // row) + 1) if count % k == 0)
        elem = per * row
    rows = size // elem
    return [_CONFIG[move](row_stride=elem if rows > 1 else 0, plane_stride=0, col_stride=0, elem_bytes=elem),
            move(dram=dram, space=space, sram=sram, planes=1, rows=rows, cols=1)]


def layernorm_layers(builder: LayerBuilder, node: Node) -> list[tuple[str, object]]:
    """The LayerNorm layer, and the layer transposing its D x T blocks back when the array can (else the
    LayerNorm stores its blocks transposed, byte by byte)."""
    d = node.input.type.shape[-1]
    source = builder.laid_out(node.input, nhwc=False)
    groups = source.elements // d
    tokens = tokens_per_tile(groups, d, builder.config)
    if not tokens:
        raise UnsupportedError(f"IntegerLayerNorm '{node.name}': a group of {d} elements does not fit the "
                               f"'{builder.config.name}' configuration's SRAMs")
    out = builder._new(node.result())
    builder.values[node.result()] = out
    blocks = _transposes(d, tokens, builder.config)
    staged = builder._new(node.result(), name=f"{node.name}/blocks") if blocks else out
    lengths = DramTensor(f"{node.name}/lengths", (tokens,), (4,), "constants",
                         builder.add_constant((d).to_bytes(4, "little") * tokens), itemsize=4)
    gamma, beta = (DramTensor(f"{node.name}/{what}", (d, tokens), (4 * tokens, 4), "constants", builder.add_constant(
        np.repeat(np.asarray(value.node.value).astype("<i4").reshape(d, 1), tokens, axis=1).tobytes()), itemsize=4)
        for what, value in (("gamma", node.gamma), ("beta", node.beta)))
    identity = DramTensor(f"{node.name}/identity", (tokens, tokens), (tokens, 1), "constants",
                          builder.add_constant(np.eye(tokens, dtype=np.int8).tobytes()))
    layers: list[tuple[str, object]] = [(node.name, LayerNormLayer(
        source, staged, d, gamma, beta, lengths, identity, node.epsilon, node.shift, int(node.type.offset), tokens,
        blocks))]
    if blocks:
        back = DramTensor(f"{node.name}/identity_d", (d, d), (d, 1), "constants",
                          builder.add_constant(np.eye(d, dtype=np.int8).tobytes()))
        layers.append((f"{node.name}/transpose", TransposeLayer(staged, out, d, tokens, back)))
    return layers
