"""The vector engine's instructions: semantics, memory extents and lane work, per record of the ISA table.

Each semantics works on whole tensors (strided views, reductions), never per element, with the
rounding and saturation rules of `glowsdk.numerics`. Each instruction's cycles are the pipeline fill
plus its lane work (`behaviour.lanes`), so its timing is that work.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.lib.stride_tricks import as_strided

from glowsdk import numerics

from ..behaviour import (ExecutionFault, Extent, ProgramError, Registers, State, Write, read, sram, sram_extent,
                         strided, write_to)

if TYPE_CHECKING:
    from ..encoding import Instr

LUT_BYTES = 256
WIDE_LUT_BYTES = 1024
"""LUT32's table: 256 int32 entries."""
ADD_TABLE_BYTES = 512
"""LUT_VADD_LUT's operand table: 256 int16 entries."""
REQUANT_ENTRY_BYTES = 8
DIVIDE_CYCLES = 4
"""Lane-cycles per VDIV element: the divider is iterative (radix-4 over a 64-bit dividend, pipelined)."""


def rows_by_cols(i: Instr, r: Registers) -> int:
    """The lane work of an instruction over a rows x cols tensor."""
    return i.rows * i.cols


def count(i: Instr, r: Registers) -> int:
    """The lane work of an instruction over `count` elements."""
    return i.count


def lut_load_work(i: Instr, r: Registers) -> int:
    return LUT_BYTES


def divide_work(i: Instr, r: Registers) -> int:
    return DIVIDE_CYCLES * i.rows * i.cols


def binary(state: State, i: Instr, r: Registers) -> list[Write]:
    size = i.rows * i.cols
    a = read(state, i.src1_space, i.src1, size).reshape(i.rows, i.cols)
    b = read(state, i.src2_space, i.src2, i.cols if i.bcast else size)
    result = numerics.binary(i.mnemonic[1:], a, b.reshape(-1, i.cols), i.dst_space)
    return write_to(sram(state, i.dst_space), i.dst, result)


def binary_extents(i: Instr, r: Registers) -> list[Extent]:
    size = i.rows * i.cols
    return [sram_extent(i.src1_space, i.src1, size, False),
            sram_extent(i.src2_space, i.src2, i.cols if i.bcast else size, False),
            sram_extent(i.dst_space, i.dst, size, True)]


def immediate(state: State, i: Instr, r: Registers) -> list[Write]:
    a = read(state, i.src_space, i.src, i.count)
    return write_to(sram(state, i.dst_space), i.dst, numerics.binary(i.mnemonic[1:-1], a, i.imm, i.dst_space))


def unary_extents(i: Instr, r: Registers) -> list[Extent]:
    """`count` elements from one SRAM to another."""
    return [sram_extent(i.src_space, i.src, i.count, False), sram_extent(i.dst_space, i.dst, i.count, True)]


def requant(state: State, i: Instr, r: Registers) -> list[Write]:
    return write_to(state.spad, i.dst, _requantized(state, read(state, "acc", i.src, i.rows * i.cols), i, r))


def requant_mul(state: State, i: Instr, r: Registers) -> list[Write]:
    """The int8 rows at src times the int32 row at scale, exactly, requantized as REQUANT does."""
    x = read(state, "spad", i.src, i.rows * i.cols).reshape(i.rows, i.cols).astype(np.int64)
    return write_to(state.spad, i.dst, _requantized(state, x * read(state, "acc", i.scale, i.cols).astype(np.int64),
                                                    i, r))


def _requantized(state: State, x: np.ndarray, i: Instr, r: Registers) -> np.ndarray:
    """REQUANT's int8 of the rows x cols int64 values `x` under the CONFIG_REQUANT registers `r`."""
    x = x.reshape(i.rows, i.cols).astype(np.int64)
    if r["bias_row"]:
        x = x + read(state, "acc", r["bias"], i.cols).astype(np.int64)
    multiplier, shift = r["multiplier"], r["shift"]
    if r["per_channel"]:
        table = state.spad[r["table"]:r["table"] + REQUANT_ENTRY_BYTES * i.cols].view(np.uint8)
        entries = table.reshape(i.cols, REQUANT_ENTRY_BYTES)
        multiplier = np.ascontiguousarray(entries[:, :4]).view("<i4").ravel().astype(np.int64)
        shift = entries[:, 4].view(np.int8).astype(np.int64)
        bad = np.flatnonzero((multiplier < 0) | (np.abs(shift) > numerics.MAX_SHIFT))
        if bad.size:
            c = int(bad[0])
            raise ExecutionFault(f"per-channel requantize entry {c} at spad {r['table'] + 8 * c:#x} has multiplier "
                                 f"{multiplier[c]} and shift {shift[c]} (need >= 0 and -31..31)")
    return numerics.requantize(x, multiplier, shift, r["zero_point"], r["clamp_lo"], r["clamp_hi"])


def requant_lut(state: State, i: Instr, r: Registers) -> list[Write]:
    """REQUANT's int8 result looked up in the LUT (an activation table after it), written in its place."""
    (write,) = requant(state, i, r)
    return write_to(state.spad, i.dst, state.lut[write.values.astype(np.int64) + 128])


def requant_extents(i: Instr, r: Registers) -> list[Extent]:
    size = i.rows * i.cols
    return [Extent("acc", i.src, i.src + size, False), *_requant_tables(i, r),
            Extent("spad", i.dst, i.dst + size, True)]


def requant_mul_extents(i: Instr, r: Registers) -> list[Extent]:
    size = i.rows * i.cols
    return [Extent("spad", i.src, i.src + size, False), Extent("acc", i.scale, i.scale + i.cols, False),
            *_requant_tables(i, r), Extent("spad", i.dst, i.dst + size, True)]


def _requant_tables(i: Instr, r: Registers) -> list[Extent]:
    """What a requantization reads besides its values: the per-channel table, the bias row."""
    table = [Extent("spad", r["table"], r["table"] + REQUANT_ENTRY_BYTES * i.cols, False)] if r["per_channel"] else []
    if r["bias_row"]:
        table.append(Extent("acc", r["bias"], r["bias"] + i.cols, False))
    return table


def clamp(state: State, i: Instr, r: Registers) -> list[Write]:
    x = read(state, i.src_space, i.src, i.count)
    return write_to(sram(state, i.dst_space), i.dst, numerics.saturate(np.clip(x, r["lo"], r["hi"]), i.dst_space))


def lut_load(state: State, i: Instr, r: Registers) -> list[Write]:
    return write_to(state.lut, 0, state.spad[i.src:i.src + LUT_BYTES].copy())


def lut_load_extents(i: Instr, r: Registers) -> list[Extent]:
    return [Extent("spad", i.src, i.src + LUT_BYTES, False)]


def lut(state: State, i: Instr, r: Registers) -> list[Write]:
    x = read(state, "spad", i.src, i.count)
    return write_to(state.spad, i.dst, state.lut[x + 128])


def lut_extents(i: Instr, r: Registers) -> list[Extent]:
    return [Extent("spad", i.src, i.src + i.count, False), Extent("spad", i.dst, i.dst + i.count, True)]


def lut32(state: State, i: Instr, r: Registers) -> list[Write]:
    index = np.clip(read(state, "acc", i.src, i.count) + i.base, 0, 255)
    table = np.ascontiguousarray(state.spad[i.table:i.table + WIDE_LUT_BYTES]).view("<i4")
    return write_to(state.acc, i.dst, table[index])


def lut32_extents(i: Instr, r: Registers) -> list[Extent]:
    return [Extent("acc", i.src, i.src + i.count, False), Extent("spad", i.table, i.table + WIDE_LUT_BYTES, False),
            Extent("acc", i.dst, i.dst + i.count, True)]


def divide(state: State, i: Instr, r: Registers) -> list[Write]:
    size = i.rows * i.cols
    a = read(state, i.src1_space, i.src1, size).reshape(i.rows, i.cols)
    b = read(state, i.src2_space, i.src2, i.cols if i.bcast else size).reshape(-1, i.cols)
    zero = np.flatnonzero(b.ravel() == 0)
    if zero.size:
        raise ExecutionFault(f"VDIV: divisor element {int(zero[0])} (at {i.src2_space} {i.src2 + int(zero[0]):#x}) "
                             f"is zero")
    q = numerics.divide_rounded(a, b, i.shift)
    return write_to(sram(state, i.dst_space), i.dst, numerics.saturate(q, i.dst_space))


def mac(state: State, i: Instr, r: Registers) -> list[Write]:
    x = strided(state.spad, i.src, (i.rows, i.cols), (i.pitch, 1)).astype(np.int64)
    total = x * read(state, "spad", i.wgt, i.cols)
    if i.acc_mode:
        total += read(state, "acc", i.dst, i.rows * i.cols).reshape(i.rows, i.cols)
    return write_to(state.acc, i.dst, numerics.saturate(total, "acc"))


def mac_extents(i: Instr, r: Registers) -> list[Extent]:
    size = i.rows * i.cols
    out = [Extent("acc", i.dst, i.dst + size, True)]
    if i.acc_mode:
        out.append(Extent("acc", i.dst, i.dst + size, False))
    return [Extent("spad", i.src, i.src + (i.rows - 1) * i.pitch + i.cols, False),
            Extent("spad", i.wgt, i.wgt + i.cols, False), *out]


def add_lut(state: State, i: Instr, r: Registers) -> list[Write]:
    total = read(state, "spad", i.src1, i.count) + read(state, "spad", i.src2, i.count) + i.offset
    return write_to(state.spad, i.dst, state.lut[np.clip(total, numerics.INT8_MIN, numerics.INT8_MAX) + 128])


def add_lut_extents(i: Instr, r: Registers) -> list[Extent]:
    return [Extent("spad", i.src1, i.src1 + i.count, False), Extent("spad", i.src2, i.src2 + i.count, False),
            Extent("spad", i.dst, i.dst + i.count, True)]


def lut_add_lut(state: State, i: Instr, r: Registers) -> list[Write]:
    """LUT_VADD_LUT: b looked up in the int16 table, added to a, saturated, looked up in the LUT."""
    table = np.ascontiguousarray(state.spad[i.table:i.table + ADD_TABLE_BYTES]).view(np.uint8).view("<i2")
    total = read(state, "spad", i.src1, i.count) + table[read(state, "spad", i.src2, i.count) + 128].astype(np.int64)
    return write_to(state.spad, i.dst, state.lut[np.clip(total, numerics.INT8_MIN, numerics.INT8_MAX) + 128])


def lut_add_lut_extents(i: Instr, r: Registers) -> list[Extent]:
    return [Extent("spad", i.src1, i.src1 + i.count, False), Extent("spad", i.src2, i.src2 + i.count, False),
            Extent("spad", i.table, i.table + ADD_TABLE_BYTES, False), Extent("spad", i.dst, i.dst + i.count, True)]


def pool_output(i: Instr, r: Registers) -> tuple[int, int]:
    """(OH, OW) of a POOL under the window registers; a ProgramError if the output is empty."""
    oh = (i.height + r["pad_top"] + r["pad_bottom"] - r["kh"]) // r["stride_h"] + 1
    ow = (i.width + r["pad_left"] + r["pad_right"] - r["kw"]) // r["stride_w"] + 1
    if oh < 1 or ow < 1:
        raise ProgramError(f"a {r['kh']} x {r['kw']} window leaves no output on a {i.height} x {i.width} image")
    return oh, ow


def pool(state: State, i: Instr, r: Registers) -> list[Write]:
    oh, ow = pool_output(i, r)
    h, w, c = i.height, i.width, i.channels
    top, left = r["pad_top"], r["pad_left"]
    rows, cols = top + h + r["pad_bottom"], left + w + r["pad_right"]
    image = read(state, "spad", i.src, h * w * c).reshape(h, w, c)
    fill = numerics.INT32_MIN if i.op == "max" else (r["pad_value"] if r["count_pad"] else 0)
    padded = np.full((rows, cols, c), fill, np.int64)
    padded[top:top + h, left:left + w] = image
    s = padded.strides
    windows = as_strided(padded, (oh, ow, r["kh"], r["kw"], c),
                         (r["stride_h"] * s[0], r["stride_w"] * s[1], s[0], s[1], s[2]), writeable=False)
    if i.op == "max":
        result = windows.max(axis=(2, 3))
    else:
        total = windows.sum(axis=(2, 3))
        if r["count_pad"]:
            cells = np.int64(r["kh"] * r["kw"])
        else:
            inside = np.zeros((rows, cols), np.int64)
            inside[top:top + h, left:left + w] = 1
            covered = as_strided(inside, (oh, ow, r["kh"], r["kw"]),
                                 (r["stride_h"] * inside.strides[0], r["stride_w"] * inside.strides[1],
                                  *inside.strides), writeable=False)
            cells = covered.sum(axis=(2, 3))[..., None]
        result = numerics.rounded_average(total, cells)
    return write_to(state.spad, i.dst, result.astype(np.int8))


def pool_extents(i: Instr, r: Registers) -> list[Extent]:
    oh, ow = pool_output(i, r)
    return [Extent("spad", i.src, i.src + i.height * i.width * i.channels, False),
            Extent("spad", i.dst, i.dst + oh * ow * i.channels, True)]


def pool_work(i: Instr, r: Registers) -> int:
    oh, ow = pool_output(i, r)
    return oh * ow * i.channels * r["kh"] * r["kw"]


def reduce(state: State, i: Instr, r: Registers) -> list[Write]:
    x = read(state, i.src_space, i.src, i.rows * i.cols).reshape(i.rows, i.cols)
    out = read(state, "acc", i.dst, i.cols)
    if i.op == "sum":
        v = x.sum(axis=0) + (out if i.accumulate else 0)
    else:
        v = x.max(axis=0)
        if i.accumulate:
            v = np.maximum(v, out)
    return write_to(state.acc, i.dst, numerics.saturate(v, "acc"))


def reduce_extents(i: Instr, r: Registers) -> list[Extent]:
    out = [Extent("acc", i.dst, i.dst + i.cols, True)]
    if i.accumulate:
        out.append(Extent("acc", i.dst, i.dst + i.cols, False))
    return [sram_extent(i.src_space, i.src, i.rows * i.cols, False), *out]
