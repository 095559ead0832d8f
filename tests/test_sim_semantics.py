"""Every instruction's effect in the simulator against a reference written here from vendor_guide/isa.md.

The references use plain Python integers and numpy int64 straight from the ISA reference's formulas,
never `glowsdk.numerics` or the simulator's helpers. Each case loads random operands through DRAM,
runs the instruction (its engine's config instructions first) behind a dispatcher barrier, and
compares the final SRAM or DRAM contents. A small convolution run as an implicit-im2col MATMUL is
checked against onnx.reference's ConvInteger on the same int8 data (exact on every host, which
onnxruntime's integer kernels are not: without VNNI they can saturate pairs of products in int16).
"""
from __future__ import annotations

from fractions import Fraction
from typing import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from isa import BY_MNEMONIC, PRESETS, assemble
from sim.errors import Fault
from sim.simulator import simulate

CONFIG = PRESETS["edge"]
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def sat(space: str, x: int) -> int:
    lo, hi = (-128, 127) if space == "spad" else (INT32_MIN, INT32_MAX)
    return min(max(x, lo), hi)


def wrap32(x: int) -> int:
    return (x + (1 << 31)) % (1 << 32) - (1 << 31)


class Program:
    """Preloads through LOADs, then each body instruction behind a NOP barrier, then END."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.image: dict[int, bytes] = {}
        self.dram_top = 0x10000
        self.loads = 0

    def put(self, space: str, address: int, values: np.ndarray) -> None:
        raw = np.asarray(values).astype("<i1" if space == "spad" else "<i4").tobytes()
        at, self.dram_top = self.dram_top, self.dram_top + -(-len(raw) // 64) * 64 + 64
        self.image[at] = raw
        self.lines += [f"CONFIG_LOAD row_stride=0 plane_stride=0 col_stride=0 elem_bytes={len(raw)}",
                       f"LOAD dram={at:#x} space={space} sram={address:#x} planes=1 rows=1 cols=1 ; signal s1"]
        self.loads += 1

    def run(self, *body: str, config=CONFIG):
        lines = list(self.lines)
        for _ in range(self.loads):
            lines.append("NOP ; wait s1")
        for line in body:
            synced = ";" in line or line.startswith(("CONFIG", "LUT_LOAD"))
            lines += [line] if synced else [line + " ; signal s2", "NOP ; wait s2"]
        lines.append("END")
        return simulate(assemble("\n".join(lines)), config, dram=self.image, checked=True)


def config_matmul(dataflow: str, im2col: int = 0, out_w: int = 1, channels: int = 1, kw: int = 1, stride: int = 1,
                  dilation: int = 1, row_pitch: int = 0, pixel_pitch: int = 0) -> str:
    """One CONFIG_MATMUL line of assembly."""
    return (f"CONFIG_MATMUL dataflow={dataflow} im2col={im2col} out_w={out_w} channels={channels} kw={kw} "
            f"stride_h={stride} stride_w={stride} dil_h={dilation} dil_w={dilation} row_pitch={row_pitch} "
            f"pixel_pitch={pixel_pitch}")


def spad(result, address: int, count: int) -> np.ndarray:
    return result.memories.spad[address:address + count].astype(np.int64)


def acc(result, address: int, count: int) -> np.ndarray:
    return result.memories.acc[address:address + count].astype(np.int64)


def operand(rng, space: str, size: int) -> np.ndarray:
    """Random values with the extremes of the type mixed in."""
    lo, hi = (-128, 127) if space == "spad" else (INT32_MIN, INT32_MAX)
    values = rng.integers(lo, hi, size, endpoint=True, dtype=np.int64)
    values[:4] = [lo, hi, 0, -1][:min(4, size)]
    return values


BINARY = {"VADD": lambda a, b: a + b, "VSUB": lambda a, b: a - b, "VMUL": lambda a, b: a * b,
          "VMIN": min, "VMAX": max, "VSHL": lambda a, b: a * 2 ** min(max(b, 0), 31),
          "VSHR": lambda a, b: a // 2 ** min(max(b, 0), 31)}


def case_binary(mnemonic: str) -> Callable:
    def run(rng):
        for dst_space, s1, s2, bcast in (("spad", "spad", "spad", 0), ("acc", "acc", "spad", 1),
                                         ("spad", "acc", "acc", 0), ("acc", "spad", "acc", 1)):
            rows, cols = 3, 7
            a, b = operand(rng, s1, rows * cols), operand(rng, s2, cols if bcast else rows * cols)
            if mnemonic in ("VSHL", "VSHR"):
                b = rng.integers(-3, 40, b.size)
            p = Program()
            p.put(s1, 0x40, a)
            p.put(s2, 0x200, b)
            result = p.run(f"{mnemonic} dst_space={dst_space} dst=0x400 src1_space={s1} src1=0x40 src2_space={s2} "
                           f"src2=0x200 rows={rows} cols={cols} bcast={bcast}")
            want = [sat(dst_space, BINARY[mnemonic](int(a[r * cols + c]), int(b[c if bcast else r * cols + c])))
                    for r in range(rows) for c in range(cols)]
            got = (spad if dst_space == "spad" else acc)(result, 0x400, rows * cols)
            assert got.tolist() == want, (dst_space, s1, s2, bcast)
    return run


def case_immediate(mnemonic: str) -> Callable:
    op = BINARY[mnemonic[:-1]]

    def run(rng):
        for dst_space, src_space, imm in (("acc", "spad", 0), ("spad", "acc", 0), ("spad", "spad", -77),
                                          ("acc", "acc", 1 << 20), ("acc", "acc", INT32_MIN), ("spad", "acc", 33)):
            a = operand(rng, src_space, 50)
            p = Program()
            p.put(src_space, 0x80, a)
            result = p.run(f"{mnemonic} dst_space={dst_space} dst=0x300 src_space={src_space} src=0x80 count=50 "
                           f"imm={imm}")
            got = (spad if dst_space == "spad" else acc)(result, 0x300, 50)
            assert got.tolist() == [sat(dst_space, op(int(x), imm)) for x in a]
    return run


def requant_reference(x: int, m: int, s: int, zp: int, lo: int, hi: int) -> int:
    q = round(Fraction(x * m, 2 ** (31 + s)))  # Fraction rounds half to even
    return min(max(q + zp, lo), hi)


def case_requant(rng):
    rows, cols = 4, 6
    x = operand(rng, "acc", rows * cols)
    x[4:8] = [5, -5, 3, -3]  # ties for the rounding
    for m, s, zp, lo, hi in ((1 << 30, -1, 0, -128, 127), (1518500250, 8, 5, 5, 127), (1 << 30, 0, -3, -100, 100),
                             (0x7fffffff, 31, 0, -128, 127), (1, -31, 0, -128, 127)):
        p = Program()
        p.put("acc", 0x10, x)
        result = p.run(f"CONFIG_REQUANT multiplier={m} shift={s} zero_point={zp} clamp_lo={lo} clamp_hi={hi} "
                       "per_channel=0 table=0x0 bias_row=0 bias=0", f"REQUANT dst=0x100 src=0x10 rows={rows} cols={cols}")
        assert spad(result, 0x100, rows * cols).tolist() == [requant_reference(int(v), m, s, zp, lo, hi) for v in x]
    # Per channel: a table of (M int32, s int8, 3 unused bytes) per column.
    ms = rng.integers(0, 1 << 31, cols)
    shifts = rng.integers(-31, 32, cols)
    table = np.zeros((cols, 8), np.uint8)
    table[:, :4] = ms.astype("<i4").view(np.uint8).reshape(cols, 4)
    table[:, 4] = shifts.astype(np.int8).view(np.uint8)
    p = Program()
    p.put("acc", 0x10, x)
    p.put("spad", 0x800, table.view(np.int8).ravel())
    result = p.run("CONFIG_REQUANT multiplier=0 shift=0 zero_point=2 clamp_lo=-128 clamp_hi=127 per_channel=1 "
                   "table=0x800 bias_row=0 bias=0", f"REQUANT dst=0x100 src=0x10 rows={rows} cols={cols}")
    want = [requant_reference(int(x[r * cols + c]), int(ms[c]), int(shifts[c]), 2, -128, 127)
            for r in range(rows) for c in range(cols)]
    assert spad(result, 0x100, rows * cols).tolist() == want
    # A bias row added first, exactly (x + bias may leave int32).
    bias = operand(rng, "acc", cols)
    p = Program()
    p.put("acc", 0x10, x)
    p.put("acc", 0x200, bias)
    result = p.run("CONFIG_REQUANT multiplier=1518500250 shift=2 zero_point=-1 clamp_lo=-128 clamp_hi=127 "
                   "per_channel=0 table=0 bias_row=1 bias=0x200", f"REQUANT dst=0x100 src=0x10 rows={rows} cols={cols}")
    want = [requant_reference(int(x[r * cols + c]) + int(bias[c]), 1518500250, 2, -1, -128, 127)
            for r in range(rows) for c in range(cols)]
    assert spad(result, 0x100, rows * cols).tolist() == want


def case_clamp(rng):
    for dst_space, src_space, lo, hi in (("spad", "acc", -1000, 1000), ("acc", "acc", -5, 70000),
                                         ("spad", "spad", 0, 6), ("acc", "spad", INT32_MIN, INT32_MAX)):
        a = operand(rng, src_space, 40)
        p = Program()
        p.put(src_space, 0x20, a)
        result = p.run(f"CONFIG_CLAMP lo={lo} hi={hi}",
                       f"CLAMP dst_space={dst_space} dst=0x200 src_space={src_space} src=0x20 count=40")
        got = (spad if dst_space == "spad" else acc)(result, 0x200, 40)
        assert got.tolist() == [sat(dst_space, min(max(int(v), lo), hi)) for v in a]


def case_lut(rng):
    table = rng.integers(-128, 128, 256)
    x = operand(rng, "spad", 300)
    p = Program()
    p.put("spad", 0x1000, table)
    p.put("spad", 0x40, x)
    result = p.run("LUT dst=0x2000 src=0x40 count=300", "LUT_LOAD src=0x1000", "LUT dst=0x3000 src=0x40 count=300")
    assert spad(result, 0x2000, 300).tolist() == x.tolist()  # the identity at reset
    assert spad(result, 0x3000, 300).tolist() == [int(table[v + 128]) for v in x]


def case_lut32(rng):
    table = operand(rng, "acc", 256)
    x = rng.integers(-300, 300, 200)
    p = Program()
    p.put("spad", 0x1000, table.astype("<i4").view(np.int8))
    p.put("acc", 0x40, x)
    result = p.run("LUT32 dst=0x400 src=0x40 table=0x1000 count=200 base=17")
    assert acc(result, 0x400, 200).tolist() == [int(table[min(max(int(v) + 17, 0), 255)]) for v in x]


def case_divide(rng):
    for dst_space, s1, s2, bcast, shift in (("acc", "acc", "acc", 1, 8), ("spad", "spad", "acc", 0, 0),
                                            ("acc", "acc", "spad", 0, 31), ("spad", "acc", "spad", 1, 3)):
        rows, cols = 5, 6
        a = operand(rng, s1, rows * cols)
        b = operand(rng, s2, cols if bcast else rows * cols)
        b[b == 0] = 7
        b[-1] = 2 if s2 == "spad" else b[-1]
        a[-1] = 5  # an exact tie: 5 * 2^s / 2 at s = 0
        p = Program()
        p.put(s1, 0x40, a)
        p.put(s2, 0x200, b)
        result = p.run(f"VDIV dst_space={dst_space} dst=0x400 src1_space={s1} src1=0x40 src2_space={s2} src2=0x200 "
                       f"rows={rows} cols={cols} bcast={bcast} shift={shift}")
        want = [sat(dst_space, round(Fraction(int(a[r * cols + c]) * 2 ** shift, int(b[c if bcast else r * cols + c]))))
                for r in range(rows) for c in range(cols)]
        got = (spad if dst_space == "spad" else acc)(result, 0x400, rows * cols)
        assert got.tolist() == want, (dst_space, s1, s2, bcast, shift)


def case_mac(rng):
    """Rows `pitch` bytes apart (a stride-2 row of pixels); overwrite, then accumulate onto int32 extremes."""
    rows, cols, pitch = 5, 6, 13
    x, w = operand(rng, "spad", (rows - 1) * pitch + cols), operand(rng, "spad", cols)
    start = operand(rng, "acc", rows * cols)
    for acc_mode in (0, 1):
        p = Program()
        p.put("spad", 0x40, x)
        p.put("spad", 0x200, w)
        p.put("acc", 0x400, start)
        result = p.run(f"VMAC dst=0x400 src=0x40 wgt=0x200 rows={rows} cols={cols} pitch={pitch} acc_mode={acc_mode}")
        want = [sat("acc", acc_mode * int(start[r * cols + c]) + int(x[r * pitch + c]) * int(w[c]))
                for r in range(rows) for c in range(cols)]
        assert acc(result, 0x400, rows * cols).tolist() == want, acc_mode


def case_add_lut(rng):
    """The saturated sum plus offset looked up in the table, in place (dst = src1, an epilogue's tile); the same
    bytes as the Add's two spellings it replaces (VADD then LUT; VADD into int32, VSUBI the zero point, LUT)."""
    n, zero = 300, -37
    table, a, b = rng.integers(-128, 128, 256), operand(rng, "spad", n), operand(rng, "spad", n)
    p = Program()
    p.put("spad", 0x1000, table)
    p.put("spad", 0x40, a)
    p.put("spad", 0x200, b)
    for offset in (0, -zero, -32768, 32767):
        result = p.run("LUT_LOAD src=0x1000", f"VADD_LUT dst=0x40 src1=0x40 src2=0x200 count={n} offset={offset}")
        assert spad(result, 0x40, n).tolist() == [int(table[sat("spad", int(x) + int(y) + offset) + 128])
                                                 for x, y in zip(a, b)], offset
    fused = p.run("LUT_LOAD src=0x1000", f"VADD_LUT dst=0x40 src1=0x40 src2=0x200 count={n} offset={-zero}")
    spelled = p.run("LUT_LOAD src=0x1000", f"VADD dst_space=acc dst=0x0 src1_space=spad src1=0x40 src2_space=spad "
                    f"src2=0x200 rows=1 cols={n} bcast=0", f"VSUBI dst_space=spad dst=0x40 src_space=acc src=0x0 "
                    f"count={n} imm={zero}", f"LUT dst=0x40 src=0x40 count={n}")
    assert spad(fused, 0x40, n).tolist() == spad(spelled, 0x40, n).tolist()


def case_lut_add_lut(rng):
    """The operand looked up in the int16 table, added, saturated, looked up in the LUT, in place (dst = src1, an
    epilogue's tile); the same bytes as the spelling it replaces (LUT of the operand into int8, then VADD_LUT) where
    the table's entries are int8, and exact where they are not (an offset folded into them)."""
    n = 300
    post, a, b = rng.integers(-128, 128, 256), operand(rng, "spad", n), operand(rng, "spad", n)
    p = Program()
    p.put("spad", 0x1000, post)
    p.put("spad", 0x40, a)
    p.put("spad", 0x200, b)
    for pre in (rng.integers(-128, 128, 256), rng.integers(-32768, 32768, 256), np.full(256, -200)):
        p.put("spad", 0x2000, pre.astype("<i2").view(np.int8))
        result = p.run("LUT_LOAD src=0x1000", f"LUT_VADD_LUT dst=0x40 src1=0x40 src2=0x200 table=0x2000 count={n}")
        assert spad(result, 0x40, n).tolist() == [int(post[sat("spad", int(x) + int(pre[int(y) + 128])) + 128])
                                                 for x, y in zip(a, b)]
    pre = rng.integers(-128, 128, 256)
    p.put("spad", 0x2000, pre.astype("<i2").view(np.int8))
    p.put("spad", 0x3000, pre)
    fused = p.run("LUT_LOAD src=0x1000", f"LUT_VADD_LUT dst=0x40 src1=0x40 src2=0x200 table=0x2000 count={n}")
    spelled = p.run("LUT_LOAD src=0x3000", f"LUT dst=0x200 src=0x200 count={n}", "LUT_LOAD src=0x1000",
                    f"VADD_LUT dst=0x40 src1=0x40 src2=0x200 count={n} offset=0")
    assert spad(fused, 0x40, n).tolist() == spad(spelled, 0x40, n).tolist()


def case_requant_lut(rng):
    """REQUANT's int8 (bias row, per-tensor scale, clamp) looked up in the table: the same bytes as REQUANT then LUT."""
    rows, cols = 5, 7
    table, x, bias = rng.integers(-128, 128, 256), operand(rng, "acc", rows * cols), operand(rng, "acc", cols)
    p = Program()
    p.put("spad", 0x1000, table)
    p.put("acc", 0x10, x)
    p.put("acc", 0x200, bias)
    config = ("CONFIG_REQUANT multiplier=1518500250 shift=2 zero_point=-1 clamp_lo=-20 clamp_hi=100 per_channel=0 "
              "table=0 bias_row=1 bias=0x200")
    fused = p.run("LUT_LOAD src=0x1000", config, f"REQUANT_LUT dst=0x100 src=0x10 rows={rows} cols={cols}")
    want = [int(table[requant_reference(int(x[r * cols + c]) + int(bias[c]), 1518500250, 2, -1, -20, 100) + 128])
            for r in range(rows) for c in range(cols)]
    assert spad(fused, 0x100, rows * cols).tolist() == want
    spelled = p.run("LUT_LOAD src=0x1000", config, f"REQUANT dst=0x100 src=0x10 rows={rows} cols={cols}",
                    f"LUT dst=0x100 src=0x100 count={rows * cols}")
    assert spad(fused, 0x100, rows * cols).tolist() == spad(spelled, 0x100, rows * cols).tolist()


def case_requant_mul(rng):
    """int8 rows times an int32 row of factors, exact, then REQUANT (bias row, per-tensor scale, clamp): the same
    bytes as VMUL into the accumulator then REQUANT (a channel gate's two passes)."""
    rows, cols = 6, 9
    x, scale, bias = operand(rng, "spad", rows * cols), rng.integers(-255, 256, cols), operand(rng, "acc", cols) // 4
    p = Program()
    p.put("spad", 0x40, x)
    p.put("acc", 0x10, scale)
    p.put("acc", 0x200, bias)
    config = ("CONFIG_REQUANT multiplier=1518500250 shift=6 zero_point=3 clamp_lo=-128 clamp_hi=120 per_channel=0 "
              "table=0 bias_row=1 bias=0x200")
    fused = p.run(config, f"REQUANT_MUL dst=0x100 src=0x40 scale=0x10 rows={rows} cols={cols}")
    want = [requant_reference(int(x[r * cols + c]) * int(scale[c]) + int(bias[c]), 1518500250, 6, 3, -128, 120)
            for r in range(rows) for c in range(cols)]
    assert spad(fused, 0x100, rows * cols).tolist() == want
    spelled = p.run(config, f"VMUL dst_space=acc dst=0x400 src1_space=spad src1=0x40 src2_space=acc src2=0x10 "
                    f"rows={rows} cols={cols} bcast=1", f"REQUANT dst=0x100 src=0x400 rows={rows} cols={cols}")
    assert spad(fused, 0x100, rows * cols).tolist() == spad(spelled, 0x100, rows * cols).tolist()


def pool_reference(image, op, kh, kw, sh, sw, pt, pb, pl, pr, count_pad, pad_value):
    h, w, c = image.shape
    oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
    out = np.zeros((oh, ow, c), np.int64)
    for oy in range(oh):
        for ox in range(ow):
            for ch in range(c):
                cells = [(oy * sh + i - pt, ox * sw + j - pl) for i in range(kh) for j in range(kw)]
                inside = [int(image[y, x, ch]) for y, x in cells if 0 <= y < h and 0 <= x < w]
                if op == "max":
                    out[oy, ox, ch] = max(inside)
                    continue
                t, n = (sum(inside) + pad_value * (len(cells) - len(inside)), len(cells)) if count_pad \
                    else (sum(inside), len(inside))
                out[oy, ox, ch] = round(Fraction(t, n))
    return out


def case_pool(rng):
    h, w, c = 7, 6, 5
    image = operand(rng, "spad", h * w * c).reshape(h, w, c)
    for op, window in (("max", (3, 3, 2, 2, 1, 1, 1, 1, 0, 0)), ("avg", (3, 2, 2, 1, 1, 2, 0, 1, 1, -3)),
                       ("avg", (2, 3, 1, 2, 1, 0, 2, 0, 0, 0)), ("max", (1, 1, 1, 1, 0, 0, 0, 0, 0, 0))):
        kh, kw, sh, sw, pt, pb, pl, pr, count_pad, pad_value = window
        p = Program()
        p.put("spad", 0x100, image.ravel())
        result = p.run(f"CONFIG_POOL kh={kh} kw={kw} stride_h={sh} stride_w={sw} pad_top={pt} pad_bottom={pb} "
                       f"pad_left={pl} pad_right={pr} count_pad={count_pad} pad_value={pad_value}",
                       f"POOL op={op} dst=0x1000 src=0x100 height={h} width={w} channels={c}")
        want = pool_reference(image, op, *window)
        assert spad(result, 0x1000, want.size).tolist() == want.ravel().tolist(), (op, window)


def case_reduce(rng):
    rows, cols = 9, 5
    for op, accumulate, space in (("sum", 0, "spad"), ("sum", 1, "acc"), ("max", 0, "acc"), ("max", 1, "spad")):
        x = operand(rng, space, rows * cols)
        previous = operand(rng, "acc", cols)
        p = Program()
        p.put(space, 0x40, x)
        p.put("acc", 0x800, previous)
        result = p.run(f"REDUCE op={op} accumulate={accumulate} dst=0x800 src_space={space} src=0x40 rows={rows} "
                       f"cols={cols}")
        want = []
        for c in range(cols):
            column = [int(x[r * cols + c]) for r in range(rows)]
            v = sum(column) if op == "sum" else max(column)
            if accumulate:
                v = int(previous[c]) + v if op == "sum" else max(int(previous[c]), v)
            want.append(sat("acc", v))
        assert acc(result, 0x800, cols).tolist() == want, (op, accumulate, space)


def im2col_reference(spad_bytes, inp, rows, k, out_w, channels, kw, sh, sw, dh, dw, row_pitch, pixel_pitch):
    """A(p, i) by the ISA reference's formula, address by address."""
    a = np.zeros((rows, k), np.int64)
    for p in range(rows):
        oy, ox = divmod(p, out_w)
        for i in range(k):
            ky, kx, ci = i // (kw * channels), (i // channels) % kw, i % channels
            a[p, i] = spad_bytes[inp + (oy * sh + ky * dh) * row_pitch + (ox * sw + kx * dw) * pixel_pitch + ci]
    return a


def case_matmul(rng):
    # Plain: acc_mode 0 and 1, with sums that wrap modulo 2^32 when accumulated.
    rows, k, n = 5, 40, 9
    a, b = operand(rng, "spad", rows * k), operand(rng, "spad", k * n)
    start = operand(rng, "acc", rows * n)
    for acc_mode in (0, 1):
        p = Program()
        p.put("spad", 0x0, a)
        p.put("spad", 0x1000, b)
        p.put("acc", 0x100, start)
        result = p.run(f"MATMUL inp=0x0 wgt=0x1000 acc=0x100 rows={rows} k={k} n={n} acc_mode={acc_mode}")
        product = a.reshape(rows, k) @ b.reshape(k, n)
        want = [wrap32(int(v) + (int(s) if acc_mode else 0)) for v, s in zip(product.ravel(), start)]
        assert acc(result, 0x100, rows * n).tolist() == want
    # Implicit im2col with strides, dilations, pitches wider than the data, and a partial last output row.
    image = operand(rng, "spad", 4096)
    channels, kw, kh, out_w, rows = 3, 2, 2, 3, 7
    k = kh * kw * channels
    w = operand(rng, "spad", k * 4)
    for dataflow, sh, sw, dh, dw in (("ws", 1, 2, 2, 1), ("os", 2, 1, 1, 2)):
        p = Program()
        p.put("spad", 0x0, image)
        p.put("spad", 0x2000, w)
        result = p.run(f"CONFIG_MATMUL dataflow={dataflow} im2col=1 out_w={out_w} channels={channels} kw={kw} "
                       f"stride_h={sh} stride_w={sw} dil_h={dh} dil_w={dw} row_pitch=40 pixel_pitch=5",
                       f"MATMUL inp=0x10 wgt=0x2000 acc=0x0 rows={rows} k={k} n=4 acc_mode=0")
        a = im2col_reference(image, 0x10, rows, k, out_w, channels, kw, sh, sw, dh, dw, 40, 5)
        assert acc(result, 0, rows * 4).tolist() == (a @ w.reshape(k, 4)).ravel().tolist(), dataflow


def case_grouped_matmul(rng):
    """GMATMUL against the ISA reference's formula element by element: dense and im2col input, blocked and
    interleaved result columns, acc_mode 0 and 1 (sums that wrap modulo 2^32)."""
    rows, k, n, g = 5, 7, 3, 3
    a, w = operand(rng, "spad", rows * g * k), operand(rng, "spad", g * k * n)
    start = operand(rng, "acc", rows * g * n)
    for interleave, acc_mode in ((0, 0), (1, 1)):
        p = Program()
        p.put("spad", 0x0, a)
        p.put("spad", 0x1000, w)
        p.put("acc", 0x100, start)
        result = p.run(f"GMATMUL inp=0x0 wgt=0x1000 acc=0x100 rows={rows} k={k} n={n} groups={g} "
                       f"interleave={interleave} acc_mode={acc_mode}")
        want = [0] * (rows * g * n)
        for q in range(g):
            for r in range(rows):
                for j in range(n):
                    s = sum(int(a[(r * g + q) * k + i]) * int(w[(q * k + i) * n + j]) for i in range(k))
                    t = r * g * n + (j * g + q if interleave else q * n + j)
                    want[t] = wrap32(s + (int(start[t]) if acc_mode else 0))
        assert acc(result, 0x100, rows * g * n).tolist() == want
    # im2col: group q's window reads its channels `channels` bytes after group q - 1's in every pixel.
    image = operand(rng, "spad", 4096)
    channels, kw, kh, out_w, rows, g, n = 2, 2, 2, 3, 7, 2, 3
    k = kh * kw * channels
    w = operand(rng, "spad", g * k * n)
    for dataflow in ("ws", "os"):
        p = Program()
        p.put("spad", 0x0, image)
        p.put("spad", 0x2000, w)
        result = p.run(config_matmul(dataflow, 1, out_w, channels, kw, 1, 2, 40, 5),
                       f"GMATMUL inp=0x10 wgt=0x2000 acc=0x0 rows={rows} k={k} n={n} groups={g} interleave=1 "
                       f"acc_mode=0")
        got = acc(result, 0, rows * g * n).reshape(rows, n, g)
        for q in range(g):
            a = im2col_reference(image, 0x10 + q * channels, rows, k, out_w, channels, kw, 1, 1, 2, 2, 40, 5)
            assert got[:, :, q].tolist() == (a @ w[q * k * n:(q + 1) * k * n].reshape(k, n)).tolist(), dataflow


def load_reference(dram: dict[int, bytes], at: int, planes, rows, cols, ps, rs, cs, e, pads, pad_value):
    top, bottom, left, right = pads
    height, width = top + rows + bottom, left + cols + right
    memory = bytearray(max(a + len(d) for a, d in dram.items()))
    for a, d in dram.items():
        memory[a:a + len(d)] = d
    image = bytearray()
    for p in range(planes):
        for y in range(height):
            for x in range(width):
                if top <= y < top + rows and left <= x < left + cols:
                    start = at + p * ps + (y - top) * rs + (x - left) * cs
                    image += memory[start:start + e]
                else:
                    image += bytes([pad_value & 0xff]) * e
    return bytes(image)


def case_load(rng):
    raw = rng.integers(0, 256, 3000, dtype=np.uint8).tobytes()
    dram = {0x10000: raw}
    for planes, rows, cols, ps, rs, cs, e, pads, pv in ((2, 3, 4, 700, 100, 9, 5, (1, 0, 2, 1), -3),
                                                        (1, 4, 1, 0, 0, 0, 16, (0, 0, 0, 0), 0),
                                                        (1, 5, 3, 0, 37, 3, 6, (2, 1, 0, 3), 77)):
        lines = [f"CONFIG_LOAD row_stride={rs} plane_stride={ps} col_stride={cs} elem_bytes={e}",
                 f"CONFIG_PAD pad_top={pads[0]} pad_bottom={pads[1]} pad_left={pads[2]} pad_right={pads[3]} "
                 f"pad_value={pv}",
                 f"LOAD dram=0x10003 space=spad sram=0x100 planes={planes} rows={rows} cols={cols}", "END"]
        result = simulate(assemble("\n".join(lines)), CONFIG, dram=dram, checked=True)
        want = load_reference(dram, 0x10003, planes, rows, cols, ps, rs, cs, e, pads, pv)
        assert result.memories.spad[0x100:0x100 + len(want)].tobytes() == want
    # Into the accumulator: little-endian words, padding words sign-extended.
    lines = ["CONFIG_LOAD row_stride=12 plane_stride=0 col_stride=0 elem_bytes=8",
             "CONFIG_PAD pad_top=1 pad_bottom=0 pad_left=0 pad_right=1 pad_value=-2",
             "LOAD dram=0x10000 space=acc sram=0x20 planes=1 rows=3 cols=1", "END"]
    result = simulate(assemble("\n".join(lines)), CONFIG, dram=dram, checked=True)
    image = bytearray()
    for y in range(4):
        for x in range(2):
            image += raw[(y - 1) * 12:(y - 1) * 12 + 8] if y >= 1 and x == 0 else (-2).to_bytes(4, "little",
                                                                                              signed=True) * 2
    assert acc(result, 0x20, 16).tolist() == np.frombuffer(bytes(image), "<i4").tolist()


def case_store(rng):
    for space, planes, rows, cols, ps, rs, cs, e in (("spad", 2, 3, 4, 500, 60, 7, 5),
                                                     ("spad", 1, 4, 3, 0, 2, 1, 3),  # overlapping: later wins
                                                     ("acc", 1, 2, 2, 0, 40, 12, 8)):
        count = planes * rows * cols * e
        values = operand(rng, space, count if space == "spad" else count // 4)
        p = Program()
        p.put(space, 0x40, values)
        result = p.run(f"CONFIG_STORE row_stride={rs} plane_stride={ps} col_stride={cs} elem_bytes={e}",
                       f"STORE dram=0x20000 space={space} sram=0x40 planes={planes} rows={rows} cols={cols}")
        image = values.astype("<i1" if space == "spad" else "<i4").tobytes()
        want = bytearray(2000)
        for pl in range(planes):
            for r in range(rows):
                for c in range(cols):
                    at = pl * ps + r * rs + c * cs
                    first = ((pl * rows + r) * cols + c) * e
                    want[at:at + e] = image[first:first + e]
        assert result.memories.read_dram(0x20000, 2000) == bytes(want), (space, rs, cs)


def case_gather(rng):
    """Rows of a DRAM table picked by accumulator indices (negative ones from the end); a stray index faults."""
    rows, e, stride = 11, 6, 9
    table = rng.integers(-128, 127, rows * stride, endpoint=True).astype(np.int8)
    index = np.array([3, 0, 10, -1, -11, 3, 7])
    p = Program()
    p.put("acc", 0x80, index)
    p.image[0x30000] = table.tobytes()
    gather = (f"CONFIG_LOAD row_stride={stride} plane_stride=0 col_stride=0 elem_bytes={e}",
              f"GATHER dram=0x30000 idx=0x80 sram=0x400 count={index.size} rows={rows}")
    result = p.run(*gather)
    want = [int(table[(j % rows) * stride + b]) for j in index.tolist() for b in range(e)]
    assert spad(result, 0x400, index.size * e).tolist() == want
    p = Program()
    p.put("acc", 0x80, np.array([2, rows]))
    p.image[0x30000] = table.tobytes()
    with pytest.raises(Fault, match="outside the table's 11 rows"):
        p.run(*gather[:1], gather[1].replace(f"count={index.size}", "count=2"))


def case_control(rng):
    """NOP and END touch no memory and take a cycle each; a NOP's signal satisfies a later NOP's wait."""
    result = Program().run("NOP", "NOP ; signal s5", "NOP ; wait s5")
    assert result.cycles == 5 and not result.memories.spad.any() and not result.memories.acc.any()


CASES: dict[str, Callable] = {
    **{m: case_binary(m) for m in BINARY},
    **{m + "I": case_immediate(m + "I") for m in BINARY},
    "REQUANT": case_requant, "CONFIG_REQUANT": case_requant,
    "CLAMP": case_clamp, "CONFIG_CLAMP": case_clamp,
    "LUT": case_lut, "LUT_LOAD": case_lut, "LUT32": case_lut32, "VDIV": case_divide,
    "VMAC": case_mac, "VADD_LUT": case_add_lut, "LUT_VADD_LUT": case_lut_add_lut, "REQUANT_LUT": case_requant_lut, "REQUANT_MUL": case_requant_mul,
    "POOL": case_pool, "CONFIG_POOL": case_pool,
    "REDUCE": case_reduce,
    "MATMUL": case_matmul, "CONFIG_MATMUL": case_matmul, "GMATMUL": case_grouped_matmul,
    "LOAD": case_load, "CONFIG_LOAD": case_load, "CONFIG_PAD": case_load, "GATHER": case_gather,
    "STORE": case_store, "CONFIG_STORE": case_store,
    "NOP": case_control, "END": case_control,
}


def test_every_instruction_has_a_case():
    assert set(CASES) == set(BY_MNEMONIC)


@pytest.mark.parametrize("case", sorted({id(f): m for m, f in CASES.items()}.values()))
def test_instruction_matches_the_isa_reference(case):
    CASES[case](np.random.default_rng(sum(map(ord, case))))


def conv_integer(x_nchw, w_oihw, zero_point, stride, dilation, pad, out_shape):
    x = helper.make_tensor_value_info("x", TensorProto.INT8, list(x_nchw.shape))
    w = helper.make_tensor_value_info("w", TensorProto.INT8, list(w_oihw.shape))
    zp = helper.make_tensor_value_info("zp", TensorProto.INT8, [])
    y = helper.make_tensor_value_info("y", TensorProto.INT32, list(out_shape))
    node = helper.make_node("ConvInteger", ["x", "w", "zp"], ["y"], pads=[pad] * 4, strides=[stride] * 2,
                            dilations=[dilation] * 2)
    model = helper.make_model(helper.make_graph([node], "conv", [x, w, zp], [y]),
                              opset_imports=[helper.make_opsetid("", 11)], ir_version=8)
    onnx.checker.check_model(model)
    return ReferenceEvaluator(model).run(None, {"x": x_nchw, "w": w_oihw, "zp": np.array(zero_point, np.int8)})[0]


@pytest.mark.parametrize("h, w, cin, cout, k, stride, dilation, dataflow", [
    (8, 8, 4, 16, 3, 1, 1, "ws"), (9, 7, 3, 8, 3, 2, 1, "os"), (10, 10, 5, 6, 3, 1, 2, "ws"),
    (6, 6, 8, 40, 1, 1, 1, "os")])
def test_conv_layer_matches_the_reference_conv_integer(h, w, cin, cout, k, stride, dilation, dataflow):
    """LOAD with zero-point padding, bias = -zp * sum(w) (the datasheet's idiom), implicit-im2col MATMUL."""
    rng = np.random.default_rng(h * w + cin)
    zp = -3
    x = rng.integers(-128, 128, (1, h, w, cin), dtype=np.int8)
    weights = rng.integers(-128, 128, (cout, cin, k, k), dtype=np.int8)
    pad = dilation * (k // 2)
    oh = (h + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    ow = (w + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    kk = k * k * cin
    tiled = weights.transpose(2, 3, 1, 0).reshape(kk, cout)  # K ordered (ky, kx, ci), as MATMUL reads it
    bias = -zp * weights.astype(np.int64).sum(axis=(1, 2, 3))
    image = {0x10000: x.tobytes(), 0x20000: tiled.tobytes(), 0x30000: bias.astype("<i4").tobytes()}
    pitch = (w + 2 * pad) * cin
    text = f"""
        CONFIG_LOAD row_stride={w * cin} plane_stride=0 col_stride={cin} elem_bytes={cin}
        CONFIG_PAD pad_top={pad} pad_bottom={pad} pad_left={pad} pad_right={pad} pad_value={zp}
        LOAD dram=0x10000 space=spad sram=0x0 planes=1 rows={h} cols={w} ; signal s1
        CONFIG_PAD pad_top=0 pad_bottom=0 pad_left=0 pad_right=0 pad_value=0
        CONFIG_LOAD row_stride={cout} plane_stride=0 col_stride=0 elem_bytes={cout}
        LOAD dram=0x20000 space=spad sram=0x8000 planes=1 rows={kk} cols=1 ; signal s1
        CONFIG_LOAD row_stride=0 plane_stride=0 col_stride=0 elem_bytes={4 * cout}
        LOAD dram=0x30000 space=acc sram=0x0 planes=1 rows={oh * ow} cols=1 ; signal s1
        {config_matmul(dataflow, 1, ow, cin, k, stride, dilation, pitch, cin)}
        MATMUL inp=0x0 wgt=0x8000 acc=0x0 rows={oh * ow} k={kk} n={cout} acc_mode=1 ; wait s1x3 signal s2
        CONFIG_STORE row_stride={4 * cout} plane_stride=0 col_stride=0 elem_bytes={4 * cout}
        STORE dram=0x40000 space=acc sram=0x0 planes=1 rows={oh * ow} cols=1 ; wait s2 signal s3
        END ; wait s3
    """
    result = simulate(assemble(text), CONFIG, dram=image, checked=True)
    got = np.frombuffer(result.memories.read_dram(0x40000, oh * ow * cout * 4), "<i4").reshape(1, oh, ow, cout)
    want = conv_integer(x.transpose(0, 3, 1, 2), weights, zp, stride, dilation, pad, (1, cout, oh, ow))
    np.testing.assert_array_equal(got.transpose(0, 3, 1, 2), want)
