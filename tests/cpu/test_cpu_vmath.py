"""The float32 exp, tanh and erf polynomials (kernels/vmath.py) against Python's math module.

The oracle is math.exp/tanh/erf in float64 (correctly rounded or nearly), not the
interpreter: over [-110, 110] densely, [-1, 1] more densely, magnitudes from 1e-38
to 1e3 of both signs, and the extremes (+-0, +-inf, NaN, the overflow and
subnormal edges, the largest floats). Bounds: exp within 1 ulp (a subnormal result
within one subnormal step), tanh within 1.5 ulp, erf within 2e-7 absolute; the
special values exactly (-0 keeps its sign where the function is odd). Both ISAs:
the AVX2 code is compiled here too (GLOWSDK_CPU_ISA=avx2, in a child process). The
kernel must also be vectorised: no libm call is left in the loop.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from cpu_util import make, run_both, run_on_avx2

from glowsdk.graph import ElemKind
from glowsdk.graph.nodes import elementwise as ew

SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 88.72, 88.73, -87.3, -103.9, -104.5, 3.4e38, -3.4e38, 1e-45, -1e-45]
SMALLEST_SUBNORMAL = float(np.float32(1e-45))


def points() -> np.ndarray:
    wide = np.linspace(-110, 110, 200_001)
    near_zero = np.linspace(-1, 1, 20_001)
    magnitudes = np.geomspace(1e-38, 1e3, 5_000)
    return np.concatenate([wide, near_zero, magnitudes, -magnitudes, SPECIAL]).astype(np.float32)


def exact(function, x: np.ndarray) -> np.ndarray:
    """`function` in float64 at every point (inf where it overflows)."""
    def one(v: float) -> float:
        try:
            return function(v)
        except OverflowError:
            return math.inf
    return np.array([one(float(v)) for v in x])


KINDS = {"exp": (ew.Exp, math.exp), "tanh": (ew.Tanh, math.tanh), "erf": (ew.Erf, math.erf)}


def run(name: str, x: np.ndarray, **extra) -> tuple[np.ndarray, object]:
    kind = KINDS[name][0]
    fn = make([(x.shape, ElemKind.FLOAT32)], lambda fn, v: [fn.add(kind, v[0])])
    got, _, compiled = run_both(fn, {"x0": x}, **extra)
    return got["y0"], compiled


@np.errstate(over="ignore", invalid="ignore")  # inf - inf where both overflow, filtered out below
def check_accuracy(name: str, got: np.ndarray, x: np.ndarray) -> None:
    want = exact(KINDS[name][1], x)
    rounded = want.astype(np.float32)
    wide = got.astype(np.float64)
    nonfinite = ~np.isfinite(rounded)
    np.testing.assert_array_equal(got[nonfinite], rounded[nonfinite])
    normal = np.isfinite(rounded) & (np.abs(rounded) >= np.finfo(np.float32).tiny)
    if name == "erf":
        assert np.abs(wide - want)[np.isfinite(want)].max() <= 2e-7
    else:
        ulps = np.abs(wide - want)[normal] / np.spacing(np.abs(rounded[normal])).astype(np.float64)
        assert ulps.max() <= (1.0 if name == "exp" else 1.5), (ulps.max(), x[normal][ulps.argmax()])
    subnormal = np.isfinite(rounded) & ~normal
    assert (np.abs(wide - want)[subnormal] <= SMALLEST_SUBNORMAL).all()
    zeros = x == 0
    if name != "exp":  # odd functions: -0 -> -0, +0 -> +0
        np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(x[zeros]))


@pytest.mark.parametrize("name", sorted(KINDS))
def test_polynomial_accuracy_over_wide_ranges_and_extremes(name, tmp_path):
    x = points()
    dump = tmp_path / "module.ll"
    got, _ = run(name, x, dump_asm=str(dump))
    check_accuracy(name, got, x)
    assembly = dump.read_text()
    assert not any(f"{libm}f" in assembly for libm in ("exp", "tanh", "erf")), "a libm call is left"
    assert "ymm" in assembly or "zmm" in assembly, "the loop is not vectorised"


def test_avx2_code_is_as_accurate():
    """The same checks on code compiled without AVX-512 (8 lanes), in a child process (the ISA is
    read once per process)."""
    run_on_avx2(__file__, "x = t.points()\n"
                "for name in sorted(t.KINDS):\n"
                "    t.check_accuracy(name, t.run(name, x)[0], x)\n")
