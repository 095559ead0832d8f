"""How element kinds look in LLVM: the type in memory and the type computed on.

Every kind is stored as an integer or float of its byte width (the narrow kinds
one per byte, as numpy holds them), so data movement works on any kind by width
alone. Arithmetic kinds are computed on as LLVM floats or integers, and bool as
i1: it is stored as one byte holding 0 or 1 (numpy's bool), and `load`/`store`
convert between the two.
"""
from __future__ import annotations

from llvmlite import ir

from ....graph.types import ElemKind

F32, F64 = ir.FloatType(), ir.DoubleType()
I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()

_FLOAT_TYPES = {ElemKind.FLOAT32: F32, ElemKind.FLOAT64: F64}

COMPUTE_FLOATS = frozenset(_FLOAT_TYPES)
"""Float kinds the kernels compute on (half-precision kinds would need compiler-rt on some hosts)."""
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
    """The LLVM type a kernel computes with (i1 for bool)."""
    return I1 if kind is ElemKind.BOOL else storage_type(kind)


def is_float(kind: ElemKind) -> bool:
    return kind in _FLOAT_TYPES


def is_signed(kind: ElemKind) -> bool:
    return kind in SIGNED


def i64(value: int) -> ir.Constant:
    return ir.Constant(I64, value)


def element_pointer(builder: ir.IRBuilder, base: ir.Value, kind: ElemKind, index: ir.Value) -> ir.Value:
    """The address of element `index` of a buffer of `kind` starting at `base`."""
    return builder.gep(base, [index], inbounds=True, source_etype=storage_type(kind))


def load(builder: ir.IRBuilder, base: ir.Value, kind: ElemKind, index: ir.Value) -> ir.Value:
    """Element `index` as a compute value."""
    raw = builder.load(element_pointer(builder, base, kind, index), typ=storage_type(kind))
    if kind is ElemKind.BOOL:
        return builder.icmp_unsigned("!=", raw, ir.Constant(I8, 0))
    return raw


def store(builder: ir.IRBuilder, value: ir.Value, base: ir.Value, kind: ElemKind, index: ir.Value) -> None:
    """Write a compute value as element `index`."""
    if kind is ElemKind.BOOL:
        value = builder.zext(value, I8)
    builder.store(value, element_pointer(builder, base, kind, index))
