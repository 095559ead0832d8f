"""How element kinds look in LLVM: the type in memory and the type computed on.

Every kind is stored as an integer or float of its byte width (the narrow kinds
one per byte, as numpy holds them), so data movement works on any kind by width
alone. Arithmetic kinds are computed on as LLVM floats or integers, and bool as
i1: it is stored as one byte holding 0 or 1 (numpy's bool), and `load`/`store`
convert between the two. float16 and bfloat16 are stored as 16 bits and computed
on as float32, as numpy and ml_dtypes compute them: `load` widens exactly and
`store` rounds half to even, both by bit arithmetic (no compiler-rt helper, no
F16C needed on the host). The narrow kinds are computed on as their raw byte;
only Cast gives them meaning (kernels/convert.py).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from llvmlite import ir

from ....graph.types import ElemKind

F32, F64 = ir.FloatType(), ir.DoubleType()
I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()

_FLOAT_TYPES = {ElemKind.FLOAT32: F32, ElemKind.FLOAT64: F64}

COMPUTE_FLOATS = frozenset(_FLOAT_TYPES)
"""Float kinds stored as the LLVM float type computed on (kernels that load and store floats
directly, such as MatMul and Conv, handle these)."""
HALF_FLOATS = frozenset({ElemKind.FLOAT16, ElemKind.BFLOAT16})
"""Float kinds stored as 16 bits and computed on as float32 through `load` and `store`."""
FLOATS = COMPUTE_FLOATS | HALF_FLOATS
SIGNED = frozenset({ElemKind.INT8, ElemKind.INT16, ElemKind.INT32, ElemKind.INT64})
UNSIGNED = frozenset({ElemKind.UINT8, ElemKind.UINT16, ElemKind.UINT32, ElemKind.UINT64})
COMPUTE_INTS = SIGNED | UNSIGNED
BOOL = frozenset({ElemKind.BOOL})


def storage_type(kind: ElemKind) -> ir.Type:
    """The LLVM type of one element in memory."""
    if kind in _FLOAT_TYPES:
        return _FLOAT_TYPES[kind]
    return ir.IntType(8 * kind.dtype.itemsize)


def value_type(kind: ElemKind) -> ir.Type:
    """The LLVM type a kernel computes with (i1 for bool, float for the half kinds)."""
    if kind in HALF_FLOATS:
        return F32
    return I1 if kind is ElemKind.BOOL else storage_type(kind)


def is_float(kind: ElemKind) -> bool:
    return kind in FLOATS


def is_signed(kind: ElemKind) -> bool:
    return kind in SIGNED


def i64(value: int) -> ir.Constant:
    """An i64 constant, one object per value (see `vector_constant`)."""
    return _i64(int(value))


@lru_cache(maxsize=None)
def _i64(value: int) -> ir.Constant:
    return ir.Constant(I64, value)


class _Zeros(ir.Constant):
    """A vector of zeros, spelt `zeroinitializer` (16 floats spelt out are 400 characters)."""

    def _get_reference(self) -> str:
        return "zeroinitializer"


def vector_constant(element: ir.Type, values: Sequence[int | float]) -> ir.Constant:
    """The constant vector of `values`, one object per (type, values) in the process. llvmlite
    wraps each lane in a Constant of its own and formats a constant's text once per object: a
    GEMM kernel's masks, splat shuffles and zero vectors, made afresh at each use, were a third of
    the Python time of building and printing resnet50's module."""
    if isinstance(element, (ir.FloatType, ir.DoubleType)):
        # keyed by the exact bits: -0.0 == 0.0, and NaN equals nothing
        return _vector_constant(str(element), element, tuple(float(v).hex() for v in values))
    return _vector_constant(str(element), element, tuple(int(v) for v in values))


@lru_cache(maxsize=None)
def _vector_constant(spelling: str, element: ir.Type, key: tuple[int | str, ...]) -> ir.Constant:
    values = [float.fromhex(v) if isinstance(v, str) else v for v in key]
    zeros = all(v in (0, "0x0.0p+0") for v in key)
    return (_Zeros if zeros else ir.Constant)(ir.VectorType(element, len(values)), values)


def splat_constant(element: ir.Type, value: int | float, lanes: int) -> ir.Constant:
    """`value` in each of `lanes` lanes (see `vector_constant`)."""
    return vector_constant(element, (value,) * lanes)


def element_pointer(builder: ir.IRBuilder, base: ir.Value, kind: ElemKind, index: ir.Value) -> ir.Value:
    """The address of element `index` of a buffer of `kind` starting at `base`."""
    return builder.gep(base, [index], inbounds=True, source_etype=storage_type(kind))


def load(builder: ir.IRBuilder, base: ir.Value, kind: ElemKind, index: ir.Value) -> ir.Value:
    """Element `index` as a compute value."""
    raw = builder.load(element_pointer(builder, base, kind, index), typ=storage_type(kind))
    if kind is ElemKind.BOOL:
        return builder.icmp_unsigned("!=", raw, ir.Constant(I8, 0))
    if kind in HALF_FLOATS:
        return widen_half(builder, raw, kind)
    return raw


def store(builder: ir.IRBuilder, value: ir.Value, base: ir.Value, kind: ElemKind, index: ir.Value) -> None:
    """Write a compute value as element `index`."""
    if kind is ElemKind.BOOL:
        value = builder.zext(value, I8)
    elif kind in HALF_FLOATS:
        value = narrow_half(builder, value, kind)
    builder.store(value, element_pointer(builder, base, kind, index))


def in_kind(builder: ir.IRBuilder, value: ir.Value, kind: ElemKind) -> ir.Value:
    """A computed value as an element of `kind` holds it: float32 rounded to a half kind (what a
    stacked consumer must see, as numpy rounds every operation's result); others unchanged."""
    if kind not in HALF_FLOATS:
        return value
    return widen_half(builder, narrow_half(builder, value, kind), kind)


def _i32(value: int) -> ir.Constant:
    return ir.Constant(I32, value)


def widen_half(builder: ir.IRBuilder, raw: ir.Value, kind: ElemKind) -> ir.Value:
    """The float32 holding exactly the 16-bit float `raw` (an i16) of `kind`."""
    bits = builder.zext(raw, I32)
    if kind is ElemKind.BFLOAT16:
        return builder.bitcast(builder.shl(bits, _i32(16)), F32)
    # float16: move exponent and mantissa into place and rebias; inf/NaN get the float32
    # exponent, subnormals (exponent 0) are their mantissa times 2**-24, exactly.
    sign = builder.shl(builder.and_(bits, _i32(0x8000)), _i32(16))
    shifted = builder.shl(builder.and_(bits, _i32(0x7FFF)), _i32(13))
    exponent = builder.and_(shifted, _i32(0x0F800000))
    normal = builder.add(shifted, _i32(112 << 23))
    special = builder.add(normal, _i32(112 << 23))
    tiny = builder.fmul(builder.uitofp(builder.and_(bits, _i32(0x3FF)), F32), ir.Constant(F32, 2.0 ** -24))
    magnitude = builder.select(builder.icmp_unsigned("==", exponent, _i32(0x0F800000)), special, normal)
    magnitude = builder.select(builder.icmp_unsigned("==", exponent, _i32(0)), builder.bitcast(tiny, I32),
                               magnitude)
    return builder.bitcast(builder.or_(magnitude, sign), F32)


def narrow_half(builder: ir.IRBuilder, value: ir.Value, kind: ElemKind) -> ir.Value:
    """The i16 of `kind` nearest float32 `value`, ties to even; NaN stays NaN with its sign
    (float16 keeps the payload's top bits as numpy does, bfloat16 is the quiet NaN ml_dtypes gives)."""
    bits = builder.bitcast(value, I32)
    sign = builder.and_(bits, _i32(0x80000000))
    magnitude = builder.xor(bits, sign)
    nan = builder.icmp_unsigned(">", magnitude, _i32(0x7F800000))
    if kind is ElemKind.BFLOAT16:
        odd = builder.and_(builder.lshr(bits, _i32(16)), _i32(1))
        rounded = builder.lshr(builder.add(bits, builder.add(_i32(0x7FFF), odd)), _i32(16))
        quiet = builder.or_(builder.lshr(sign, _i32(16)), _i32(0x7FC0))
        return builder.trunc(builder.select(nan, quiet, rounded), I16)
    # Normal results: rebias and round at bit 13 (half to even by adding 0xFFF plus the kept
    # lowest bit); subnormal ones: the float addition of 0.5 rounds at 2**-24 for us.
    odd = builder.and_(builder.lshr(magnitude, _i32(13)), _i32(1))
    normal = builder.lshr(builder.add(magnitude, builder.add(_i32(((15 - 127) << 23) + 0xFFF), odd)),
                          _i32(13))
    half = ir.Constant(F32, 0.5)
    tiny = builder.sub(builder.bitcast(builder.fadd(builder.bitcast(magnitude, F32), half), I32),
                       _i32(0x3F000000))
    payload = builder.or_(_i32(0x7C00), builder.and_(builder.lshr(magnitude, _i32(13)), _i32(0x3FF)))
    payload = builder.select(builder.icmp_unsigned("==", payload, _i32(0x7C00)), _i32(0x7C01), payload)
    result = builder.select(builder.icmp_unsigned("<", magnitude, _i32(113 << 23)), tiny, normal)
    result = builder.select(builder.icmp_unsigned(">=", magnitude, _i32(143 << 23)), _i32(0x7C00), result)
    result = builder.select(nan, payload, result)
    return builder.trunc(builder.or_(result, builder.lshr(sign, _i32(16))), I16)
