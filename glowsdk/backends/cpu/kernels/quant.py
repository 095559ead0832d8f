"""Quantized arithmetic per element: the quant family and the quantized Add, Sub, Mul, Max, Min.

Every function here is a `scalar` (table.py): one result element from one
element of each source, so operator stacking fuses a Conv accumulator's Rescale
with the Clamp after it like any float chain. Quantized values are their raw
integers (stored like int8, uint8, int32); the scale and offset of each operand
are compile-time constants taken from its type, so a Rescale's fixed-point
multiplier and shift are immediates. The rules are primitives.md's, bit-exact
with the reference kernels (reference/kernels/quant.py, glowsdk/numerics.py):
integer work is exact in i32 (8-bit kinds) or i64, rounding is half to even, and
every narrowing saturates. A per-channel type (one scale and offset per index
along an axis) puts its constants in tables indexed by the element's channel,
found from its flat position in the result (`ctx.position`, set by the
element-wise kernel). Mul's operands are per-tensor by its type rule.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from llvmlite import ir

from ....graph.nodes import quant
from ....graph.types import ElemKind
from ..codegen.kinds import COMPUTE_FLOATS, F32, F64, I32, I64, value_type
from ..codegen.module import KernelContext
from .table import Scalar

QUANTIZED = frozenset({ElemKind.QINT8, ElemKind.QUINT8, ElemKind.QINT32})
BYTE_QUANTIZED = frozenset({ElemKind.QINT8, ElemKind.QUINT8})
STORED_AS = frozenset(quant.storage(kind) for kind in QUANTIZED)
"""The plain kinds a Reinterpret attaches a scale and offset to (int8, uint8, int32)."""


def is_signed(kind: ElemKind) -> bool:
    """Whether a plain or quantized integer kind's raw integers are signed."""
    return quant.storage(kind).dtype.kind == "i"


def work_type(kind: ElemKind) -> ir.IntType:
    """The integer type exact sums of two raw values of `kind` fit in: i32 for 8 bits, else i64."""
    return I32 if kind.itemsize == 1 else I64


def widen(builder: ir.IRBuilder, value: ir.Value, kind: ElemKind, to: ir.IntType) -> ir.Value:
    """A raw integer of `kind` as the wider integer type `to`, by its signedness."""
    if value.type.width == to.width:
        return value
    return builder.sext(value, to) if is_signed(kind) else builder.zext(value, to)


def saturate(builder: ir.IRBuilder, value: ir.Value, kind: ElemKind) -> ir.Value:
    """A wide signed integer clamped into `kind`'s range and narrowed to its raw integers."""
    low, high = (ir.Constant(value.type, bound) for bound in quant.integer_range(kind))
    value = builder.select(builder.icmp_signed("<", value, low), low, value)
    value = builder.select(builder.icmp_signed(">", value, high), high, value)
    return builder.trunc(value, value_type(kind))


def _convert_float(builder: ir.IRBuilder, value: ir.Value, to: ir.Type) -> ir.Value:
    """A float value rounded (or widened exactly) to the float type `to`."""
    if value.type == to:
        return value
    return builder.fpext(value, to) if to == F64 else builder.fptrunc(value, to)


def _result(instr: Any) -> Any:
    return instr.types[0]


def along(type_: Any, attr: str) -> list:
    """A quantized type's scales or offsets, one per channel (one in all for a per-tensor type)."""
    value = getattr(type_, attr)
    return list(value) if type_.per_channel else [value]


def per_channel(ctx: KernelContext, instr: Any, type_: Any, values: Sequence[int | float],
                element: ir.Type, name: str) -> ir.Value:
    """`values[c]` for the current element's channel c along `type_`'s axis (`type_` has the
    result's shape), as a constant when every channel has the same value."""
    if len(set(values)) == 1:
        return ir.Constant(element, values[0])
    builder = ctx.builder
    inner = math.prod(type_.shape[type_.axis + 1:])
    channel = builder.urem(builder.udiv(ctx.position(), ir.Constant(I64, inner)),
                           ir.Constant(I64, type_.shape[type_.axis]))
    return ctx.lookup(ctx.table(name, element, list(values)), element, channel)


def _channels(source: Any, out: Any) -> Any:
    """The per-channel one of two same-shape types (either, when neither is)."""
    return source if source.per_channel else out


# -- the quant family -----------------------------------------------------------------------------
def quantize(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
    """q = saturate(round_half_even(x / scale) + offset), x and scale rounded to `precision` first."""
    builder, out = ctx.builder, _result(instr)
    precision = value_type(instr.precision)
    x = _convert_float(builder, args[0], precision)
    scales = [precision_value(scale, instr.precision) for scale in along(out, "scale")]
    scaled = builder.fdiv(x, per_channel(ctx, instr, out, scales, precision, "scale"))
    rounded = builder.call(ctx.intrinsic("llvm.roundeven", [precision]), [scaled])
    offsets = [float(offset) for offset in along(out, "offset")]
    shifted = builder.fadd(_convert_float(builder, rounded, F64), per_channel(ctx, instr, out, offsets, F64, "offset"))
    low, high = (ir.Constant(F64, float(bound)) for bound in quant.integer_range(out.elem))
    clamped = builder.select(builder.fcmp_ordered("<", shifted, low), low, shifted)
    clamped = builder.select(builder.fcmp_ordered(">", clamped, high), high, clamped)
    target = value_type(out.elem)
    name = "llvm.fptosi.sat" if is_signed(out.elem) else "llvm.fptoui.sat"
    convert = ctx.intrinsic(name, [target, F64], ir.FunctionType(target, [F64]))
    return builder.call(convert, [clamped])


def precision_value(scale: float, precision: ElemKind) -> float:
    """The scale as the float kind `precision` holds it."""
    return float(precision.dtype.type(scale))


def dequantize(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
    """y = (float32(q) - float32(offset)) * float32(scale) in float32, then rounded to `elem`."""
    builder, source = ctx.builder, instr.inputs[0].type
    q = args[0]
    as_float = builder.sitofp(q, F32) if is_signed(source.elem) else builder.uitofp(q, F32)
    offsets = [precision_value(offset, ElemKind.FLOAT32) for offset in along(source, "offset")]
    scales = [precision_value(scale, ElemKind.FLOAT32) for scale in along(source, "scale")]
    shifted = builder.fsub(as_float, per_channel(ctx, instr, source, offsets, F32, "offset"))
    y = builder.fmul(shifted, per_channel(ctx, instr, source, scales, F32, "scale"))
    return _convert_float(builder, y, value_type(_result(instr).elem))


def rescale(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
    """q' = saturate(round_half_even((q - offset) * M / 2^(31+s)) + offset'), all in i64."""
    builder, source, out = ctx.builder, instr.inputs[0].type, _result(instr)
    scales, results = along(source, "scale"), along(out, "scale")
    count = max(len(scales), len(results))  # one per channel of whichever side is per-channel
    pairs = [quant.fixed_point_multiplier(scales[c % len(scales)], results[c % len(results)]) for c in range(count)]
    channels = _channels(source, out)
    offset = per_channel(ctx, instr, source, along(source, "offset"), I64, "offset")
    centred = builder.sub(widen(builder, args[0], source.elem, I64), offset)
    product = builder.mul(centred, per_channel(ctx, instr, channels, [m for m, _ in pairs], I64, "multiplier"))
    scaled = round_shift(builder, product, per_channel(ctx, instr, channels, [31 + s for _, s in pairs], I64, "shift"))
    return saturate(builder, builder.add(scaled, per_channel(ctx, instr, out, along(out, "offset"), I64, "offset")),
                    out.elem)


def round_shift(builder: ir.IRBuilder, t: ir.Value, total: ir.Value) -> ir.Value:
    """t / 2^total rounded half to even (numerics.round_shift), for 0 <= total <= 62 (constants fold)."""
    one = ir.Constant(t.type, 1)
    unit = builder.shl(one, total)
    floor = builder.ashr(t, total)
    remainder = builder.and_(t, builder.sub(unit, one))
    half = builder.lshr(unit, one)  # 0 for a zero shift, where nothing rounds
    odd = builder.trunc(floor, ir.IntType(1))
    shifted = builder.icmp_signed(">", total, ir.Constant(t.type, 0))
    tie_up = builder.and_(builder.and_(builder.icmp_signed("==", remainder, half), odd), shifted)
    up = builder.or_(builder.icmp_signed(">", remainder, half), tie_up)
    return builder.add(floor, builder.zext(up, t.type))


def reinterpret(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
    """The same raw integers under another type."""
    return args[0]


def rescale_accepts(node: Any) -> bool:
    """Not per-channel on both sides along different axes (a table per pair of channels)."""
    source, out = node.inputs[0].type, node.types[0]
    return not (source.per_channel and out.per_channel and source.axis != out.axis)


def quantize_accepts(node: Any) -> bool:
    """A `precision` this backend computes in."""
    return node.precision in COMPUTE_FLOATS


# -- quantized forms of the arithmetic kinds ------------------------------------------------------
def quantized_or(plain: Scalar, quantized: Scalar) -> Scalar:
    """`quantized` where the result is quantized, `plain` otherwise."""
    def emit(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
        chosen = quantized if _result(instr).elem.is_quantized else plain
        return chosen(ctx, instr, args)
    return emit


def add(sign: int) -> Scalar:
    """Add (sign 1) or Sub (sign -1) of operands sharing the result's type: saturate(q_x +- q_y -+ offset)."""
    def emit(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
        builder, out = ctx.builder, _result(instr)
        wide = work_type(out.elem)
        x, y = (widen(builder, a, out.elem, wide) for a in args)
        combined = builder.add(x, y) if sign > 0 else builder.sub(x, y)
        offsets = [sign * offset for offset in along(out, "offset")]
        exact = builder.sub(combined, per_channel(ctx, instr, out, offsets, wide, "offset"))
        return saturate(builder, exact, out.elem)
    return emit


def mul(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
    """8-bit quantized operands: the exact int32 (q_x - offset_x) * (q_y - offset_y)."""
    builder = ctx.builder
    centred = [builder.sub(widen(builder, a, v.type.elem, I32), ir.Constant(I32, v.type.offset))
               for a, v in zip(args, instr.inputs)]
    return builder.mul(*centred)


def extremum(predicate: str) -> Scalar:
    """Max (">") or Min ("<") of operands sharing one type: the larger or smaller raw q."""
    def emit(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
        builder = ctx.builder
        compare = builder.icmp_signed if is_signed(_result(instr).elem) else builder.icmp_unsigned
        return builder.select(compare(predicate, *args), *args)
    return emit


def mul_accepts(node: Any) -> bool:
    """Mul: plain operands, or 8-bit quantized ones (the int32q result of primitives.md)."""
    if not node.types[0].elem.is_quantized:
        return True
    return all(v.type.elem in BYTE_QUANTIZED for v in node.present_inputs())
