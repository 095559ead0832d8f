"""What each instruction does to the memories: the ISA reference's integer semantics, vectorised.

One function per row (or family) of the ISA table, registered in `SEMANTICS` and checked at import
to cover the table. Each reads all its sources into fresh arrays and returns its results as `Write`s
rather than storing them: the machine reads when the instruction starts and commits the writes when
it completes (`sim.machine`), so an instruction that overlaps an unordered writer sees stale data,
as hardware would. Each works on whole tensors (strided views, BLAS, reductions), never per element.
The rounding and saturation rules come from `isa.numerics`, the one definition the rest of glowsdk
shares. Configuration instructions have no effect here: the registers each instruction executes
with are known statically (`isa.program.with_registers`); only LUT_LOAD reads memory.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import EllipsisType
from typing import Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from isa import numerics
from isa.encoding import Instr
from isa.program import LUT_BYTES, REQUANT_ENTRY_BYTES, WIDE_LUT_BYTES, Registers, pool_output
from isa.table import INSTRUCTIONS

from .memory import Memories

EXACT_FLOAT32_K = 1024
"""Up to this K an int8 dot product stays within 2^24 (K * 128 * 128), exact in float32 BLAS."""


class ExecutionFault(Exception):
    """A fault only execution can find (a bad per-channel requantize entry); the engine names the instruction."""


class Datapath:
    """The memories plus the one piece of engine state that is data, not registers: the vector LUT."""

    def __init__(self, memories: Memories) -> None:
        self.mem = memories
        self.lut = (np.arange(256) - 128).astype(np.int8)


@dataclass(frozen=True, slots=True)
class Write:
    """Results an instruction stores when it completes: `target[key] = values` (`values` a fresh array)."""

    target: np.ndarray
    key: slice | np.ndarray | EllipsisType
    values: np.ndarray

    def commit(self) -> None:
        self.target[self.key] = self.values


def _to(target: np.ndarray, start: int, values: np.ndarray) -> list[Write]:
    """One write of `values` (flattened) at element `start` of a memory."""
    values = values.ravel()
    return [Write(target, slice(start, start + values.size), values)]


Semantics = Callable[[Datapath, Instr, Registers], list[Write]]


def _strided(base: np.ndarray, start: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """A read-only byte-strided view; the caller has checked every address it reaches is in `base`."""
    view = base[start:]
    return as_strided(view, shape, tuple(s * base.itemsize for s in strides), writeable=False)


def _load(dp: Datapath, i: Instr, r: Registers) -> list[Write]:
    e = r["elem_bytes"]
    box = _strided(dp.mem.dram, i.dram, (i.planes, i.rows, i.cols, e),
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
    return _to(dp.mem.sram(i.space), i.sram, image)


def _gather(dp: Datapath, i: Instr, r: Registers) -> list[Write]:
    e = r["elem_bytes"]
    raw = dp.mem.acc[i.idx:i.idx + i.count].astype(np.int64)
    rows = np.where(raw < 0, raw + i.rows, raw)
    bad = np.flatnonzero((rows < 0) | (rows >= i.rows))
    if bad.size:
        k = int(bad[0])
        raise ExecutionFault(f"GATHER: index {int(raw[k])} (at acc {i.idx + k:#x}) is outside the table's "
                             f"{i.rows} rows")
    table = _strided(dp.mem.dram, i.dram, (i.rows, e), (r["row_stride"], 1))
    return _to(dp.mem.spad, i.sram, table[rows].view(np.int8))


def _disjoint(counts_strides: list[tuple[int, int]], elem: int) -> bool:
    """True when no two elements of a strided box share a byte (a sufficient test)."""
    reach = elem
    for count, stride in sorted((cs for cs in counts_strides if cs[0] > 1), key=lambda cs: cs[1]):
        if stride < reach:
            return False
        reach = stride * (count - 1) + reach
    return True


def _store(dp: Datapath, i: Instr, r: Registers) -> list[Write]:
    e = r["elem_bytes"]
    count = i.planes * i.rows * i.cols * e
    if i.space == "acc":
        image = dp.mem.acc[i.sram:i.sram + count // 4].astype("<i4").view(np.uint8)
    else:
        image = dp.mem.spad[i.sram:i.sram + count].view(np.uint8).copy()
    dims = [(i.planes, r["plane_stride"]), (i.rows, r["row_stride"]), (i.cols, r["col_stride"])]
    image = image.reshape(i.planes, i.rows, i.cols, e)
    if _disjoint(dims, e):
        view = as_strided(dp.mem.dram[i.dram:], (i.planes, i.rows, i.cols, e), (*(s for _, s in dims), 1))
        return [Write(view, Ellipsis, image)]
    # Overlapping destinations: the element later in (p, r, c) order wins.
    address = np.zeros(1, np.int64)
    for n, stride in (*dims, (e, 1)):
        address = (address[:, None] + np.arange(n, dtype=np.int64) * stride).ravel()
    last_first = address[::-1]
    unique, at = np.unique(last_first, return_index=True)
    return [Write(dp.mem.dram, i.dram + unique, image.ravel()[::-1][at])]


def _im2col(dp: Datapath, i: Instr, r: Registers) -> np.ndarray:
    """The P x K input matrix read through the convolution window (the ISA's implicit im2col)."""
    channels, kw, out_w = r["channels"], r["kw"], r["out_w"]
    kh = i.k // (kw * channels)
    row, pixel = r["row_pitch"], r["pixel_pitch"]
    window = (kh, kw, channels), (r["dil_h"] * row, r["dil_w"] * pixel, 1)
    full, rest = divmod(i.rows, out_w)
    parts = []
    if full:
        parts.append(_strided(dp.mem.spad, i.inp, (full, out_w, *window[0]),
                              (r["stride_h"] * row, r["stride_w"] * pixel, *window[1])))
    if rest:
        parts.append(_strided(dp.mem.spad, i.inp + full * r["stride_h"] * row, (1, rest, *window[0]),
                              (r["stride_h"] * row, r["stride_w"] * pixel, *window[1])))
    return np.concatenate([p.reshape(-1, i.k) for p in parts])


def _matmul(dp: Datapath, i: Instr, r: Registers) -> list[Write]:
    spad = dp.mem.spad
    a = _im2col(dp, i, r) if r["im2col"] else spad[i.inp:i.inp + i.rows * i.k].reshape(i.rows, i.k)
    b = spad[i.wgt:i.wgt + i.k * i.n].reshape(i.k, i.n)
    # int8 products summed over K <= 8191 stay below 2^27: exact in float64 (and in float32 up to K = 1024).
    exact = np.float32 if i.k <= EXACT_FLOAT32_K else np.float64
    total = (a.astype(exact) @ b.astype(exact)).astype(np.int64)
    if i.acc_mode:
        total += dp.mem.acc[i.acc:i.acc + i.rows * i.n].reshape(i.rows, i.n)
    return _to(dp.mem.acc, i.acc, numerics.wrap32(total))


def _binary(dp: Datapath, i: Instr, r: Registers) -> list[Write]:
    size = i.rows * i.cols
    a = dp.mem.read(i.src1_space, i.src1, size).reshape(i.rows, i.cols)
    b = dp.mem.read(i.src2_space, i.src2, i.cols if i.bcast else size)
    result = numerics.binary(i.mnemonic[1:], a, b.reshape(-1, i.cols), i.dst_space)
    return _to(dp.mem.sram(i.dst_space), i.dst, result)


def _immediate(dp: Datapath, i: Instr, r: Registers) -> list[Write]:
    a = dp.mem.read(i.src_space, i.src, i.count)
    return _to(dp.mem.sram(i.dst_space), i.dst, numerics.binary(i.mnemonic[1:-1], a, i.imm, i.dst_space))


def _requant(dp: Datapath, i: Instr, r: Registers) -> list[Write]:
    x = dp.mem.read("acc", i.src, i.rows * i.cols).reshape(i.rows, i.cols).astype(np.int64)
    if r["bias_row"]:
        x = x + dp.mem.read("acc", r["bias"], i.cols).astype(np.int64)
    multiplier, shift = r["multiplier"], r["shift"]
    if r["per_channel"]:
        table = dp.mem.spad[r["table"]:r["table"] + REQUANT_ENTRY_BYTES * i.cols].view(np.uint8)
        entries = table.reshape(i.cols, REQUANT_ENTRY_BYTES)
        multiplier = np.ascontiguousarray(entries[:, :4]).view("<i4").ravel().astype(np.int64)
        shift = entries[:, 4].view(np.int8).astype(np.int64)
        bad = np.flatnonzero((multiplier < 0) | (np.abs(shift) > numerics.MAX_SHIFT))
        if bad.size:
            c = int(bad[0])
            raise ExecutionFault(f"per-channel requantize entry {c} at spad {r['table'] + 8 * c:#x} has multiplier "
                                 f"{multiplier[c]} and shift {shift[c]} (need >= 0 and -31..31)")
    q = numerics.requantize(x, multiplier, shift, r["zero_point"], r["clamp_lo"], r["clamp_hi"])
    return _to(dp.mem.spad, i.dst, q)


def _clamp(dp: Datapath, i: Instr, r: Registers) -> list[Write]:
    x = dp.mem.read(i.src_space, i.src, i.count)
    return _to(dp.mem.sram(i.dst_space), i.dst, numerics.saturate(np.clip(x, r["lo"], r["hi"]), i.dst_space))


def _lut_load(dp: Datapath, i: Instr, r: Registers) -> list[Write]:
    return _to(dp.lut, 0, dp.mem.spad[i.src:i.src + LUT_BYTES].copy())


def _lut32(dp: Datapath, i: Instr, r: Registers) -> list[Write]:
    index = np.clip(dp.mem.read("acc", i.src, i.count).astype(np.int64) + i.base, 0, 255)
    table = np.ascontiguousarray(dp.mem.spad[i.table:i.table + WIDE_LUT_BYTES]).view("<i4")
    return _to(dp.mem.acc, i.dst, table[index])


def _divide(dp: Datapath, i: Instr, r: Registers) -> list[Write]:
    size = i.rows * i.cols
    a = dp.mem.read(i.src1_space, i.src1, size).reshape(i.rows, i.cols)
    b = dp.mem.read(i.src2_space, i.src2, i.cols if i.bcast else size).reshape(-1, i.cols)
    zero = np.flatnonzero(b.ravel() == 0)
    if zero.size:
        raise ExecutionFault(f"VDIV: divisor element {int(zero[0])} (at {i.src2_space} {i.src2 + int(zero[0]):#x}) "
                             f"is zero")
    q = numerics.divide_rounded(a, b, i.shift)
    return _to(dp.mem.sram(i.dst_space), i.dst, numerics.saturate(q, i.dst_space))


def _mac(dp: Datapath, i: Instr, r: Registers) -> list[Write]:
    x = _strided(dp.mem.spad, i.src, (i.rows, i.cols), (i.pitch, 1)).astype(np.int64)
    total = x * dp.mem.read("spad", i.wgt, i.cols).astype(np.int64)
    if i.acc_mode:
        total += dp.mem.read("acc", i.dst, i.rows * i.cols).reshape(i.rows, i.cols)
    return _to(dp.mem.acc, i.dst, numerics.saturate(total, "acc"))


def _lut(dp: Datapath, i: Instr, r: Registers) -> list[Write]:
    x = dp.mem.read("spad", i.src, i.count)
    return _to(dp.mem.spad, i.dst, dp.lut[x + 128])


def _pool(dp: Datapath, i: Instr, r: Registers) -> list[Write]:
    oh, ow = pool_output(i, r)
    h, w, c = i.height, i.width, i.channels
    top, left = r["pad_top"], r["pad_left"]
    rows, cols = top + h + r["pad_bottom"], left + w + r["pad_right"]
    image = dp.mem.read("spad", i.src, h * w * c).reshape(h, w, c)
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
            count = np.int64(r["kh"] * r["kw"])
        else:
            inside = np.zeros((rows, cols), np.int64)
            inside[top:top + h, left:left + w] = 1
            cells = as_strided(inside, (oh, ow, r["kh"], r["kw"]),
                               (r["stride_h"] * inside.strides[0], r["stride_w"] * inside.strides[1],
                                *inside.strides), writeable=False)
            count = cells.sum(axis=(2, 3))[..., None]
        result = numerics.rounded_average(total, count)
    return _to(dp.mem.spad, i.dst, result.astype(np.int8))


def _reduce(dp: Datapath, i: Instr, r: Registers) -> list[Write]:
    x = dp.mem.read(i.src_space, i.src, i.rows * i.cols).reshape(i.rows, i.cols)
    out = dp.mem.read("acc", i.dst, i.cols)
    if i.op == "sum":
        v = x.sum(axis=0) + (out if i.accumulate else 0)
    else:
        v = x.max(axis=0)
        if i.accumulate:
            v = np.maximum(v, out)
    return _to(dp.mem.acc, i.dst, numerics.saturate(v, "acc"))


def _nothing(dp: Datapath, i: Instr, r: Registers) -> list[Write]:
    """Control and configuration instructions: their effect is on registers, known statically."""
    return []


SEMANTICS: dict[str, Semantics] = {
    "control": _nothing,
    "dma-config": _nothing,
    "matrix-config": _nothing,
    "vector-config": _nothing,
    "LUT_LOAD": _lut_load,
    "LOAD": _load,
    "GATHER": _gather,
    "STORE": _store,
    "MATMUL": _matmul,
    "vector-binary": _binary,
    "vector-immediate": _immediate,
    "REQUANT": _requant,
    "CLAMP": _clamp,
    "LUT": _lut,
    "LUT32": _lut32,
    "VDIV": _divide,
    "VMAC": _mac,
    "POOL": _pool,
    "REDUCE": _reduce,
}
"""Rule per mnemonic or family (the mnemonic wins)."""

_MISSING = [s.mnemonic for s in INSTRUCTIONS if s.mnemonic not in SEMANTICS and s.family not in SEMANTICS]
if _MISSING:
    raise ImportError(f"sim.semantics: no semantics for {', '.join(_MISSING)}")


def semantics_of(instr: Instr) -> Semantics:
    return SEMANTICS.get(instr.mnemonic) or SEMANTICS[instr.spec.family]
