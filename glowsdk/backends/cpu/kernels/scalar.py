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
from ..codegen.kinds import BOOL, COMPUTE_FLOATS, COMPUTE_INTS, is_float, is_signed, value_type
from ..codegen.module import KernelContext
from . import mathfn
from .table import Scalar

NUMBERS = COMPUTE_FLOATS | COMPUTE_INTS
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


def _arithmetic(float_op: str, int_op: str) -> Scalar:
    """x op y with the IRBuilder method `float_op` on floats and `int_op` on integers."""
    def emit(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
        op = float_op if is_float(_source_kind(instr)) else int_op
        return getattr(ctx.builder, op)(*args)
    return emit


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
        return ctx.builder.call(ctx.intrinsic(name, [args[0].type]), list(args))
    return emit


def _erf(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
    return mathfn.erf(ctx.builder, ctx.module, args[0])


def _mod(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
    """fmod: the remainder with the dividend's sign (frem); otherwise numpy's, with the divisor's."""
    builder = ctx.builder
    x, y = args
    remainder = builder.frem(x, y)
    if instr.fmod:
        return remainder
    zero = ir.Constant(x.type, 0.0)
    signs_differ = builder.xor(builder.fcmp_ordered("<", remainder, zero), builder.fcmp_ordered("<", y, zero))
    adjust = builder.and_(builder.fcmp_ordered("!=", remainder, zero), signs_differ)
    return builder.select(adjust, builder.fadd(remainder, y), remainder)


def _where(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
    return ctx.builder.select(*args)


def _not(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
    return ctx.builder.not_(args[0])


def _cast(ctx: KernelContext, instr: Any, args: Sequence[ir.Value]) -> ir.Value:
    """Cast between the compute kinds: floats truncate toward zero into integers (saturating,
    so out-of-range values stay defined), integers wrap when narrowed, anything to bool is != 0."""
    builder, (x,) = ctx.builder, args
    source, target = _source_kind(instr), instr.to
    to_type = value_type(target)
    if target is ElemKind.BOOL:
        if is_float(source):
            return builder.fcmp_unordered("!=", x, ir.Constant(x.type, 0.0))
        return builder.icmp_unsigned("!=", x, ir.Constant(x.type, 0))
    if is_float(source):
        if is_float(target):
            if x.type == to_type:
                return x
            grow = to_type.intrinsic_name == "f64"
            return builder.fpext(x, to_type) if grow else builder.fptrunc(x, to_type)
        name = "llvm.fptosi.sat" if is_signed(target) else "llvm.fptoui.sat"
        return builder.call(ctx.intrinsic(name, [to_type, x.type], ir.FunctionType(to_type, [x.type])), [x])
    signed = is_signed(source)
    if is_float(target):
        return builder.sitofp(x, to_type) if signed else builder.uitofp(x, to_type)
    if x.type.width == to_type.width:
        return x
    if x.type.width > to_type.width:
        return builder.trunc(x, to_type)
    return builder.sext(x, to_type) if signed else builder.zext(x, to_type)


def _same_kinds(node: Any) -> bool:
    """Every source of one element kind (Pow's exponent may differ in the graph; not here)."""
    return len({v.type.elem for v in node.present_inputs()}) == 1


def _castable(node: Any) -> bool:
    kinds = NUMBERS | BOOL
    return node.input.type.elem in kinds and node.types[0].elem in kinds


SCALARS: dict[str, ScalarKind] = {
    "Add": ScalarKind(NUMBERS, _arithmetic("fadd", "add")),
    "Sub": ScalarKind(NUMBERS, _arithmetic("fsub", "sub")),
    "Mul": ScalarKind(NUMBERS, _arithmetic("fmul", "mul")),
    "Div": ScalarKind(COMPUTE_FLOATS, _arithmetic("fdiv", "fdiv")),
    "Max": ScalarKind(NUMBERS, _extremum("llvm.maximum", ">")),
    "Min": ScalarKind(NUMBERS, _extremum("llvm.minimum", "<")),
    "Pow": ScalarKind(COMPUTE_FLOATS, _intrinsic("llvm.pow"), _same_kinds),
    "Mod": ScalarKind(COMPUTE_FLOATS, _mod),
    "Equal": ScalarKind(NUMBERS | BOOL, _compare("==")),
    "Less": ScalarKind(NUMBERS | BOOL, _compare("<")),
    "And": ScalarKind(BOOL, _arithmetic("and_", "and_")),
    "Or": ScalarKind(BOOL, _arithmetic("or_", "or_")),
    "Not": ScalarKind(BOOL, _not),
    "Where": ScalarKind(ANY_BITS, _where),
    "Exp": ScalarKind(COMPUTE_FLOATS, _intrinsic("llvm.exp")),
    "Log": ScalarKind(COMPUTE_FLOATS, _intrinsic("llvm.log")),
    "Sqrt": ScalarKind(COMPUTE_FLOATS, _intrinsic("llvm.sqrt")),
    "Tanh": ScalarKind(COMPUTE_FLOATS, _intrinsic("llvm.tanh")),
    "Sin": ScalarKind(COMPUTE_FLOATS, _intrinsic("llvm.sin")),
    "Cos": ScalarKind(COMPUTE_FLOATS, _intrinsic("llvm.cos")),
    "Floor": ScalarKind(COMPUTE_FLOATS, _intrinsic("llvm.floor")),
    "Round": ScalarKind(COMPUTE_FLOATS, _intrinsic("llvm.roundeven")),
    "Erf": ScalarKind(COMPUTE_FLOATS, _erf),
    "Cast": ScalarKind(NUMBERS | BOOL, _cast, _castable),
}
"""Element-wise kind name -> its record; elementwise.py registers each as a kernel."""
