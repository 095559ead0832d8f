"""The per-element semantics of every element-wise kind the CPU backend compiles.

Each entry of SCALARS computes one result element from one element of each
source, as LLVM values of the compute types (`codegen.kinds.value_type`). The
element-wise kernel (elementwise.py) wraps them in a loop, and operator stacking
chains any number of them in one loop, so this module is the only place an
element-wise kind's meaning is written down for this backend. NaN behaviour
follows numpy: Max/Min propagate NaN (llvm.maximum/minimum), compares with NaN
are false, and no fast-math flag that assumes finite values is ever set here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from llvmlite import ir

from ....graph.types import ElemKind
from ..codegen.kinds import BOOL, COMPUTE_INTS, FLOATS, in_kind, is_float, is_signed
from ..codegen.module import KernelContext
from . import convert, mathfn, quant, vmath
from .table import Scalar

NUMBERS = FLOATS | COMPUTE_INTS
ANY_BITS = frozenset(ElemKind)
"""Where only selects bits, so it handles every kind by width."""


@dataclass(frozen=True)
class ScalarKind:
    """An element-wise kind: the element kinds it computes on, its semantics, an extra rule."""

    elems: frozenset[ElemKind]
    scalar: Scalar
    accepts: Callable[[Any], bool] | None = None


def _source_kind(instr: Any, index: int = 0) -> ElemKind:
    return instr.inputs[index].type.elem


def _rounded(ctx: KernelContext, instr: Any, value: ir.Value) -> ir.Value:
    """A float result as the result's kind holds it (float16/bfloat16 round, as numpy's do)."""
    return in_kind(ctx.builder, value, instr.types[0].elem)


def _arithmetic(float_op: str, int_op: str) -> Scalar:
    """x op y with the IRBuilder method `float_op` on floats and `int_op` on integers."""
    def emit(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
        if is_float(_source_kind(instr)):
            return _rounded(ctx, instr, getattr(ctx.builder, float_op)(*args))
        return getattr(ctx.builder, int_op)(*args)
    return emit


def _safe_divisor(builder: ir.IRBuilder, y: ir.Value, signed: bool) -> tuple[ir.Value, ir.Value]:
    """(y with 0, and -1 when signed, replaced by 1; whether y is -1): integer division that
    cannot trap (INT_MIN / -1 overflows, x / 0 is undefined in LLVM)."""
    one = ir.Constant(y.type, 1)
    minus_one = builder.icmp_signed("==", y, ir.Constant(y.type, -1)) if signed else ir.Constant(ir.IntType(1), 0)
    bad = builder.or_(builder.icmp_unsigned("==", y, ir.Constant(y.type, 0)), minus_one)
    return builder.select(bad, one, y), minus_one


def _divide(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
    """x / y; integers truncate toward zero, x / 0 gives x (the reference divides by 1 there)
    and INT_MIN / -1 wraps to INT_MIN, as numpy's does."""
    builder, (x, y) = ctx.builder, args
    kind = _source_kind(instr)
    if is_float(kind):
        return _rounded(ctx, instr, builder.fdiv(x, y))
    if not is_signed(kind):
        return builder.udiv(x, _safe_divisor(builder, y, False)[0])
    divisor, minus_one = _safe_divisor(builder, y, True)
    return builder.select(minus_one, builder.neg(x), builder.sdiv(x, divisor))


def _pow(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
    """base ** exponent in the base's kind. A float base takes the exponent converted to its
    kind (numpy's rule); an integer base is raised in float64 and converted back as numpy
    converts it, as the reference computes it."""
    base_kind, exponent_kind = _source_kind(instr), _source_kind(instr, 1)
    work = base_kind if is_float(base_kind) else ElemKind.FLOAT64
    base = convert.convert(ctx, args[0], base_kind, work) if work is not base_kind else args[0]
    exponent = convert.convert(ctx, args[1], exponent_kind, work)
    power = ctx.builder.call(ctx.intrinsic("llvm.pow", [base.type]), [base, exponent])
    if work is base_kind:
        return _rounded(ctx, instr, power)
    return convert.float64_to_integer(ctx, power, base_kind)


def _extremum(intrinsic: str, predicate: str) -> Scalar:
    """Max/Min: the NaN-propagating LLVM intrinsic on floats, a compare-select on integers."""
    def emit(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
        kind = _source_kind(instr)
        if is_float(kind):
            kind_type = args[0].type
            signature = ir.FunctionType(kind_type, [kind_type, kind_type])
            return ctx.builder.call(ctx.intrinsic(intrinsic, [kind_type], signature), list(args))
        compare = ctx.builder.icmp_signed if is_signed(kind) else ctx.builder.icmp_unsigned
        return ctx.builder.select(compare(predicate, *args), *args)
    return emit


def _compare(predicate: str) -> Scalar:
    """x pred y -> bool: ordered on floats (false with NaN), signed or unsigned on integers."""
    def emit(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
        kind = _source_kind(instr)
        if is_float(kind):
            return ctx.builder.fcmp_ordered(predicate, *args)
        compare = ctx.builder.icmp_signed if is_signed(kind) else ctx.builder.icmp_unsigned
        return compare(predicate, *args)
    return emit


def _intrinsic(name: str) -> Scalar:
    """A float function LLVM knows (lowered to an instruction or a libm call)."""
    def emit(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
        return _rounded(ctx, instr, ctx.builder.call(ctx.intrinsic(name, [args[0].type]), list(args)))
    return emit


def _vectorised(polynomial: Callable[[KernelContext, ir.Value], ir.Value], other: Scalar) -> Scalar:
    """float32: the vectorisable polynomial of vmath.py; other kinds: `other` (libm, float64)."""
    def emit(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
        if _source_kind(instr) is ElemKind.FLOAT32:
            return polynomial(ctx, args[0])
        return other(ctx, instr, args)
    return emit


def _erf(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
    return _rounded(ctx, instr, mathfn.erf(ctx.builder, ctx.module, args[0]))


def _mod(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
    """fmod: the remainder with the dividend's sign (frem, srem); otherwise numpy's, with the
    divisor's. An integer remainder by 0 (or by -1) is 0, as numpy's is."""
    builder = ctx.builder
    x, y = args
    kind = _source_kind(instr)
    if is_float(kind):
        remainder = _rounded(ctx, instr, builder.frem(x, y))
        zero = ir.Constant(x.type, 0.0)
        below = builder.fcmp_ordered("<", remainder, zero), builder.fcmp_ordered("<", y, zero)
        nonzero = builder.fcmp_ordered("!=", remainder, zero)
    elif not is_signed(kind):
        return builder.urem(x, _safe_divisor(builder, y, False)[0])
    else:
        remainder = builder.srem(x, _safe_divisor(builder, y, True)[0])
        zero = ir.Constant(x.type, 0)
        below = builder.icmp_signed("<", remainder, zero), builder.icmp_signed("<", y, zero)
        nonzero = builder.icmp_signed("!=", remainder, zero)
    if instr.fmod:
        return remainder
    adjust = builder.and_(nonzero, builder.xor(*below))
    total = _rounded(ctx, instr, builder.fadd(remainder, y)) if is_float(kind) else builder.add(remainder, y)
    return builder.select(adjust, total, remainder)


def _where(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
    return ctx.builder.select(*args)


def _not(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
    return ctx.builder.not_(args[0])


SCALARS: dict[str, ScalarKind] = {
    "Add": ScalarKind(NUMBERS | quant.QUANTIZED, quant.quantized_or(_arithmetic("fadd", "add"), quant.add(1))),
    "Sub": ScalarKind(NUMBERS | quant.QUANTIZED, quant.quantized_or(_arithmetic("fsub", "sub"), quant.add(-1))),
    "Mul": ScalarKind(NUMBERS | quant.QUANTIZED, quant.quantized_or(_arithmetic("fmul", "mul"), quant.mul),
                      quant.mul_accepts),
    "Div": ScalarKind(NUMBERS, _divide),
    "Max": ScalarKind(NUMBERS | quant.QUANTIZED, quant.quantized_or(_extremum("llvm.maximum", ">"),
                                                                   quant.extremum(">"))),
    "Min": ScalarKind(NUMBERS | quant.QUANTIZED, quant.quantized_or(_extremum("llvm.minimum", "<"),
                                                                   quant.extremum("<"))),
    "Pow": ScalarKind(NUMBERS, _pow),
    "Mod": ScalarKind(NUMBERS, _mod),
    "Equal": ScalarKind(NUMBERS | BOOL, _compare("==")),
    "Less": ScalarKind(NUMBERS | BOOL, _compare("<")),
    "And": ScalarKind(BOOL, _arithmetic("and_", "and_")),
    "Or": ScalarKind(BOOL, _arithmetic("or_", "or_")),
    "Not": ScalarKind(BOOL, _not),
    "Where": ScalarKind(ANY_BITS, _where),
    "Exp": ScalarKind(FLOATS, _vectorised(vmath.exp, _intrinsic("llvm.exp"))),
    "Log": ScalarKind(FLOATS, _intrinsic("llvm.log")),
    "Sqrt": ScalarKind(FLOATS, _intrinsic("llvm.sqrt")),
    "Tanh": ScalarKind(FLOATS, _vectorised(vmath.tanh, _intrinsic("llvm.tanh"))),
    "Sin": ScalarKind(FLOATS, _intrinsic("llvm.sin")),
    "Cos": ScalarKind(FLOATS, _intrinsic("llvm.cos")),
    "Floor": ScalarKind(FLOATS, _intrinsic("llvm.floor")),
    "Round": ScalarKind(FLOATS, _intrinsic("llvm.roundeven")),
    "Erf": ScalarKind(FLOATS, _vectorised(vmath.erf, _erf)),
    "Cast": ScalarKind(convert.CASTABLE, convert.cast),
    "Quantize": ScalarKind(FLOATS | quant.QUANTIZED, quant.quantize, quant.quantize_accepts),
    "Dequantize": ScalarKind(FLOATS | quant.QUANTIZED, quant.dequantize),
    "Rescale": ScalarKind(quant.QUANTIZED, quant.rescale, quant.rescale_accepts),
    "Reinterpret": ScalarKind(quant.STORED_AS | quant.QUANTIZED, quant.reinterpret),
}
"""Element-wise kind name -> its record; elementwise.py registers each as a kernel."""
