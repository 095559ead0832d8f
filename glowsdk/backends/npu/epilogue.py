"""A convolution layer's epilogue: the element-wise chain after it in the graph, applied to each tile in the scratchpad.

The NPU's operator stacking: int8 Rescales, clamps (a ReLU by a constant), table lookups, and same-type Adds of
another tensor (a residual), whose tile is loaded after the tile's steps as an operand of the vector work only,
itself optionally rescaled on chip first. The intermediate tensors of the chain never reach DRAM. Each run of
unary steps runs as one table lookup (`Lut8`, its table loaded once per layer), so the vector engine makes one
pass for it; the run after an Add (a residual's ReLU) rides with the Add itself (VADD_LUT: add, saturate, look up),
with the operand's Rescale too where it has one (LUT_VADD_LUT, its table in int16: `Lut16`), and a table that leads
the chain (the activation after the convolution) with the REQUANT (REQUANT_LUT). Used by the convolution layers
(gemm.py) and the depthwise ones (depthwise.py).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from isa.table import COUNT16

from ...numerics import requantize
from .instructions import (CLAMP, CONFIG_CLAMP, CONFIG_REQUANT, LUT, LUT_LOAD, LUT_VADD_LUT, REQUANT, REQUANT_LUT,
                           VADD, VADD_LUT, VSUBI, Op)
from .tile_loads import Image

MAX_COUNT16 = (1 << COUNT16.width) - 1
"""The most elements one LUT_VADD_LUT takes (a longer tile's Add is several)."""


@dataclass(frozen=True)
class Rescale8:
    """An int8 -> int8 requantization: (q - zero_in) * M * 2^-(31 + shift) + zero_out, saturated."""

    multiplier: int
    shift: int
    zero_in: int
    zero_out: int

    def specs(self, sram: int, acc: int, pixels: int, n: int) -> list[Op]:
        return [VSUBI(dst_space="acc", dst=acc, src_space="spad", src=sram, count=pixels * n,
                      imm=self.zero_in),
                CONFIG_REQUANT(multiplier=self.multiplier, shift=self.shift, zero_point=self.zero_out,
                               clamp_lo=-128, clamp_hi=127, per_channel=0, table=0, bias_row=0, bias=0),
                REQUANT(dst=sram, src=acc, rows=pixels, cols=n)]


@dataclass(frozen=True)
class Clamp8:
    """max(min(q, hi), lo): a ReLU or ReLU6 by constants in the tensor's own type."""

    lo: int
    hi: int

    def specs(self, sram: int, acc: int, pixels: int, n: int) -> list[Op]:
        return [CONFIG_CLAMP(lo=self.lo, hi=self.hi),
                CLAMP(dst_space="spad", dst=sram, src_space="spad", src=sram, count=pixels * n)]


@dataclass(frozen=True)
class Lut8:
    """A run of unary int8 steps (Rescales and clamps) as one 256-entry table: one vector pass (LUT) where a
    Rescale takes two (VSUBI, REQUANT), exact by construction (each entry is the run's value of one byte)."""

    table: bytes
    """entry i: the run's result for the int8 value i - 128"""

    @staticmethod
    def of(ops: Sequence[Rescale8 | Clamp8 | Lut8]) -> Lut8:
        q = np.arange(-128, 128, dtype=np.int64)
        for op in ops:
            if isinstance(op, Rescale8):  # VSUBI into int32 (exact for int8), then REQUANT
                q = requantize(q - op.zero_in, op.multiplier, op.shift, op.zero_out).astype(np.int64)
            elif isinstance(op, Lut8):  # a TableLookup (a Sigmoid, HardSwish, SiLU...) or a run already made one
                q = np.frombuffer(op.table, np.int8).astype(np.int64)[q + 128]
            else:
                q = np.clip(q, op.lo, op.hi)
        return Lut8(q.astype(np.int8).tobytes())


@dataclass(frozen=True)
class Lut16:
    """An Add's operand table with the Add's zero point subtracted, in int16 (every entry exact): LUT_VADD_LUT looks
    the operand up in it in the Add's own pass, where its Rescale would take a LUT pass of its own."""

    table: bytes
    """entry i, little-endian int16: the operand's rescaled value of the int8 i - 128, minus the zero point"""

    @staticmethod
    def of(pre: Lut8, offset: int) -> Lut16:
        return Lut16((np.frombuffer(pre.table, np.int8).astype(np.int64) + offset).astype("<i2").tobytes())


@dataclass(frozen=True)
class AddTensor:
    """A same-type Add of another NHWC int8 tensor: saturate(q + x - zero), x rescaled first by `pre`. With
    `folded`, a table before it already subtracted `zero` from one side: one saturating int8 VADD. With
    `post`, the table of the unary run that follows looks the sum up in the same pass (one VADD_LUT)."""

    operand: Image
    zero: int
    pre: Rescale8 | Lut8 | Lut16 | None = None
    folded: bool = False
    post: Lut8 | None = None


EpilogueOp = Rescale8 | Clamp8 | Lut8 | AddTensor


def compact(epilogue: Sequence[EpilogueOp]) -> tuple[EpilogueOp, ...]:
    """The same chain with every run of unary steps as one table, except a lone clamp (CLAMP is one pass too),
    and the run after an Add as that Add's `post`."""
    out: list[EpilogueOp] = []
    run: list[Rescale8 | Clamp8 | Lut8] = []
    for op in [*epilogue, None]:
        if isinstance(op, (Rescale8, Clamp8, Lut8)):
            run.append(op)
            continue
        if run and out and isinstance(out[-1], AddTensor) and out[-1].post is None:
            out[-1] = replace(out[-1], post=Lut8.of(run))
        elif run:
            out.append(run[0] if len(run) == 1 and isinstance(run[0], Clamp8) else Lut8.of(run))
        run = []
        if isinstance(op, AddTensor) and isinstance(op.pre, Rescale8):
            op = replace(op, pre=Lut8.of([op.pre]))
        if isinstance(op, AddTensor):
            op = _fold_zero(op, out)
        if op is not None:
            out.append(op)
    return tuple(_looked_up(op) if isinstance(op, AddTensor) else op for op in out)


def _looked_up(add: AddTensor) -> AddTensor:
    """An Add whose operand is rescaled and whose sum is looked up (`post`) with the operand's table in int16, its
    zero point in it: one LUT_VADD_LUT pass where LUT and VADD_LUT took two."""
    if not isinstance(add.pre, Lut8) or add.post is None:
        return add
    return replace(add, pre=Lut16.of(add.pre, 0 if add.folded else -add.zero), folded=True)


def _fold_zero(add: AddTensor, before: list[EpilogueOp]) -> AddTensor:
    """`add` with its zero point subtracted by the table that makes one of its sides (the chain's own, else
    the operand's), when every entry of that table minus the zero point is still an int8: then
    sat(q + x - zero) = sat(q + (x - zero)) exactly, one VADD into int8."""
    main = before[-1] if before and isinstance(before[-1], Lut8) else None
    shifted = _minus(main, add.zero)
    if shifted is not None:
        before[-1] = shifted
        return replace(add, folded=True)
    shifted = _minus(add.pre, add.zero)
    return add if shifted is None else replace(add, pre=shifted, folded=True)


def _minus(table: EpilogueOp | None, zero: int) -> Lut8 | None:
    """The table minus `zero`, if every entry stays an int8."""
    if not isinstance(table, Lut8):
        return None
    values = np.frombuffer(table.table, np.int8).astype(np.int64) - zero
    return Lut8(values.astype(np.int8).tobytes()) if values.min() >= -128 and values.max() <= 127 else None


def tables(epilogue: Sequence[EpilogueOp]) -> list[Lut8 | Lut16]:
    """The epilogue's tables in the order its tiles use them (an Add's operand table before the Add)."""
    return [t for op in epilogue for t in ((op.pre, op.post) if isinstance(op, AddTensor) else (op,))
            if isinstance(t, (Lut8, Lut16))]


def tables_size(epilogue: Sequence[EpilogueOp]) -> int:
    """The scratchpad the epilogue's tables take, one after another (`table_places`)."""
    return sum(len(t.table) for t in tables(epilogue))


def table_places(epilogue: Sequence[EpilogueOp], base: int) -> dict[int, int]:
    """Each table's scratchpad address (by id), one after another from `base`."""
    places, at = {}, base
    for t in tables(epilogue):
        places[id(t)] = at
        at += len(t.table)
    return places


def vector_passes(epilogue: Sequence[EpilogueOp]) -> int:
    """Passes of the vector engine over a tile: its REQUANT (with a leading table: REQUANT_LUT), then each other
    step's (an Add: VADD and VSUBI, or one VADD_LUT with its post table, or one LUT_VADD_LUT with its operand's table
    too)."""
    def one(op: EpilogueOp | Lut16 | None) -> int:  # an operand's Lut16 is looked up in the Add's pass
        return 0 if op is None or isinstance(op, Lut16) else 2 if isinstance(op, Rescale8) else 1

    def add(op: AddTensor) -> int:
        return (1 if op.post else 2 - op.folded) + one(op.pre)
    rest = epilogue[1:] if epilogue and isinstance(epilogue[0], Lut8) else epilogue
    return 1 + sum(add(op) if isinstance(op, AddTensor) else one(op) for op in rest)


def monotone(op: EpilogueOp) -> bool:
    """Whether an epilogue step never decreases (a larger int8 never maps below a smaller one): it commutes with a
    max pool (`GemmLayer.window`)."""
    return isinstance(op, Clamp8) or isinstance(op, Rescale8) and op.multiplier >= 0


def requant_specs(config: Op, out: int, acc: int, pixels: int, n: int, epilogue: Sequence[EpilogueOp],
                  luts: dict[int, int], images: int = 1, period: int = 0) -> tuple[list[Op], Sequence[EpilogueOp]]:
    """A tile's requantization of its `pixels` x `n` accumulators at `acc` into int8 at `out` under `config`, and
    the epilogue steps left after it: a leading table (an activation) rides with it, one REQUANT_LUT pass. With
    `images` stacked images, the accumulator holds each image's pixels `period` pixels after the one before (the
    rows between are the array's discards): one pass per image, into its place in the dense int8 result."""
    each = pixels // images
    spans = [(out + i * each * n, acc + i * period * n) for i in range(images)]
    if epilogue and isinstance(epilogue[0], Lut8):
        return [config, LUT_LOAD(src=luts[id(epilogue[0])])] + [
            REQUANT_LUT(dst=dst, src=src, rows=each, cols=n) for dst, src in spans], epilogue[1:]
    return [config] + [REQUANT(dst=dst, src=src, rows=each, cols=n) for dst, src in spans], epilogue


def epilogue_specs(op: EpilogueOp, out: int, acc: int, pixels: int, n: int, operand: int,
                    luts: dict[int, int]) -> list[Op]:
    """One epilogue step on a tile: `out` (int8, pixels x n) in the scratchpad, `acc` free as scratch, each
    table at its scratchpad address in `luts` (by id)."""
    if isinstance(op, Lut8):
        return [LUT_LOAD(src=luts[id(op)]), LUT(dst=out, src=out, count=pixels * n)]
    if not isinstance(op, AddTensor):
        return op.specs(out, acc, pixels, n)
    if isinstance(op.pre, Lut16):  # the operand looked up, added, saturated and looked up again: one pass
        return [LUT_LOAD(src=luts[id(op.post)])] + [
            LUT_VADD_LUT(dst=out + at, src1=out + at, src2=operand + at, table=luts[id(op.pre)],
                         count=min(MAX_COUNT16, pixels * n - at)) for at in range(0, pixels * n, MAX_COUNT16)]
    specs = epilogue_specs(op.pre, operand, acc, pixels, n, 0, luts) if op.pre else []
    if op.post:  # saturate(q + x - zero) looked up in the post table, in one pass
        return specs + [LUT_LOAD(src=luts[id(op.post)]),
                        VADD_LUT(dst=out, src1=out, src2=operand, count=pixels * n,
                                 offset=0 if op.folded else -op.zero)]
    if op.folded:
        return specs + [VADD(dst_space="spad", dst=out, src1_space="spad", src1=out, src2_space="spad",
                             src2=operand, rows=pixels, cols=n, bcast=0)]
    return specs + [
        VADD(dst_space="acc", dst=acc, src1_space="spad", src1=out, src2_space="spad", src2=operand,
             rows=pixels, cols=n, bcast=0),
        VSUBI(dst_space="spad", dst=out, src_space="acc", src=acc, count=pixels * n, imm=op.zero)]


def table_loaded_once(tiles: list) -> list:
    """A layer's `pipeline.Tile`s, where every LUT_LOAD of their vector work loads the same table: only the first
    tile's is kept, since the vector engine holds the table until the next LUT_LOAD and none of another layer runs
    between them (an LRN beside a convolution reads its own table, LUT32). 8 cycles a tile on a vector-bound layer:
    resnet50's expansions with a residual addition."""
    sources = {op.fields["src"] for tile in tiles for op in tile.vector if op.mnemonic == "LUT_LOAD"}
    if len(sources) != 1:
        return tiles
    return tiles[:1] + [replace(tile, vector=[op for op in tile.vector if op.mnemonic != "LUT_LOAD"])
                        for tile in tiles[1:]]
