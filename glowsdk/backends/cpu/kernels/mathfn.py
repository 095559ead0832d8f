"""Float math functions that LLVM has no intrinsic for, as small documented polynomials.

erf uses the Chebyshev fit of erfc from Numerical Recipes (section 6.2),
|error| < 1.2e-7 everywhere, the same fit the reference kernels use, and is
evaluated in double precision so float32 results round exactly as the
reference's do (tests/cpu check the bound against math.erf).
"""
from __future__ import annotations

from llvmlite import ir

from ..codegen.kinds import F64

ERFC_COEFFICIENTS = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
                     0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277)
"""erfc(z) = t * exp(-z*z + sum(c_i * t**i)) with t = 1 / (1 + z/2), z >= 0."""


def erf(builder: ir.IRBuilder, module: ir.Module, x: ir.Value) -> ir.Value:
    """erf(x) for a float `x`, of x's type."""
    source = x.type
    wide = builder.fpext(x, F64) if source != F64 else x
    z = builder.call(module.declare_intrinsic("llvm.fabs", [F64]), [wide])
    one = ir.Constant(F64, 1.0)
    t = builder.fdiv(one, builder.fadd(one, builder.fmul(ir.Constant(F64, 0.5), z)))
    poly = ir.Constant(F64, ERFC_COEFFICIENTS[-1])
    for coefficient in reversed(ERFC_COEFFICIENTS[:-1]):
        poly = builder.fadd(ir.Constant(F64, coefficient), builder.fmul(t, poly))
    exponent = builder.fsub(poly, builder.fmul(z, z))
    erfc = builder.fmul(t, builder.call(module.declare_intrinsic("llvm.exp", [F64]), [exponent]))
    positive = builder.fsub(one, erfc)
    result = builder.select(builder.fcmp_ordered(">=", wide, ir.Constant(F64, 0.0)), positive,
                            builder.fsub(erfc, one))
    return builder.fptrunc(result, source) if source != F64 else result
