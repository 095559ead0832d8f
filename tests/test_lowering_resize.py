"""Lowering of Resize onto Gather, Mul, Add, Where and Cast with compile-time tables.

The lowered graph follows the reference kernel step by step (same working kind, same
tap order, same rounding), so integer results must match exactly and float results to
rounding.
"""
import ml_dtypes
import numpy as np
import pytest

from glowsdk.backends import get_backend
from glowsdk.compiler.lowering.driver import lower_function
from glowsdk.frontend.onnx.importer import import_model
from lowering_util import check_lowering
from oracle import single_op_model

RNG = np.random.default_rng(3)
NO_ROI = np.zeros(0, np.float32)
ROI = np.array([0, 0, 0.13, -0.27, 1, 1, 0.81, 1.37], np.float32)
COORDINATE_MODES = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                    "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"]


def resize_model(x, *, scales=None, sizes=None, roi=NO_ROI, **attrs):
    inits = {"roi": roi, "scales": NO_ROI if scales is None else np.asarray(scales, np.float32)}
    if sizes is not None:
        inits["sizes"] = np.asarray(sizes, np.int64)
    return single_op_model("Resize", {"x": x}, opset=19, initializers=inits, **attrs)


def data(shape, dtype=np.float32):
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return RNG.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def check(x, **kwargs):
    """Check the numbers through the whole pipeline; return the node counts right after
    lowering (before the post-lowering passes rewrite them)."""
    model = resize_model(x, **kwargs)
    check_lowering(model, {"x": x}, expect_lowered="Resize")
    function = import_model(model, input_shapes={"x": x.shape}).functions["main"]
    lower_function(function, get_backend("interpreter"))
    return function.count_kinds()


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("coordinate_mode", COORDINATE_MODES)
def test_modes(mode, coordinate_mode):
    x = data((1, 2, 5, 7))
    roi = ROI if coordinate_mode == "tf_crop_and_resize" else NO_ROI
    counts = check(x, scales=[1, 1, 1.6, 0.6], roi=roi, mode=mode, extrapolation_value=-3.5,
                   coordinate_transformation_mode=coordinate_mode)
    assert counts.get("Mul", 0) == {"nearest": 0, "linear": 4, "cubic": 8}[mode]
    # ROI leaves the input only along the last axis
    assert counts.get("Where", 0) == (1 if coordinate_mode == "tf_crop_and_resize" else 0)
    check(x, sizes=[1, 2, 3, 9], roi=roi, mode=mode, coordinate_transformation_mode=coordinate_mode)


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_nearest_rounding_and_exclude_outside(nearest_mode):
    x = data((2, 3, 4, 4))
    check(x, scales=[1, 1, 2.5, 0.75], mode="nearest", nearest_mode=nearest_mode)
    check(x, scales=[1, 1, 1.5, 3], mode="nearest", nearest_mode=nearest_mode, exclude_outside=1,
          coordinate_transformation_mode="tf_half_pixel_for_nn")


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [[1, 1, 0.4, 0.3], [1, 1, 2.0, 0.5], [1, 1, 0.6, 1.7]])
def test_antialias_and_exclude_outside(mode, scales):
    x = data((1, 2, 9, 8))
    check(x, scales=scales, mode=mode, antialias=1)
    check(x, scales=scales, mode=mode, exclude_outside=1, cubic_coeff_a=-0.5)
    check(x, scales=scales, mode=mode, antialias=1, exclude_outside=1)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64, np.int8, np.uint8,
                                   np.int32, np.int64])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_element_kinds(dtype, mode):
    x = data((1, 1, 6, 5), dtype)
    counts = check(x, scales=[1, 1, 1.7, 0.8], mode=mode)
    converts = mode != "nearest" and dtype not in (np.float64,)
    assert counts.get("Cast", 0) == (2 if converts else 0)
    assert counts.get("Round", 0) == (1 if converts and np.issubdtype(dtype, np.integer) else 0)


def test_integer_saturation_and_float16_range():
    x = np.array([[[[0, 255, 0, 255, 0]]]], np.uint8)
    check(x, scales=[1, 1, 1, 2.3], mode="cubic")
    big = np.array([[[[-65504, 65504, -65504, 65504]]]], np.float16)
    check(big, scales=[1, 1, 1, 3.1], mode="cubic")


def test_extrapolation_value_saturates_into_integers():
    x = data((1, 1, 4, 4), np.int8)
    roi = np.array([0, 0, -0.5, 0.2, 1, 1, 1.4, 1.3], np.float32)
    for mode in ("nearest", "linear"):
        check(x, sizes=[1, 1, 5, 6], roi=roi, mode=mode, extrapolation_value=1000.0,
              coordinate_transformation_mode="tf_crop_and_resize")


def test_identity_and_empty_axes():
    x = data((2, 3, 4))
    counts = check(x, scales=[1, 1, 1], mode="linear")
    assert counts == {"Save": 1}
    huge = np.array([[[2 ** 62 + 1, -2 ** 61 - 3]]], np.int64)  # not exact in float64, so never cast
    assert check(huge, scales=[1, 1, 1], mode="cubic") == {"Save": 1}
    counts = check(data((0, 3, 4)), scales=[2], axes=[2], mode="linear")
    assert counts == {"Splat": 1, "Save": 1}
