"""Cast on the CPU backend: every pair of plain element kinds, bit-exact with the reference.

The rules are primitives.md's (Cast) and reference/kernels/convert.py's. A narrow
source is first widened exactly, as the reference does: a narrow float through a
compile-time table of its float32 values (one entry per code), a 4- or 2-bit
integer by sign- or zero-extending its bits to a byte. Only conversions *into*
a narrow kind then need rules of their own, and they work on float64, which
holds every source value exactly (int64 beyond 2**53 only, far out of range):
- float8 and float4e2m1: the magnitude is located among the kind's sorted
  finite magnitudes (a branch-free binary search over a constant table, which
  ends with one virtual magnitude past the largest, standing for overflow), and
  rounded to the nearer neighbour, ties to the even code. Codes of one sign are
  in magnitude order, so the index is the code, and the overflow index is the
  kind's inf (e5m2) or NaN code;
- float8e8m0: the exponent field of the float64, moved up by round_mode;
- int4/uint4/int2/uint2: the low bits of the value truncated toward zero.
Plain kinds convert with LLVM's conversions: float to integer saturates (out of
range is undefined in ONNX, so any defined value will do), integers wrap, and a
float64 becomes float16 through float32 rounded to odd, so it is rounded once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import ml_dtypes
import numpy as np
from llvmlite import ir

from ....graph.nodes.elementwise import SATURATING
from ....graph.types import ElemKind
from ..codegen.kinds import (BOOL, COMPUTE_INTS, F32, F64, FLOATS, I8, I32, I64, i64, in_kind, is_float,
                             is_signed, value_type)
from ..codegen.module import KernelContext

NARROW = frozenset(kind for kind in ElemKind if kind.is_narrow)
CASTABLE = FLOATS | COMPUTE_INTS | BOOL | NARROW
"""The element kinds Cast converts from and to (all but the quantized ones)."""


@dataclass(frozen=True)
class NarrowFloat:
    """The encoding of a float8 or float4 kind: its sign bit, its NaN code (ORed with the
    source's sign), and whether it lacks -0 (the fnuz kinds)."""

    sign: int
    nan: int
    unsigned_zero: bool = False

    def magnitudes(self, kind: ElemKind) -> list[float]:
        """The finite non-negative values in code order, then the overflow magnitude (the next
        value the exponent range would have), padded with inf to a power of two past it."""
        values = np.arange(self.sign, dtype=np.uint8).view(kind.dtype).astype(np.float64)
        finite = [float(v) for v in values if np.isfinite(v)]
        finite.append(2 * finite[-1] - finite[-2])
        size = 1 << len(finite).bit_length()  # room for the probe just past the overflow
        return finite + [float("inf")] * (size - len(finite))


NARROW_FLOATS = {
    ElemKind.FLOAT8E4M3FN: NarrowFloat(0x80, 0x7F),
    ElemKind.FLOAT8E4M3FNUZ: NarrowFloat(0x80, 0x80, unsigned_zero=True),
    ElemKind.FLOAT8E5M2: NarrowFloat(0x80, 0x7E),
    ElemKind.FLOAT8E5M2FNUZ: NarrowFloat(0x80, 0x80, unsigned_zero=True),
    ElemKind.FLOAT4E2M1: NarrowFloat(0x08, 0x08),  # NaN becomes -0 (as the ONNX reference has it)
}
E8M0_BIAS, E8M0_NAN = 127, 0xFF
NARROW_INT_BITS = {ElemKind.INT4: 4, ElemKind.UINT4: 4, ElemKind.INT2: 2, ElemKind.UINT2: 2}


def cast(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
    """The Cast scalar: args[0] of the source's kind converted to `instr.to`."""
    x, source = widen(ctx, args[0], instr.inputs[0].type.elem)
    target = instr.to
    if target is ElemKind.FLOAT8E8M0:
        return _to_e8m0(ctx, _as_f64(ctx.builder, x, source), instr.saturate, instr.round_mode)
    if target in NARROW_FLOATS:
        saturate = instr.saturate or target not in SATURATING
        return _to_narrow_float(ctx, _as_f64(ctx.builder, x, source), target, saturate)
    if target in NARROW_INT_BITS:
        return _to_narrow_int(ctx, x, source, target)
    return convert(ctx, x, source, target)


def widen(ctx: KernelContext, x: ir.Value, kind: ElemKind) -> tuple[ir.Value, ElemKind]:
    """A narrow kind's raw byte as the plain kind holding its value exactly (float32, int8 or
    uint8), with that kind; any other value unchanged."""
    builder = ctx.builder
    if kind in NARROW_INT_BITS:
        spare = ir.Constant(I8, 8 - NARROW_INT_BITS[kind])
        if ml_dtypes.iinfo(kind.dtype).min < 0:
            return builder.ashr(builder.shl(x, spare), spare), ElemKind.INT8
        return builder.lshr(builder.shl(x, spare), spare), ElemKind.UINT8
    if kind.is_narrow_float:
        count = 2 * NARROW_FLOATS[kind].sign if kind in NARROW_FLOATS else 256
        values = np.arange(count, dtype=np.uint8).view(kind.dtype).astype(np.float32).view(np.uint32)
        table = ctx.table(f"{kind.value}.values", I32, [int(v) for v in values])
        index = builder.and_(builder.zext(x, I64), i64(count - 1))
        return builder.bitcast(ctx.lookup(table, I32, index), F32), ElemKind.FLOAT32
    return x, kind


def convert(ctx: KernelContext, x: ir.Value, source: ElemKind, target: ElemKind) -> ir.Value:
    """A value of plain `source` as plain `target`: floats truncate toward zero into integers
    (saturating), integers wrap when narrowed, anything to bool is != 0, half kinds round."""
    builder = ctx.builder
    to_type = value_type(target)
    if target is ElemKind.BOOL:
        if is_float(source):
            return builder.fcmp_unordered("!=", x, ir.Constant(x.type, 0.0))
        return builder.icmp_unsigned("!=", x, ir.Constant(x.type, 0))
    if source is ElemKind.BOOL:
        return builder.uitofp(x, to_type) if is_float(target) else builder.zext(x, to_type)
    if is_float(source):
        if is_float(target):
            if x.type == F64 and target is ElemKind.FLOAT16:
                return in_kind(builder, round_to_odd(ctx, x), target)
            if x.type != to_type:
                x = builder.fpext(x, to_type) if to_type == F64 else builder.fptrunc(x, to_type)
            return in_kind(builder, x, target)
        name = "llvm.fptosi.sat" if is_signed(target) else "llvm.fptoui.sat"
        return builder.call(ctx.intrinsic(name, [to_type, x.type], ir.FunctionType(to_type, [x.type])), [x])
    signed = is_signed(source)
    if is_float(target):
        return in_kind(builder, builder.sitofp(x, to_type) if signed else builder.uitofp(x, to_type), target)
    if x.type.width == to_type.width:
        return x
    if x.type.width > to_type.width:
        return builder.trunc(x, to_type)
    return builder.sext(x, to_type) if signed else builder.zext(x, to_type)


def float64_to_integer(ctx: KernelContext, x: ir.Value, target: ElemKind) -> ir.Value:
    """float64 `x` as numpy's astype gives it in integer `target` on x86-64 (C's conversion):
    truncated into int32 (kinds of up to 32 bits but uint32) or int64, where NaN and values
    out of that range become its lowest value (the CPU's "integer indefinite"), then wrapped."""
    builder = ctx.builder
    via = I32 if target.dtype.itemsize < 4 or target is ElemKind.INT32 else I64
    bound = float(2 ** (via.width - 1))
    inside = builder.and_(builder.fcmp_ordered("<", x, ir.Constant(F64, bound)),
                          builder.fcmp_ordered(">", x, ir.Constant(F64, -bound - 1)))
    whole = builder.call(ctx.intrinsic("llvm.fptosi.sat", [via, F64], ir.FunctionType(via, [F64])), [x])
    whole = builder.select(inside, whole, ir.Constant(via, -(1 << (via.width - 1))))
    to_type = value_type(target)
    if to_type.width == via.width:
        return whole
    return builder.trunc(whole, to_type) if to_type.width < via.width else builder.sext(whole, to_type)


def round_to_odd(ctx: KernelContext, x: ir.Value) -> ir.Value:
    """float64 to float32, truncated, with the last bit set if anything was cut off: rounding
    that afterwards to a narrower float rounds as if from `x` itself."""
    builder = ctx.builder
    near = builder.fptrunc(x, F32)
    back = builder.fpext(near, F64)
    fabs = ctx.intrinsic("llvm.fabs", [F64])
    bits = builder.bitcast(near, I32)
    away = builder.fcmp_ordered(">", builder.call(fabs, [back]), builder.call(fabs, [x]))
    bits = builder.select(away, builder.sub(bits, ir.Constant(I32, 1)), bits)
    inexact = builder.zext(builder.fcmp_ordered("!=", back, x), I32)
    return builder.bitcast(builder.or_(bits, inexact), F32)


def _as_f64(builder: ir.IRBuilder, x: ir.Value, kind: ElemKind) -> ir.Value:
    if is_float(kind):
        return builder.fpext(x, F64) if x.type != F64 else x
    return builder.sitofp(x, F64) if is_signed(kind) else builder.uitofp(x, F64)


def _sign_bit(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return builder.icmp_signed("<", builder.bitcast(x, I64), i64(0))


def _to_narrow_float(ctx: KernelContext, x: ir.Value, kind: ElemKind, saturate: bool) -> ir.Value:
    """The code of `kind` nearest float64 `x`, ties to even (see the module docstring)."""
    builder = ctx.builder
    form = NARROW_FLOATS[kind]
    magnitudes = form.magnitudes(kind)
    overflow = magnitudes.index(float("inf")) - 1
    table = ctx.table(f"{kind.value}.magnitudes", F64, magnitudes)
    magnitude = builder.call(ctx.intrinsic("llvm.fabs", [F64]), [x])
    if saturate:
        largest = ir.Constant(F64, magnitudes[overflow - 1])
        magnitude = builder.select(builder.fcmp_ordered(">", magnitude, largest), largest, magnitude)
    below = i64(0)  # the largest index whose magnitude is <= |x|
    step = len(magnitudes) // 2
    while step:
        probe = builder.add(below, i64(step))
        fits = builder.fcmp_ordered("<=", ctx.lookup(table, F64, probe), magnitude)
        below = builder.select(fits, probe, below)
        step //= 2
    below = builder.select(builder.icmp_unsigned(">", below, i64(overflow)), i64(overflow), below)
    low = builder.fsub(magnitude, ctx.lookup(table, F64, below))
    high = builder.fsub(ctx.lookup(table, F64, builder.add(below, i64(1))), magnitude)
    odd = builder.trunc(below, ir.IntType(1))
    up = builder.or_(builder.fcmp_ordered("<", high, low), builder.and_(builder.fcmp_ordered("==", high, low), odd))
    code = builder.trunc(builder.add(below, builder.zext(up, I64)), I8)
    negative = _sign_bit(builder, x)
    if form.unsigned_zero:
        negative = builder.and_(negative, builder.icmp_unsigned("!=", code, ir.Constant(I8, 0)))
    sign = builder.select(negative, ir.Constant(I8, form.sign), ir.Constant(I8, 0))
    nan = builder.fcmp_unordered("uno", x, x)
    return builder.or_(builder.select(nan, ir.Constant(I8, form.nan), code), sign)


def _to_e8m0(ctx: KernelContext, x: ir.Value, saturate: bool, round_mode: str) -> ir.Value:
    """The e8m0 code of |x|: its power of two by round_mode, then range-checked."""
    builder = ctx.builder
    bits = builder.bitcast(x, I64)
    power = builder.sub(builder.and_(builder.lshr(bits, i64(52)), i64(0x7FF)), i64(1023))
    mantissa = builder.and_(bits, i64((1 << 52) - 1))
    if round_mode == "up":
        power = builder.add(power, builder.zext(builder.icmp_unsigned("!=", mantissa, i64(0)), I64))
    elif round_mode == "nearest":  # fraction >= 1.5: the top mantissa bit
        power = builder.add(power, builder.zext(builder.icmp_unsigned(">=", mantissa, i64(1 << 51)), I64))
    invalid = builder.fcmp_unordered("uno", x, x)
    if not saturate:
        outside = builder.icmp_unsigned(">", builder.add(power, i64(E8M0_BIAS)), i64(2 * E8M0_BIAS))
        invalid = builder.or_(invalid, outside)
    clamped = builder.select(builder.icmp_signed(">", power, i64(E8M0_BIAS)), i64(E8M0_BIAS), power)
    clamped = builder.select(builder.icmp_signed("<", clamped, i64(-E8M0_BIAS)), i64(-E8M0_BIAS), clamped)
    code = builder.trunc(builder.add(clamped, i64(E8M0_BIAS)), I8)
    return builder.select(invalid, ir.Constant(I8, E8M0_NAN), code)


def _to_narrow_int(ctx: KernelContext, x: ir.Value, source: ElemKind, kind: ElemKind) -> ir.Value:
    """The low bits of `x` (a float truncated toward zero first; NaN and inf give 0)."""
    builder = ctx.builder
    bits = NARROW_INT_BITS[kind]
    if is_float(source):
        wide = _as_f64(builder, x, source)
        # fmod by 2**bits is exact and keeps the low bits of the truncated value; NaN (from
        # NaN or inf) converts to 0 by fptosi.sat's definition.
        rest = builder.frem(wide, ir.Constant(F64, float(1 << bits)))
        x = builder.call(ctx.intrinsic("llvm.fptosi.sat", [I32, F64], ir.FunctionType(I32, [F64])), [rest])
    if x.type.width > 8:
        x = builder.trunc(x, I8)
    elif x.type.width < 8:
        x = builder.zext(x, I8)
    return builder.and_(x, ir.Constant(I8, (1 << bits) - 1))
