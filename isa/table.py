"""THE ISA TABLE of the reference NPU: one row per instruction, one row per field kind.

The encoder, decoder, assembler, disassembler, the reference page
(vendor_guide/isa.md), the program checks and the simulator all read these rows;
nothing else declares an instruction. Each row's `doc` is its complete integer
semantics in the notation of `NOTATION`, and the row carries that semantics as
code, its memory extents and its timing (`isa.behaviour`; the rules themselves
are in `isa/families/`). The table is validated at import.
"""
from __future__ import annotations

from typing import Mapping

from .behaviour import ONE_CYCLE, dram, lanes, no_effect, no_extents
from .families import dma, matrix, vector
from .schema import (Check, Engine, Field, FieldKind, FieldValue, FromConfig, InstrSpec, signed, symbolic, unsigned,
                     validate_table)

ISA_VERSION = (2, 6)
"""(major, minor): major changes with any incompatible encoding or semantics, minor when instructions are
added; a binary records the version it was built for."""

NOTATION = """\
`spad[a]` is the int8 at scratchpad byte address a; `acc[w]` is the int32 at accumulator word address w
(byte 4w). `mem(space, a)` is `spad[a]` when space = spad and `acc[a]` when space = acc; an element read
from spad is sign-extended. Arithmetic is on unbounded integers unless stated; `sat(space, x)` clamps x to
the destination's type (-128..127 for spad, -2^31..2^31-1 for acc); `div` floors. Counts are exact (a
field `rows` = 3 means three rows). Every instruction reads all its sources before writing its
destination, so a destination may alias a source. An access outside DRAM, the scratchpad or the
accumulator is a fault: the machine stops and reports the instruction's index. A config instruction
sets registers of the engine that executes it; they keep their value until set again, and their reset
values hold at program start."""

# The field table.
DRAM_ADDR = unsigned("dram_addr", 32, "DRAM byte address", hex=True)
SPAD_ADDR = unsigned("spad_addr", 22, "scratchpad byte address", hex=True)
ACC_ADDR = unsigned("acc_addr", 20, "accumulator word (int32) address", hex=True)
ACC_ADDR19 = unsigned("acc_addr19", 19, "accumulator word (int32) address below 2^19", hex=True)
SRAM_ADDR = unsigned("sram_addr", 22, "scratchpad byte address, or accumulator word address, per its space field",
                     hex=True)
SPACE = symbolic("space", ("spad", "acc"), "which SRAM: the int8 scratchpad or the int32 accumulator")
STRIDE = unsigned("stride", 32, "DRAM byte stride (0 repeats the same bytes)")
STRIDE16 = unsigned("stride16", 16, "byte stride or pitch up to 65535")
PITCH = unsigned("pitch", 22, "scratchpad byte pitch")
BYTES = unsigned("bytes", 16, "element size in bytes", lo=1)
COUNT12 = unsigned("count12", 12, "element count", lo=1)
COUNT13 = unsigned("count13", 13, "element count", lo=1)
COUNT16 = unsigned("count16", 16, "element count", lo=1)
COUNT24 = unsigned("count24", 24, "element count", lo=1)
PAD8 = unsigned("pad8", 8, "padding in rows or columns")
WINDOW = unsigned("window", 4, "dilation", lo=1)
WINDOW8 = unsigned("window8", 8, "window size or stride (a 16 x 16 patch embedding, a 1-D kernel of 80)", lo=1)
FLAG = unsigned("flag", 1, "0 or 1")
INT8 = signed("int8", 8, "signed 8-bit value")
INT32 = signed("int32", 32, "signed 32-bit value")
MULTIPLIER = unsigned("multiplier", 31, "fixed-point multiplier M: the real factor is M * 2^-(31+shift)")
SHIFT = signed("shift", 8, "requantize shift: the real factor is M * 2^-(31+shift)", lo=-31, hi=31)
DATAFLOW = symbolic("dataflow", ("ws", "os"), "matrix-engine dataflow: weight- or output-stationary")
POOL_OP = symbolic("pool_op", ("max", "avg"), "pooling: maximum or rounded average")
REDUCE_OP = symbolic("reduce_op", ("sum", "max"), "reduction: saturating sum or maximum")
INT16 = signed("int16", 16, "signed 16-bit value")
SHIFT5 = unsigned("shift5", 5, "left shift 0..31")
GROUPS = unsigned("groups", 4, "groups of a grouped product, side by side on the array", lo=1, hi=8)

FIELD_KINDS: tuple[FieldKind, ...] = (
    DRAM_ADDR, SPAD_ADDR, ACC_ADDR, ACC_ADDR19, SRAM_ADDR, SPACE, STRIDE, STRIDE16, PITCH, BYTES, COUNT12, COUNT13, COUNT16,
    COUNT24, PAD8, WINDOW, WINDOW8, FLAG, INT8, INT16, INT32, MULTIPLIER, SHIFT, SHIFT5, GROUPS, DATAFLOW, POOL_OP,
    REDUCE_OP)

F = Field


def _ordered(lo: str, hi: str) -> Check:
    """A cross-field rule: field `lo` must not exceed field `hi` (its docstring is the reference's wording)."""
    def check(v: Mapping[str, FieldValue]) -> str | None:
        return None if v[lo] <= v[hi] else f"{lo} = {v[lo]} is greater than {hi} = {v[hi]}"
    check.__doc__ = f"`{lo}` <= `{hi}`"
    return check


def _pads_below_window(v: Mapping[str, FieldValue]) -> str | None:
    """each pad below its window size (`pad_top`, `pad_bottom` < `kh`; `pad_left`, `pad_right` < `kw`), so
    every window holds a cell of the image"""
    for pad, size in (("pad_top", "kh"), ("pad_bottom", "kh"), ("pad_left", "kw"), ("pad_right", "kw")):
        if v[pad] >= v[size]:
            return f"{pad} = {v[pad]} must be below {size} = {v[size]}"
    return None


def _reset(**values: FieldValue | FromConfig) -> tuple[tuple[str, FieldValue | FromConfig], ...]:
    """Reset values of a config row's registers, in field order."""
    return tuple(values.items())


_CONFIG = dict(semantics=no_effect, extents=no_extents, timing=ONE_CYCLE)
"""What a control or configuration row does: set registers (known statically) in one cycle, touch no memory."""


def _dma_config(mnemonic: str, opcode: int, engine: Engine, direction: str) -> InstrSpec:
    return InstrSpec(mnemonic, opcode, engine, (
        F("row_stride", 22, STRIDE, "DRAM bytes between consecutive rows"),
        F("plane_stride", 54, STRIDE, "DRAM bytes between consecutive planes"),
        F("col_stride", 86, STRIDE16, "DRAM bytes between consecutive elements of a row"),
        F("elem_bytes", 102, BYTES, "contiguous bytes per element (E)"),
    ), f"Sets the DRAM geometry of the following {direction}s: element (p, r, c) of a box starts at DRAM byte "
       "`dram + p*plane_stride + r*row_stride + c*col_stride` and is `elem_bytes` contiguous bytes long. Strides "
       "may be 0 (the same bytes again) or smaller than an element.", "dma-config",
        reset=_reset(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=1), **_CONFIG)


def _dma_box(direction: str) -> tuple[Field, ...]:
    return (
        F("dram", 22, DRAM_ADDR, f"DRAM byte address of element (0, 0, 0) of the box ({direction})"),
        F("space", 54, SPACE, "the SRAM side"),
        F("sram", 55, SRAM_ADDR, "start of the dense SRAM image"),
        F("planes", 77, COUNT12, "planes in the box (P)"),
        F("rows", 89, COUNT16, "rows per plane (R)"),
        F("cols", 105, COUNT16, "elements per row (C)"),
    )


CONTROL = [
    InstrSpec("NOP", 0x01, Engine.CONTROL, (), "Does nothing. The dispatcher executes it in program order: its wait "
              "holds back the dispatch of every later instruction, so a NOP with a wait is a barrier; its signal "
              "follows at once.", "control", **_CONFIG),
    InstrSpec("END", 0x02, Engine.CONTROL, (), "Ends the program; it must be the last instruction and occur once. "
              "The dispatcher takes its wait, stops fetching, and the program has finished when every engine queue "
              "is empty and every engine idle.", "control", **_CONFIG),
]

DMA = [
    _dma_config("CONFIG_LOAD", 0x04, Engine.LOAD, "LOAD"),
    InstrSpec("CONFIG_PAD", 0x05, Engine.LOAD, (
        F("pad_top", 22, PAD8, "padding rows above each plane"),
        F("pad_bottom", 30, PAD8, "padding rows below each plane"),
        F("pad_left", 38, PAD8, "padding elements before each row"),
        F("pad_right", 46, PAD8, "padding elements after each row"),
        F("pad_value", 54, INT8, "value of every padding byte (the input zero point)"),
    ), "Sets the padding the following LOADs write around each plane of their SRAM image, without reading "
       "DRAM.", "dma-config", reset=_reset(pad_top=0, pad_bottom=0, pad_left=0, pad_right=0, pad_value=0),
       **_CONFIG),
    InstrSpec("LOAD", 0x06, Engine.LOAD, _dma_box("source"), """\
DMA from DRAM into SRAM, with the geometry of CONFIG_LOAD and the padding of CONFIG_PAD. With E = elem_bytes,
H = pad_top + rows + pad_bottom and W = pad_left + cols + pad_right, the SRAM image is dense: padded
position (p, y, x) occupies image bytes `((p*H + y)*W + x)*E .. +E-1`. Where pad_top <= y < pad_top + rows
and pad_left <= x < pad_left + cols, byte e of the position is DRAM byte
`dram + p*plane_stride + (y - pad_top)*row_stride + (x - pad_left)*col_stride + e`; every other position
is padding. space = spad: image byte b is written to `spad[sram + b]`, padding bytes are pad_value.
space = acc: E must be a multiple of 4 (fault otherwise); image bytes 4i..4i+3, read as a little-endian
int32, are written to `acc[sram + i]`, and padding words are pad_value sign-extended.""", "dma",
              semantics=dma.load, extents=dma.load_extents, timing=dram(dma.load_transfer)),
    InstrSpec("GATHER", 0x07, Engine.LOAD, (
        F("dram", 22, DRAM_ADDR, "DRAM byte address of row 0 of the table"),
        F("idx", 54, ACC_ADDR, "first of the int32 row indices, in the accumulator"),
        F("sram", 74, SPAD_ADDR, "start of the dense scratchpad image"),
        F("count", 96, COUNT16, "indices, so rows gathered (N)"),
        F("rows", 112, COUNT16, "rows in the table (V)"),
    ), """\
Indexed DMA (an embedding lookup): rows of a DRAM table picked by indices in the accumulator, with
CONFIG_LOAD's elem_bytes E (bytes per row) and row_stride (DRAM bytes between rows; no padding). For i < N:
j = acc[idx + i], plus V when j < 0 (an index counts from the end, as ONNX Gather's do); j outside 0..V-1
is a fault. DRAM bytes `dram + j*row_stride .. +E-1` are written to `spad[sram + i*E .. +E-1]`. The
indices are read as the instruction starts; the table's bytes up to row V - 1 must lie in DRAM. Timing:
N separate DRAM runs of E bytes.""", "dma",
              semantics=dma.gather, extents=dma.gather_extents, timing=dram(dma.gather_transfer)),
    _dma_config("CONFIG_STORE", 0x08, Engine.STORE, "STORE"),
    InstrSpec("STORE", 0x09, Engine.STORE, _dma_box("destination"), """\
DMA from SRAM to DRAM, with the geometry of CONFIG_STORE (no padding). With E = elem_bytes the SRAM image
is dense: element (p, r, c) occupies image bytes `((p*rows + r)*cols + c)*E .. +E-1`, and its byte e is
written to DRAM byte `dram + p*plane_stride + r*row_stride + c*col_stride + e`. space = spad: image byte b
is `spad[sram + b]`. space = acc: E must be a multiple of 4 (fault otherwise); image bytes 4i..4i+3 are
`acc[sram + i]` as a little-endian int32. Where DRAM destinations coincide, the element later in
(p, r, c) order wins.""", "dma",
              semantics=dma.store, extents=dma.store_extents, timing=dram(dma.store_transfer)),
]

MATRIX = [
    InstrSpec("CONFIG_MATMUL", 0x0C, Engine.MATRIX, (
        F("dataflow", 22, DATAFLOW, "weight-stationary (ws) or output-stationary (os)"),
        F("im2col", 23, FLAG, "1: MATMUL and GMATMUL read their input through the convolution window below"),
        F("out_w", 24, COUNT16, "output pixels per output row"),
        F("channels", 40, COUNT16, "input channels per pixel (innermost part of K)"),
        F("kw", 56, WINDOW8, "kernel width"),
        F("stride_h", 64, WINDOW8, "vertical convolution stride"),
        F("stride_w", 72, WINDOW8, "horizontal convolution stride"),
        F("dil_h", 80, WINDOW, "vertical dilation"),
        F("dil_w", 84, WINDOW, "horizontal dilation"),
        F("row_pitch", 88, PITCH, "scratchpad bytes between image rows"),
        F("pixel_pitch", 110, STRIDE16, "scratchpad bytes between pixels of a row"),
    ), "Sets the matrix engine's dataflow (timing only, never the result) and how MATMUL and GMATMUL address "
       "their input matrix.", "matrix-config",
        reset=_reset(dataflow=FromConfig("reset_dataflow"), im2col=0, out_w=1, channels=1, kw=1, stride_h=1, stride_w=1,
                     dil_h=1, dil_w=1, row_pitch=0, pixel_pitch=0), **_CONFIG),
    InstrSpec("MATMUL", 0x0D, Engine.MATRIX, (
        F("inp", 22, SPAD_ADDR, "input matrix A (P x K int8) or image"),
        F("wgt", 44, SPAD_ADDR, "weight matrix B (K x N int8, row-major)"),
        F("acc", 66, ACC_ADDR, "result matrix (P x N int32, row-major)"),
        F("rows", 86, COUNT16, "P: rows of A and of the result"),
        F("k", 102, COUNT13, "K: reduction length"),
        F("n", 115, COUNT12, "N: columns of B and of the result"),
        F("acc_mode", 127, FLAG, "0: overwrite the result, 1: add to it"),
    ), """\
`acc[acc + p*n + j] = S(p, j)` (acc_mode 0) or `wrap32(acc[acc + p*n + j] + S(p, j))` (acc_mode 1) for
p < rows, j < n, where `S(p, j) = wrap32(sum over i < k of A(p, i) * spad[wgt + i*n + j])` and wrap32
reduces modulo 2^32 into -2^31..2^31-1. With im2col = 0, `A(p, i) = spad[inp + p*k + i]`. With im2col = 1,
A is the implicit im2col of an int8 image at inp (pixels pixel_pitch bytes apart, rows row_pitch bytes
apart, channels contiguous): oy = p div out_w, ox = p mod out_w, ky = i div (kw*channels),
kx = (i div channels) mod kw, ci = i mod channels, and `A(p, i) = spad[inp + (oy*stride_h + ky*dil_h)*row_pitch
+ (ox*stride_w + kx*dil_w)*pixel_pitch + ci]`; k must be a multiple of kw*channels (fault otherwise). One
MATMUL performs every fold of the problem over the array (K and N folds when weight-stationary, P and N
folds when output-stationary).""", "matrix",
              semantics=matrix.matmul, extents=matrix.matmul_extents, timing=matrix.MATMUL_TIMING),
    InstrSpec("GMATMUL", 0x0E, Engine.MATRIX, (
        F("inp", 22, SPAD_ADDR, "input image (im2col) or matrix, the groups' channels one after another per pixel"),
        F("wgt", 44, SPAD_ADDR, "weights: groups blocks of k x n int8, row-major, one after another"),
        F("acc", 66, ACC_ADDR, "result matrix (rows x groups*n int32, row-major)"),
        F("rows", 86, COUNT12, "P: output pixels (rows of the result)"),
        F("k", 98, COUNT12, "K: reduction length of each group"),
        F("n", 110, COUNT12, "N: result columns of each group"),
        F("groups", 122, GROUPS, "G: products side by side"),
        F("interleave", 126, FLAG, "1: group q's column j is result column j*G + q (a channel shuffle)"),
        F("acc_mode", 127, FLAG, "0: overwrite the result, 1: add to it"),
    ), """\
A grouped product (a grouped convolution: the block diagonal of its filter without the zeros), G = groups
products side by side. For q < G, p < rows, j < n: `S(q, p, j) = wrap32(sum over i < k of A_q(p, i) *
spad[wgt + (q*k + i)*n + j])`. With im2col = 0, `A_q(p, i) = spad[inp + (p*G + q)*k + i]`; with im2col = 1, A_q
is MATMUL's implicit im2col (CONFIG_MATMUL's window, k a multiple of kw*channels) read from inp + q*channels:
every pixel holds the groups' channels one after another. Result column t = j*G + q when interleave is 1
(the G groups' outputs shuffled, as a channel shuffle of G groups orders them), else q*n + j; `acc[acc + p*G*n
+ t] = S(q, p, j)` (acc_mode 0) or `wrap32(acc[acc + p*G*n + t] + S(q, p, j))` (acc_mode 1). The hardware:
the array's columns form G blocks of C div G (more groups than columns is a fault); each block holds its
group's weights, and its first column takes the input rows of its own group through a 2:1 multiplexer per row
(the row's value from the block to its left otherwise), so the scratchpad's array port reads G input streams
(G x R bytes a cycle, G at most 8); the accumulator's write port places each block's column sums at their
result columns. Cycles: the blocks run side by side, each as MATMUL's on an R x (C div G) array (K folds by
ceil(n / (C div G)) N folds weight-stationary, P folds by as many output-stationary; a fold skews its inputs
across its own block's columns only).""", "matrix",
              semantics=matrix.grouped_matmul, extents=matrix.grouped_matmul_extents, timing=matrix.GMATMUL_TIMING),
]

_BINARY = {
    "ADD": "a + b", "SUB": "a - b", "MUL": "a * b", "MIN": "min(a, b)", "MAX": "max(a, b)",
    "SHL": "a * 2^min(max(b, 0), 31)", "SHR": "a div 2^min(max(b, 0), 31) (arithmetic shift right)",
}


def _binary(op: str, opcode: int) -> InstrSpec:
    return InstrSpec(f"V{op}", opcode, Engine.VECTOR, (
        F("dst_space", 22, SPACE, "destination SRAM"),
        F("dst", 23, SRAM_ADDR, "destination, rows x cols dense"),
        F("src1_space", 45, SPACE, "first source SRAM"),
        F("src1", 46, SRAM_ADDR, "first source a, rows x cols dense"),
        F("src2_space", 68, SPACE, "second source SRAM"),
        F("src2", 69, SRAM_ADDR, "second source b: rows x cols dense, or one row of cols"),
        F("rows", 91, COUNT16, "rows"),
        F("cols", 107, COUNT16, "elements per row"),
        F("bcast", 123, FLAG, "1: b is a single row (such as a bias) repeated for every row"),
    ), f"For r < rows, c < cols: a = mem(src1_space, src1 + r*cols + c), b = mem(src2_space, src2 + c) if bcast "
       f"else mem(src2_space, src2 + r*cols + c); `mem(dst_space, dst + r*cols + c) = sat(dst_space, {_BINARY[op]})`.",
        "vector-binary", semantics=vector.binary, extents=vector.binary_extents, timing=lanes(vector.rows_by_cols))


def _immediate(op: str, opcode: int) -> InstrSpec:
    return InstrSpec(f"V{op}I", opcode, Engine.VECTOR, (
        F("dst_space", 22, SPACE, "destination SRAM"),
        F("dst", 23, SRAM_ADDR, "destination, count elements"),
        F("src_space", 45, SPACE, "source SRAM"),
        F("src", 46, SRAM_ADDR, "source a, count elements"),
        F("count", 68, COUNT24, "elements"),
        F("imm", 92, INT32, "the second operand b"),
    ), f"For i < count: a = mem(src_space, src + i), b = imm; `mem(dst_space, dst + i) = sat(dst_space, "
       f"{_BINARY[op]})`." + (" VADDI with imm 0 copies between the spaces (int8 -> int32 sign-extends, int32 "
                              "-> int8 saturates)." if op == "ADD" else ""), "vector-immediate",
        semantics=vector.immediate, extents=vector.unary_extents, timing=lanes(vector.count))


VECTOR = [
    InstrSpec("CONFIG_REQUANT", 0x10, Engine.VECTOR, (
        F("multiplier", 22, MULTIPLIER, "per-tensor multiplier M"),
        F("shift", 53, SHIFT, "per-tensor shift s"),
        F("zero_point", 61, INT8, "output zero point"),
        F("clamp_lo", 69, INT8, "lowest output"),
        F("clamp_hi", 77, INT8, "highest output"),
        F("per_channel", 85, FLAG, "1: M and s per column from the table"),
        F("table", 86, SPAD_ADDR, "per-channel table: 8 bytes per column"),
        F("bias_row", 108, FLAG, "1: add the accumulator row at `bias` to every row first"),
        F("bias", 109, ACC_ADDR19, "bias row: cols int32 words (a convolution's bias, one per output channel)"),
    ), "Sets the REQUANT parameters. The reset values are the identity (2^30 * 2^-(31-1) = 1), without a bias.",
        "vector-config", (_ordered("clamp_lo", "clamp_hi"),),
        reset=_reset(multiplier=1 << 30, shift=-1, zero_point=0, clamp_lo=-128, clamp_hi=127, per_channel=0, table=0,
                     bias_row=0, bias=0), **_CONFIG),
    InstrSpec("CONFIG_CLAMP", 0x11, Engine.VECTOR, (
        F("lo", 22, INT32, "lower bound"),
        F("hi", 54, INT32, "upper bound"),
    ), "Sets the CLAMP bounds.", "vector-config", (_ordered("lo", "hi"),),
        reset=_reset(lo=-(1 << 31), hi=(1 << 31) - 1), **_CONFIG),
    InstrSpec("CONFIG_POOL", 0x12, Engine.VECTOR, (
        F("kh", 22, WINDOW8, "window height"),
        F("kw", 30, WINDOW8, "window width"),
        F("stride_h", 38, WINDOW8, "vertical stride"),
        F("stride_w", 46, WINDOW8, "horizontal stride"),
        F("pad_top", 54, PAD8, "padding rows above"),
        F("pad_bottom", 62, PAD8, "padding rows below"),
        F("pad_left", 70, PAD8, "padding columns left"),
        F("pad_right", 78, PAD8, "padding columns right"),
        F("count_pad", 86, FLAG, "avg: 1 counts padding cells (as pad_value), 0 skips them"),
        F("pad_value", 87, INT8, "avg with count_pad 1: the value of a padding cell (the zero point)"),
    ), "Sets the POOL window.", "vector-config", (_pads_below_window,),
        reset=_reset(kh=1, kw=1, stride_h=1, stride_w=1, pad_top=0, pad_bottom=0, pad_left=0, pad_right=0,
                     count_pad=0, pad_value=0), **_CONFIG),
    InstrSpec("LUT_LOAD", 0x13, Engine.VECTOR, (
        F("src", 22, SPAD_ADDR, "256-byte table"),
    ), "`lut[i] = spad[src + i]` for i < 256: the table LUT applies (sigmoid, tanh, exp, gelu... precomputed "
       "for the input and output quantisation). Reset: lut[i] = i - 128 (the identity).", "vector-config",
       semantics=vector.lut_load, extents=vector.lut_load_extents, timing=lanes(vector.lut_load_work)),
    *(_binary(op, 0x18 + i) for i, op in enumerate(_BINARY)),
    *(_immediate(op, 0x20 + i) for i, op in enumerate(_BINARY)),
    InstrSpec("REQUANT", 0x28, Engine.VECTOR, (
        F("dst", 22, SPAD_ADDR, "int8 result, rows x cols dense"),
        F("src", 44, ACC_ADDR, "int32 source, rows x cols dense"),
        F("rows", 64, COUNT16, "rows"),
        F("cols", 80, COUNT16, "elements per row (channels)"),
    ), """\
For r < rows, c < cols: x = acc[src + r*cols + c], plus acc[bias + c] when bias_row is 1 (an exact sum);
`spad[dst + r*cols + c] = min(max(q + zero_point,
clamp_lo), clamp_hi)` with q = round(x * M / 2^(31 + s)), rounding half to even:
with S = 31 + s and t = x * M, q = t if S = 0, else q = floor(t / 2^S), plus 1 when the remainder
exceeds 2^(S-1), or equals it and floor(t / 2^S) is odd. M and s
are CONFIG_REQUANT's multiplier and shift, or with per_channel 1 the table entry of column c: M is the
little-endian int32 at spad[table + 8c .. table + 8c + 3] and s the int8 at spad[table + 8c + 4]
(bytes 5..7 unused); an entry with M < 0 or s outside -31..31 is a fault.""", "vector-unary",
              semantics=vector.requant, extents=vector.requant_extents,
              timing=lanes(vector.rows_by_cols, multiplies=True)),
    InstrSpec("CLAMP", 0x29, Engine.VECTOR, (
        F("dst_space", 22, SPACE, "destination SRAM"),
        F("dst", 23, SRAM_ADDR, "destination, count elements"),
        F("src_space", 45, SPACE, "source SRAM"),
        F("src", 46, SRAM_ADDR, "source, count elements"),
        F("count", 68, COUNT24, "elements"),
    ), "For i < count: `mem(dst_space, dst + i) = sat(dst_space, min(max(mem(src_space, src + i), lo), hi))` "
       "with CONFIG_CLAMP's bounds. ReLU on quantised data is CLAMP with lo = the zero point.", "vector-unary",
       semantics=vector.clamp, extents=vector.unary_extents, timing=lanes(vector.count)),
    InstrSpec("LUT", 0x2A, Engine.VECTOR, (
        F("dst", 22, SPAD_ADDR, "int8 result"),
        F("src", 44, SPAD_ADDR, "int8 source"),
        F("count", 66, COUNT24, "elements"),
    ), "For i < count: `spad[dst + i] = lut[spad[src + i] + 128]` (the table LUT_LOAD set).", "vector-unary",
       semantics=vector.lut, extents=vector.lut_extents, timing=lanes(vector.count)),
    InstrSpec("POOL", 0x2B, Engine.VECTOR, (
        F("op", 22, POOL_OP, "max or avg"),
        F("dst", 23, SPAD_ADDR, "int8 result, OH x OW x channels dense"),
        F("src", 45, SPAD_ADDR, "int8 image, height x width x channels dense"),
        F("height", 67, COUNT12, "image height H"),
        F("width", 79, COUNT12, "image width W"),
        F("channels", 91, COUNT16, "channels C"),
    ), """\
Pools an H x W x C int8 image, element (y, x, c) at spad[src + (y*W + x)*C + c], with CONFIG_POOL's window:
OH = (H + pad_top + pad_bottom - kh) div stride_h + 1 and OW = (W + pad_left + pad_right - kw) div stride_w + 1
(fault if either is below 1); result (oy, ox, c) goes to spad[dst + (oy*OW + ox)*C + c]. The window of
(oy, ox) holds cells (oy*stride_h + i - pad_top, ox*stride_w + j - pad_left) for i < kh, j < kw; cells
outside the image are padding. op = max: the maximum over the window's image cells. op = avg: with
count_pad 1, t = sum of the window with padding cells worth pad_value and n = kh*kw; with count_pad 0,
t = sum of the image cells and n = their number; the result is t / n rounded half to even.""", "vector-unary",
              semantics=vector.pool, extents=vector.pool_extents, timing=lanes(vector.pool_work)),
    InstrSpec("REDUCE", 0x2C, Engine.VECTOR, (
        F("op", 22, REDUCE_OP, "sum or max"),
        F("accumulate", 23, FLAG, "1: combine with the destination's previous value"),
        F("dst", 24, ACC_ADDR, "int32 result, cols elements"),
        F("src_space", 44, SPACE, "source SRAM"),
        F("src", 45, SRAM_ADDR, "source, rows x cols dense"),
        F("rows", 67, COUNT16, "rows reduced"),
        F("cols", 83, COUNT16, "elements per row (channels)"),
    ), """\
For c < cols: with x(r) = mem(src_space, src + r*cols + c), v = the sum (op sum) or maximum (op max) of x(r)
over r < rows; with accumulate 1, v = acc[dst + c] + v (sum) or max(acc[dst + c], v) (max);
`acc[dst + c] = sat(acc, v)`. Global average pooling is REDUCE sum then REQUANT by 1/rows.""",
        "vector-unary", semantics=vector.reduce, extents=vector.reduce_extents, timing=lanes(vector.rows_by_cols)),
    InstrSpec("LUT32", 0x2D, Engine.VECTOR, (
        F("dst", 22, ACC_ADDR, "int32 result, count elements"),
        F("src", 42, ACC_ADDR, "int32 indices, count elements"),
        F("table", 62, SPAD_ADDR, "256 little-endian int32 entries (1 KiB)"),
        F("count", 84, COUNT24, "elements"),
        F("base", 108, INT16, "added to each index before it is clamped"),
    ), """\
For i < count: j = min(max(acc[src + i] + base, 0), 255); `acc[dst + i]` = the little-endian int32 at
spad[table + 4j .. table + 4j + 3]. A 256-entry table of 32-bit values, indexed by an accumulator value:
the exponentials of an int8 softmax, exp(-scale * j) in fixed point, are its case in point.""",
        "vector-unary", semantics=vector.lut32, extents=vector.lut32_extents, timing=lanes(vector.count)),
    InstrSpec("VDIV", 0x2E, Engine.VECTOR, (
        F("dst_space", 22, SPACE, "destination SRAM"),
        F("dst", 23, SRAM_ADDR, "destination, rows x cols dense"),
        F("src1_space", 45, SPACE, "dividend SRAM"),
        F("src1", 46, SRAM_ADDR, "dividend a, rows x cols dense"),
        F("src2_space", 68, SPACE, "divisor SRAM"),
        F("src2", 69, SRAM_ADDR, "divisor b: rows x cols dense, or one row of cols"),
        F("rows", 91, COUNT16, "rows"),
        F("cols", 107, COUNT12, "elements per row"),
        F("bcast", 119, FLAG, "1: b is a single row repeated for every row"),
        F("shift", 120, SHIFT5, "the dividend's left shift s"),
    ), """\
For r < rows, c < cols, with a and b read as for VADD: `mem(dst_space, dst + r*cols + c) = sat(dst_space, q)`
where q = a * 2^s / b rounded to the nearest integer, ties to the even one (exact: the dividend is
formed in 64 bits). b = 0 is a fault. Normalising by a sum (softmax) is VDIV with the sum broadcast.""",
        "vector-divide", semantics=vector.divide, extents=vector.binary_extents,
        timing=lanes(vector.divide_work, multiplies=True)),
    InstrSpec("VMAC", 0x2F, Engine.VECTOR, (
        F("dst", 22, ACC_ADDR, "int32 accumulators, rows x cols dense"),
        F("src", 42, SPAD_ADDR, "int8 image: rows of cols elements, pitch bytes apart"),
        F("wgt", 64, SPAD_ADDR, "int8 weights, one row of cols"),
        F("rows", 86, COUNT12, "rows (output pixels)"),
        F("cols", 98, COUNT13, "elements per row (channels)"),
        F("pitch", 111, STRIDE16, "scratchpad bytes between consecutive rows of src"),
        F("acc_mode", 127, FLAG, "0: overwrite the accumulators, 1: add to them"),
    ), """\
For r < rows, c < cols: `acc[dst + r*cols + c] = sat(acc, p + spad[src + r*pitch + c] * spad[wgt + c])` with
p = acc[dst + r*cols + c] when acc_mode is 1, else 0. One tap of a depthwise convolution over a row of
output pixels: src is the tap's input pixel of each output pixel (pitch = stride x channels in an image of
contiguous channels), wgt the tap's weight per channel, each lane a channel.""", "vector-mac",
              semantics=vector.mac, extents=vector.mac_extents, timing=lanes(vector.rows_by_cols)),
    InstrSpec("VADD_LUT", 0x30, Engine.VECTOR, (
        F("dst", 22, SPAD_ADDR, "int8 result, count elements"),
        F("src1", 44, SPAD_ADDR, "first int8 source a, count elements"),
        F("src2", 66, SPAD_ADDR, "second int8 source b, count elements"),
        F("count", 88, COUNT24, "elements"),
        F("offset", 112, INT16, "added to each sum before it saturates (minus an Add's zero point)"),
    ), """\
For i < count: `spad[dst + i] = lut[min(max(spad[src1 + i] + spad[src2 + i] + offset, -128), 127) + 128]` (the
table LUT_LOAD set). A residual Add of two int8 tensors and the element-wise step after it (a ReLU, a
Rescale: any int8 -> int8 table) in one pass: VADD (offset 0), or VADD into the accumulator then VSUBI of
the zero point (offset = -zero), followed by LUT, give the same bytes.""", "vector-binary",
              semantics=vector.add_lut, extents=vector.add_lut_extents, timing=lanes(vector.count)),
    InstrSpec("REQUANT_LUT", 0x31, Engine.VECTOR, (
        F("dst", 22, SPAD_ADDR, "int8 result, rows x cols dense"),
        F("src", 44, ACC_ADDR, "int32 source, rows x cols dense"),
        F("rows", 64, COUNT16, "rows"),
        F("cols", 80, COUNT16, "elements per row (channels)"),
    ), """\
REQUANT with its result looked up in the table LUT_LOAD set: for r < rows, c < cols, with y the int8 REQUANT
would store there (CONFIG_REQUANT's parameters, bias row and clamp), `spad[dst + r*cols + c] = lut[y + 128]`.
A layer's requantization and the activation table after it (a SiLU, a HardSwish: any int8 -> int8 table) in one
pass: REQUANT followed by LUT gives the same bytes.""", "vector-unary",
              semantics=vector.requant_lut, extents=vector.requant_extents,
              timing=lanes(vector.rows_by_cols, multiplies=True)),
    InstrSpec("REQUANT_MUL", 0x32, Engine.VECTOR, (
        F("dst", 22, SPAD_ADDR, "int8 result, rows x cols dense"),
        F("src", 44, SPAD_ADDR, "int8 source, rows x cols dense"),
        F("scale", 66, ACC_ADDR, "int32 row of cols factors, one per column"),
        F("rows", 86, COUNT16, "rows"),
        F("cols", 102, COUNT16, "elements per row (channels)"),
    ), """\
REQUANT of a product: for r < rows, c < cols, x = spad[src + r*cols + c] * acc[scale + c] (exact, in 64 bits)
takes REQUANT's place of acc[src + r*cols + c] (CONFIG_REQUANT's parameters, bias row and clamp): `spad[dst +
r*cols + c]` = the int8 REQUANT would store. A channel gate (an image times a per-channel factor computed at run
time, squeeze-and-excitation) in one pass: VMUL into the accumulator followed by REQUANT gives the same bytes.""",
        "vector-unary", semantics=vector.requant_mul, extents=vector.requant_mul_extents,
        timing=lanes(vector.rows_by_cols, multiplies=True)),
    InstrSpec("LUT_VADD_LUT", 0x33, Engine.VECTOR, (
        F("dst", 22, SPAD_ADDR, "int8 result, count elements"),
        F("src1", 44, SPAD_ADDR, "first int8 source a, count elements"),
        F("src2", 66, SPAD_ADDR, "second int8 source b, count elements, looked up before the add"),
        F("table", 88, SPAD_ADDR, "256 little-endian int16 entries (512 bytes), indexed by b"),
        F("count", 110, COUNT16, "elements"),
    ), """\
For i < count, with t(j) the little-endian int16 at spad[table + 2j .. table + 2j + 1]: `spad[dst + i] =
lut[min(max(spad[src1 + i] + t(spad[src2 + i] + 128), -128), 127) + 128]` (lut: the table LUT_LOAD set). A
residual Add whose operand is rescaled first, with the element-wise step after it, in one pass: the operand's
Rescale minus the Add's zero point is t (exact in 16 bits), so LUT of the operand, VADD_LUT give the same
bytes.""", "vector-binary", semantics=vector.lut_add_lut, extents=vector.lut_add_lut_extents,
              timing=lanes(vector.count)),
]

INSTRUCTIONS: tuple[InstrSpec, ...] = (*CONTROL, *DMA, *MATRIX, *VECTOR)
validate_table(INSTRUCTIONS)

BY_MNEMONIC: dict[str, InstrSpec] = {s.mnemonic: s for s in INSTRUCTIONS}
BY_OPCODE: dict[int, InstrSpec] = {s.opcode: s for s in INSTRUCTIONS}
