"""float32 exp, tanh and erf as branch-free polynomials that LLVM vectorises.

`llvm.exp`/`llvm.tanh` on float32 become one libm call per element even inside a
vectorised loop (12-26 ns an element measured on the untuned set's GELU, Sigmoid
and SiLU), and the float64 erf of mathfn.py does too. These are straight-line
float32 code (selects, no branches, no calls), so the loop vectoriser makes SIMD
code of them, 8 or 16 lanes, on scalars or on vectors alike. Fits, and the
largest error measured against math.exp/tanh/erf in float64 over every float32 in
[-100, 100] sampled densely plus the extremes (tests/cpu/test_cpu_vmath.py):

- exp: Cephes' expf (x = n ln2 + r, |r| <= ln2/2, e^r = 1 + r + r^2 P(r), P of
  degree 5), scaled by 2^n in two halves so subnormal results round once: within
  1 ulp (a subnormal result within one subnormal step). Overflow gives +inf, -inf
  gives 0, NaN stays NaN.
- tanh: Cephes' tanhf, x + x^3 P(x^2) below |x| = 0.625, else 1 - 2 / (e^{2|x|} + 1),
  with the sign of x (-0 too): within 1.2 ulp, +-1 for large |x|.
- erf: the Maclaurin series to x^13 below |x| = 0.5 (relative error < 1e-7), else
  1 - erfc with erfc z = e^{-z^2 + H(z)}, H a polynomial of degree 7 fitted here
  (weighted least squares, Lawson's iteration, on [0.5, 4]) to ln erfc z + z^2,
  which is smooth there: no division (Numerical Recipes' fit of erfc in
  t = 1 / (1 + z/2), which mathfn.py and the reference use, needs one, and on
  AVX-512 a GELU's erf was bound by its divider): within 1.1e-7 absolute. z is
  clamped to 4, where erfc is below half an ulp of 1.

onnxruntime's and the ONNX backend tests' tolerances are 1e-3 relative, 1e-5
absolute at the tightest: every bound above is far inside them.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from llvmlite import ir

from ..codegen.kinds import F32
from ..codegen.module import KernelContext

I32 = ir.IntType(32)
EXP_RANGE = (-104.0, 88.75)
"""exp's argument is clamped to this: below, the result rounds to 0; above, to +inf."""
EXP_POLYNOMIAL = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
                  5.0000001201e-1)
"""Cephes expf: e^r = 1 + r + r^2 P(r), highest power first."""
LN2_HIGH, LN2_LOW = 0.693359375, -2.12194440e-4
"""ln 2 in two parts: n * LN2_HIGH is exact for |n| < 2^15."""
TANH_SMALL = 0.625
TANH_POLYNOMIAL = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1, -3.33332819422e-1)
"""Cephes tanhf below TANH_SMALL: tanh x = x + x^3 P(x^2), highest power first."""
ERF_SMALL = 0.5
ERF_SERIES = tuple(2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(7))[::-1]
"""erf x = x S(x^2) below ERF_SMALL, S the Maclaurin series to x^12, highest power first."""
ERFC_EXPONENT = (-5.746248e-06, 2.765638e-04, -3.4962834e-03, 2.3565069e-02, -1.0619272e-01, 3.6501575e-01,
                 -1.1288186, 5.052073e-05)
"""erfc z = exp(-z^2 + H(z)) for z in [ERF_SMALL, ERFC_LIMIT], H highest power first."""
ERFC_LIMIT = 4.0
"""1 - erfc z rounds to 1 in float32 from about 3.92 on; z is clamped here (the end of H's fit)."""


class _Math:
    """Constants and intrinsics of one value type (float32 or a vector of them)."""

    def __init__(self, ctx: KernelContext, like: ir.Value) -> None:
        self.ctx, self.builder, self.type = ctx, ctx.builder, like.type
        self.lanes = like.type.count if isinstance(like.type, ir.VectorType) else None

    def const(self, value: float) -> ir.Value:
        if self.lanes is None:
            return ir.Constant(F32, value)
        return ir.Constant(self.type, [ir.Constant(F32, value)] * self.lanes)

    def int_type(self) -> ir.Type:
        return I32 if self.lanes is None else ir.VectorType(I32, self.lanes)

    def int_const(self, value: int) -> ir.Value:
        if self.lanes is None:
            return ir.Constant(I32, value)
        return ir.Constant(self.int_type(), [ir.Constant(I32, value)] * self.lanes)

    def call(self, name: str, *args: ir.Value) -> ir.Value:
        signature = ir.FunctionType(self.type, [self.type] * len(args))
        return self.builder.call(self.ctx.intrinsic(name, [self.type], signature), list(args))

    def fma(self, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
        """a * b + c, fused where the host has FMA."""
        return self.call("llvm.fmuladd", a, b, c)

    def horner(self, x: ir.Value, coefficients: Sequence[float]) -> ir.Value:
        result = self.const(coefficients[0])
        for c in coefficients[1:]:
            result = self.fma(result, x, self.const(c))
        return result

    def keep_nan(self, x: ir.Value, result: ir.Value) -> ir.Value:
        """`result`, or x itself where x is NaN (clamps by minnum/maxnum would drop it)."""
        return self.builder.select(self.builder.fcmp_unordered("uno", x, x), x, result)

    def power_of_two(self, n: ir.Value) -> ir.Value:
        """2^n for an integer n in [-126, 127], built from its exponent bits."""
        biased = self.builder.add(n, self.int_const(127))
        return self.builder.bitcast(self.builder.shl(biased, self.int_const(23)), self.type)


def _reduced_exp(m: _Math, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(e^r, n) with e^x = e^r 2^n, |r| <= ln2/2."""
    b = m.builder
    n = m.call("llvm.roundeven", b.fmul(x, m.const(1 / math.log(2))))
    r = m.fma(n, m.const(-LN2_HIGH), x)
    r = m.fma(n, m.const(-LN2_LOW), r)
    return b.fadd(m.fma(m.horner(r, EXP_POLYNOMIAL), b.fmul(r, r), r), m.const(1.0)), b.fptosi(n, m.int_type())


def _exp(m: _Math, x: ir.Value) -> ir.Value:
    """e^x for x already clamped to EXP_RANGE (no NaN handling)."""
    b = m.builder
    e, whole = _reduced_exp(m, x)
    half = b.ashr(whole, m.int_const(1))
    return b.fmul(b.fmul(e, m.power_of_two(half)), m.power_of_two(b.sub(whole, half)))


def _normal_exp(m: _Math, x: ir.Value) -> ir.Value:
    """e^x for x in [-87, 88], where it is a normal float: scaled by 2^n in one step."""
    e, whole = _reduced_exp(m, x)
    return m.builder.fmul(e, m.power_of_two(whole))


def _clamped(m: _Math, x: ir.Value, low: float, high: float) -> ir.Value:
    return m.call("llvm.minnum", m.call("llvm.maxnum", x, m.const(low)), m.const(high))


def exp(ctx: KernelContext, x: ir.Value) -> ir.Value:
    """e^x of a float32 (or float32 vector) `x`."""
    m = _Math(ctx, x)
    return m.keep_nan(x, _exp(m, _clamped(m, x, *EXP_RANGE)))


def tanh(ctx: KernelContext, x: ir.Value) -> ir.Value:
    """tanh x of a float32 (or float32 vector) `x`."""
    m = _Math(ctx, x)
    b = m.builder
    magnitude = m.call("llvm.fabs", x)
    square = b.fmul(x, x)
    small = m.fma(b.fmul(m.horner(square, TANH_POLYNOMIAL), square), x, x)
    twice = _exp(m, _clamped(m, b.fadd(magnitude, magnitude), *EXP_RANGE))
    large = b.fsub(m.const(1.0), b.fdiv(m.const(2.0), b.fadd(twice, m.const(1.0))))
    chosen = b.select(b.fcmp_ordered("<", magnitude, m.const(TANH_SMALL)), small, large)
    return m.keep_nan(x, m.call("llvm.copysign", chosen, x))  # the sign of x, -0 included


def erf(ctx: KernelContext, x: ir.Value) -> ir.Value:
    """erf x of a float32 (or float32 vector) `x`."""
    m = _Math(ctx, x)
    b = m.builder
    square = b.fmul(x, x)
    small = b.fmul(x, m.horner(square, ERF_SERIES))
    z = _clamped(m, m.call("llvm.fabs", x), 0.0, ERFC_LIMIT)
    erfc = _normal_exp(m, m.fma(b.fsub(m.const(0.0), z), z, m.horner(z, ERFC_EXPONENT)))  # ln erfc z: in [-18, 0]
    large = m.call("llvm.copysign", b.fsub(m.const(1.0), erfc), x)
    return m.keep_nan(x, b.select(b.fcmp_ordered("<", z, m.const(ERF_SMALL)), small, large))
