"""float16/bfloat16 compute, integer Div/Mod/Pow, and Cast between every pair of kinds on cpu.

The interpreter is the golden reference, and numpy / ml_dtypes (the dtypes'
own conversions) an outside oracle where they define the result: every
16-bit pattern widened, float32 patterns rounded to the half kinds, every
narrow code widened, and float32 to the float8 kinds without saturation (what
ml_dtypes' astype does). Conversions and integer results are compared bit for
bit; float arithmetic on the half kinds within a few units of their last place.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from cpu_util import make, run_both
from glowsdk.graph import ElemKind
from glowsdk.graph.nodes import core, elementwise as ew, reduce

F16, BF16, F32, F64 = ElemKind.FLOAT16, ElemKind.BFLOAT16, ElemKind.FLOAT32, ElemKind.FLOAT64
NARROW_FLOATS = [ElemKind.FLOAT8E4M3FN, ElemKind.FLOAT8E4M3FNUZ, ElemKind.FLOAT8E5M2, ElemKind.FLOAT8E5M2FNUZ,
                 ElemKind.FLOAT8E8M0, ElemKind.FLOAT4E2M1]
NARROW_INTS = [ElemKind.INT4, ElemKind.UINT4, ElemKind.INT2, ElemKind.UINT2]
pytestmark = pytest.mark.filterwarnings("ignore:(overflow|invalid value) encountered in cast:RuntimeWarning")
"""The numpy oracles convert out-of-range values on purpose."""


def bits(array: np.ndarray) -> np.ndarray:
    """The raw bits of `array`, to compare conversions exactly (NaN payloads included)."""
    return np.ascontiguousarray(array).view(f"u{array.dtype.itemsize}")


def run(inputs: list[tuple[np.ndarray, ElemKind]], build, **extra) -> tuple[dict, dict]:
    """`build` over placeholders fed with the given arrays, on cpu and on the interpreter."""
    fn = make([(a.shape, kind) for a, kind in inputs], build)
    got, want, _ = run_both(fn, {f"x{i}": a for i, (a, _) in enumerate(inputs)}, **extra)
    return got, want


def cast(x: np.ndarray, source: ElemKind, target: ElemKind, **attrs) -> tuple[np.ndarray, np.ndarray]:
    got, want = run([(x, source)], lambda fn, v: [fn.add(ew.Cast, v[0], to=target, **attrs)])
    return got["y0"], want["y0"]


def float32_probes(rng: np.random.Generator) -> np.ndarray:
    """Random float32 bit patterns (every exponent, NaNs, subnormals) plus edges."""
    random = rng.integers(0, 2 ** 32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 65504, 65519.99, 65520, 2.0 ** -24,
                      2.0 ** -25, 3 * 2.0 ** -26, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1 + 2.0 ** -8,
                      1 + 3 * 2.0 ** -8, 3.4e38, 1e-45], np.float32)
    return np.concatenate([random, edges, -edges])


@pytest.mark.parametrize("kind", [F16, BF16])
def test_every_half_pattern_widens_exactly(kind):
    x = np.arange(2 ** 16, dtype=np.uint16).view(kind.dtype)
    got, want = cast(x, kind, F32)
    np.testing.assert_array_equal(bits(got), bits(want))
    np.testing.assert_array_equal(bits(got), bits(x.astype(np.float32)))


@pytest.mark.parametrize("kind", [F16, BF16])
def test_float32_rounds_to_half_to_nearest_even(kind):
    x = float32_probes(np.random.default_rng(0))
    got, want = cast(x, F32, kind)
    np.testing.assert_array_equal(bits(got), bits(want))
    oracle = x.astype(kind.dtype)
    nan = np.isnan(x)
    np.testing.assert_array_equal(bits(got)[~nan], bits(oracle)[~nan])
    assert np.isnan(got[nan].astype(np.float32)).all()


def test_float64_rounds_to_float16_once():
    # 1 + 2**-11 + 2**-40 is just above a float16 tie: through float32 (nearest) it would tie to 1.
    x = np.array([1 + 2.0 ** -11 + 2.0 ** -40, 1 + 2.0 ** -11, -(1 + 3 * 2.0 ** -11 - 2.0 ** -45), 7e4], np.float64)
    got, want = cast(x, F64, F16)
    np.testing.assert_array_equal(bits(got), bits(want))
    np.testing.assert_array_equal(bits(got), bits(x.astype(np.float16)))


@pytest.mark.parametrize("kind", NARROW_FLOATS)
def test_every_narrow_float_code_widens_exactly(kind):
    count = 16 if kind is ElemKind.FLOAT4E2M1 else 256
    x = np.arange(count, dtype=np.uint8).view(kind.dtype)
    got, want = cast(x, kind, F32)
    np.testing.assert_array_equal(bits(got), bits(want))
    np.testing.assert_array_equal(bits(got), bits(x.astype(np.float32)))


def narrow_probes(kind: ElemKind, rng: np.random.Generator) -> np.ndarray:
    """Every representable value of `kind`, the midpoints between neighbours (the ties), points
    just off them, values past the largest, and random float32 patterns."""
    values = np.arange(256, dtype=np.uint8).view(kind.dtype).astype(np.float64)
    values = np.unique(values[np.isfinite(values)])
    mids = (values[:-1] + values[1:]) / 2
    largest = values[-1]
    beyond = largest * np.array([1.03, 1.0625, 1.07, 1.125, 1.2, 2.0, 1e6])
    found = np.concatenate([values, mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf), beyond])
    found = np.concatenate([found, -found]).astype(np.float32)
    return np.concatenate([found, float32_probes(rng)[:4000]])


@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("kind", NARROW_FLOATS)
def test_float32_to_narrow_float(kind, saturate):
    x = narrow_probes(kind, np.random.default_rng(1))
    got, want = cast(x, F32, kind, saturate=saturate)
    np.testing.assert_array_equal(bits(got), bits(want))
    if not saturate and kind is not ElemKind.FLOAT4E2M1 and kind is not ElemKind.FLOAT8E8M0:
        np.testing.assert_array_equal(bits(got), bits(x.astype(kind.dtype)))


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [True, False])
def test_e8m0_round_modes(round_mode, saturate):
    powers = 2.0 ** np.arange(-130, 131, dtype=np.float64)
    x = np.concatenate([powers, powers * 1.5, powers * 1.25, powers * 1.75, [0.0, -0.0, np.inf, np.nan, -3.0]])
    got, want = cast(x, F64, ElemKind.FLOAT8E8M0, saturate=saturate, round_mode=round_mode)
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("source", [F64, F16, ElemKind.INT64, ElemKind.UINT8, ElemKind.BOOL])
@pytest.mark.parametrize("target", [ElemKind.FLOAT8E4M3FN, ElemKind.FLOAT8E5M2, *NARROW_INTS])
def test_other_sources_to_narrow_kinds(source, target):
    rng = np.random.default_rng(2)
    if source is ElemKind.BOOL:
        x = rng.random(64) < 0.5
    elif source.is_float:
        x = np.concatenate([rng.standard_normal(56) * 40, [np.nan, np.inf, -np.inf, -0.0, 7.5, -8.5, 17.9, 1e4]])
        x = x.astype(source.dtype)
    else:
        info = np.iinfo(source.dtype)
        x = rng.integers(int(info.min), int(info.max), 64, endpoint=True, dtype=source.dtype)
    got, want = cast(x, source, target)
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("source", NARROW_INTS)
@pytest.mark.parametrize("target", [F32, ElemKind.INT32, ElemKind.UINT8, ElemKind.FLOAT8E4M3FN, ElemKind.INT2])
def test_narrow_integers_to_other_kinds(source, target):
    info = ml_dtypes.iinfo(source.dtype)
    x = np.arange(int(info.min), int(info.max) + 1).astype(source.dtype)
    got, want = cast(x, source, target)
    np.testing.assert_array_equal(bits(got), bits(want))


def test_narrow_float_to_narrow_float_and_half():
    x = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2)
    for target in (ElemKind.FLOAT8E4M3FN, ElemKind.FLOAT4E2M1, ElemKind.FLOAT8E8M0, F16, BF16):
        got, want = cast(x, ElemKind.FLOAT8E5M2, target)
        np.testing.assert_array_equal(bits(got), bits(want), err_msg=target.value)


def test_cast_of_an_empty_tensor():
    got, want = cast(np.zeros((0, 3), np.float32), F32, F16)
    assert got.shape == want.shape == (0, 3) and got.dtype == np.float16


@pytest.mark.parametrize("kind", [ElemKind.INT8, ElemKind.INT32, ElemKind.INT64, ElemKind.UINT8, ElemKind.UINT32])
def test_integer_div_and_mod_never_trap(kind):
    info = np.iinfo(kind.dtype)
    x = np.array([7, -7, 7, -7, 0, 5, int(info.min), int(info.min), int(info.max), 9], np.int64)
    y = np.array([2, 2, -2, -2, 3, 0, -1, 0, -1, 4], np.int64)
    x, y = x.astype(kind.dtype), y.astype(kind.dtype)  # unsigned: negatives wrap, still a case each
    got, want = run([(x, kind), (y, kind)], lambda fn, v: [fn.add(ew.Div, v[0], v[1]),
                                                           fn.add(ew.Mod, v[0], v[1], fmod=False),
                                                           fn.add(ew.Mod, v[0], v[1], fmod=True)])
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    nonzero = y != 0
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got["y1"][nonzero], np.mod(x, y)[nonzero])
        np.testing.assert_array_equal(got["y2"][nonzero], np.fmod(x, y)[nonzero])


@pytest.mark.parametrize("base, exponent", [(F32, ElemKind.INT64), (F32, F64), (F16, F32), (F64, ElemKind.INT8),
                                            (ElemKind.INT32, F32), (ElemKind.INT8, ElemKind.INT8),
                                            (ElemKind.UINT16, ElemKind.INT64)])
def test_pow_with_mixed_kinds(base, exponent):
    rng = np.random.default_rng(3)
    x = (rng.uniform(0.5, 4, 40) if base.is_float else rng.integers(-5, 6, 40)).astype(base.dtype)
    if base.dtype.kind == "u":
        x = rng.integers(0, 9, 40).astype(base.dtype)
    y = (rng.uniform(-2, 3, 40) if exponent.is_float else rng.integers(0, 5, 40)).astype(exponent.dtype)
    got, want = run([(x, base), (y, exponent)], lambda fn, v: [fn.add(ew.Pow, v[0], v[1])])
    assert got["y0"].dtype == want["y0"].dtype
    if base.is_float:
        np.testing.assert_allclose(got["y0"].astype(np.float64), want["y0"].astype(np.float64), rtol=2e-3)
    else:
        np.testing.assert_array_equal(got["y0"], want["y0"])


@pytest.mark.parametrize("kind", [F16, BF16])
def test_half_kinds_round_every_stacked_result(kind):
    """A stack of element-wise ops on a half kind rounds each result as the reference does, so
    the fused loop matches op by op (the few libm ulps aside)."""
    rng = np.random.default_rng(4)
    x, y = (rng.standard_normal((8, 33)).astype(kind.dtype) for _ in range(2))

    def build(fn, v):
        total = fn.add(ew.Add, v[0], v[1])
        scaled = fn.add(ew.Mul, total, v[0])
        return [fn.add(ew.Sub, fn.add(ew.Exp, fn.add(ew.Div, scaled, v[1])), scaled),
                fn.add(ew.Less, total, v[1]), fn.add(ew.Mod, v[0], v[1], fmod=False)]

    got, want = run([(x, kind), (y, kind)], build)
    np.testing.assert_array_equal(got["y1"], want["y1"])
    ulp = 2.0 ** -10 if kind is F16 else 2.0 ** -7
    for name in ("y0", "y2"):
        g, w = got[name].astype(np.float64), want[name].astype(np.float64)
        np.testing.assert_allclose(g, w, rtol=2 * ulp, atol=1e-6, equal_nan=True, err_msg=name)


@pytest.mark.parametrize("kind", [F16, BF16])
def test_half_reductions_accumulate_in_float32(kind):
    x = np.random.default_rng(5).standard_normal((6, 50, 7)).astype(kind.dtype)
    got, want = run([(x, kind)], lambda fn, v: [fn.add(reduce.ReduceSum, v[0], axes=(0, 1)),
                                                fn.add(reduce.ReduceMax, v[0], axes=(1,)),
                                                fn.add(reduce.ArgMin, v[0], axis=1)])
    np.testing.assert_array_equal(got["y1"], want["y1"])
    np.testing.assert_array_equal(got["y2"], want["y2"])
    exact = x.astype(np.float64).sum(axis=(0, 1), keepdims=True)
    ulp = 2.0 ** -10 if kind is F16 else 2.0 ** -7
    np.testing.assert_allclose(got["y0"].astype(np.float64), exact, rtol=ulp, atol=ulp)


@pytest.mark.parametrize("kind", [F16, BF16, *NARROW_FLOATS, *NARROW_INTS])
def test_splat_of_every_kind(kind):
    def build(fn, v):
        return [fn.add(core.Splat, shape=(3, 4), value=-1.5, elem=kind)]

    got, want = run([(np.zeros(1, np.float32), F32)], build)
    np.testing.assert_array_equal(bits(got["y0"]), bits(want["y0"]))


def test_half_code_needs_no_runtime_helper():
    """Half kinds are converted by bit arithmetic: no LLVM `half` type, so no compiler-rt call."""
    fn = make([((5,), F16), ((5,), BF16)], lambda fn, v: [fn.add(ew.Cast, fn.add(ew.Exp, v[0]), to=BF16),
                                                         fn.add(ew.Cast, v[1], to=F16)])
    x = np.array([0.5, -1, 2, np.inf, np.nan], np.float16)
    _, _, compiled = run_both(fn, {"x0": x, "x1": x.astype(ml_dtypes.bfloat16)})
    assert " half" not in compiled.llvm_ir and "bfloat" not in compiled.llvm_ir
