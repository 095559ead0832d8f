"""Resize and Upsample against oracles glowsdk did not write, on seeded random inputs.

Opset 19 forms are checked against onnx.reference (the semantics glowsdk
follows); the forms it cannot run (Upsample, Resize-10, Resize-11/13 defaults,
tf_half_pixel_for_nn) against onnxruntime. Integer results may differ by 1 where
an interpolated value lands within rounding error of a half.
"""
import itertools

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from glowsdk.errors import GlowError, GraphError, UnsupportedError
from glowsdk.graph.function import Module
from glowsdk.graph.nodes.resize import Resize
from glowsdk.graph.types import ElemKind, Type

from oracle import glow_run, reference_run, single_op_model

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3, 5, 7)).astype(np.float32)
NO_ROI = np.zeros(0, np.float32)
COORDINATE_MODES = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                    "asymmetric", "tf_crop_and_resize"]
NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
SCALES = np.array([1, 1, 1.6, 0.6], np.float32)
SIZES = np.array([2, 3, 9, 4], np.int64)
ROI = np.array([0, 0, 0.13, 0.27, 1, 1, 0.81, 1.07], np.float32)


def resize_model(x, *, scales=None, sizes=None, roi=NO_ROI, opset=19, **attrs):
    inits = {"roi": roi, "scales": NO_ROI if scales is None else np.asarray(scales, np.float32)}
    if sizes is not None:
        inits["sizes"] = np.asarray(sizes, np.int64)
    return single_op_model("Resize", {"x": x}, opset=opset, initializers=inits, **attrs)


def check(model, feeds, oracle=reference_run, oracle_model=None):
    """Compare with the oracle, which runs `oracle_model` if given (an equivalent spelling)."""
    want = oracle(oracle_model or model, feeds)
    got = glow_run(model, feeds)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape
        if np.issubdtype(w.dtype, np.integer):
            assert np.abs(g.astype(np.int64) - w.astype(np.int64)).max(initial=0) <= 1
        else:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def ort_run(model, feeds):
    """onnxruntime, the oracle for the forms onnx.reference does not implement."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    model.ir_version = 8
    for out in model.graph.output:
        out.type.tensor_type.elem_type = onnx.helper.np_dtype_to_tensor_dtype(next(iter(feeds.values())).dtype)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, dict(feeds))


def crop_roi(mode):
    return ROI if mode == "tf_crop_and_resize" else NO_ROI


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("coordinate_mode", COORDINATE_MODES)
def test_modes_by_scales_and_sizes(mode, coordinate_mode):
    attrs = dict(mode=mode, coordinate_transformation_mode=coordinate_mode)
    roi = crop_roi(coordinate_mode)
    check(resize_model(X, scales=SCALES, roi=roi, **attrs), {"x": X})
    check(resize_model(X, sizes=SIZES, roi=roi, **attrs), {"x": X})


@pytest.mark.parametrize("nearest_mode", NEAREST_MODES)
@pytest.mark.parametrize("coordinate_mode", COORDINATE_MODES)
def test_nearest_rounding(nearest_mode, coordinate_mode):
    model = resize_model(X, scales=[1, 1, 2.2, 0.7], roi=crop_roi(coordinate_mode), mode="nearest",
                         nearest_mode=nearest_mode, coordinate_transformation_mode=coordinate_mode)
    check(model, {"x": X})


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_exclude_outside_and_cubic_coefficient(mode):
    extra = {"cubic_coeff_a": -0.5} if mode == "cubic" else {}
    for coordinate_mode in ("half_pixel", "pytorch_half_pixel", "asymmetric"):
        check(resize_model(X, scales=[1, 1, 2, 0.75], mode=mode, exclude_outside=1,
                           coordinate_transformation_mode=coordinate_mode, **extra), {"x": X})


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_antialias_downsampling(mode):
    check(resize_model(X, scales=[1, 1, 0.6, 0.3], mode=mode, antialias=1), {"x": X})
    check(resize_model(X, sizes=[2, 3, 3, 2], mode=mode, antialias=1, exclude_outside=1), {"x": X})
    check(resize_model(X, scales=[1, 1, 2, 0.5], mode=mode, antialias=1,
                       coordinate_transformation_mode="align_corners"), {"x": X})


@pytest.mark.parametrize("axes", [[2, 3], [3, 2], [-1], [1, -2]])
def test_axes_subset(axes):
    """Negative axes are checked against the oracle on the same axes counted from the front."""
    scales = [2.0, 0.6][:len(axes)]
    sizes = [4, 11][:len(axes)]
    roi = np.array([0.21, 0.13, 0.93, 0.77][:len(axes)] + [0.93, 0.77][:len(axes)], np.float32)
    forms = [dict(scales=scales, mode="nearest"), dict(scales=scales, mode="linear"),
             dict(sizes=sizes, mode="cubic"),
             dict(sizes=sizes, roi=roi, mode="linear", coordinate_transformation_mode="tf_crop_and_resize")]
    for form in forms:
        oracle_model = resize_model(X, axes=[a % 4 for a in axes], **form)
        check(resize_model(X, axes=axes, **form), {"x": X}, oracle_model=oracle_model)


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_keep_aspect_ratio(policy):
    for mode in ("nearest", "linear"):
        check(resize_model(X, sizes=[9, 4], axes=[2, 3], mode=mode, keep_aspect_ratio_policy=policy), {"x": X})
        check(resize_model(X, sizes=[2, 3, 3, 20], mode=mode, keep_aspect_ratio_policy=policy), {"x": X})


def test_crop_and_resize_extrapolation():
    for mode, value in itertools.product(["nearest", "linear", "cubic"], [0.0, 7.5]):
        check(resize_model(X, sizes=[2, 3, 6, 6], roi=ROI, mode=mode, extrapolation_value=value,
                           coordinate_transformation_mode="tf_crop_and_resize"), {"x": X})


@pytest.mark.parametrize("dtype", [np.uint8, np.int32, np.float64])
def test_other_element_kinds(dtype):
    x = (RNG.random((1, 2, 4, 6)) * 200 - (0 if dtype == np.uint8 else 100)).astype(dtype)
    for mode in ("nearest", "linear", "cubic"):
        check(resize_model(x, scales=[1, 1, 1.5, 0.5], mode=mode), {"x": x})


# -- older forms, against onnxruntime --------------------------------------------------------

@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample(mode):
    for scales in ([1.0, 1.0, 2.0, 3.0], [1.0, 1.0, 1.5, 2.5]):
        check(single_op_model("Upsample", {"x": X}, opset=7, mode=mode, scales=scales), {"x": X}, ort_run)
        model = single_op_model("Upsample", {"x": X}, opset=9, mode=mode,
                                initializers={"s": np.array(scales, np.float32)})
        check(model, {"x": X}, ort_run)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_10(mode):
    for scales in ([1, 1, 2, 3], [1, 1, 0.5, 0.6], [1, 1, 2.5, 0.6], [1, 1, 0.75, 1.7]):
        model = single_op_model("Resize", {"x": X}, opset=10, mode=mode,
                                initializers={"s": np.array(scales, np.float32)})
        check(model, {"x": X}, ort_run)


@pytest.mark.parametrize("opset", [11, 13])
def test_resize_11_and_13_defaults(opset):
    for mode in ("nearest", "linear", "cubic"):
        for coordinate_mode in ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel",
                                "tf_crop_and_resize"):
            model = resize_model(X, sizes=[2, 3, 7, 3], roi=crop_roi(coordinate_mode), opset=opset, mode=mode,
                                 coordinate_transformation_mode=coordinate_mode)
            check(model, {"x": X}, ort_run)


@pytest.mark.parametrize("nearest_mode", NEAREST_MODES)
def test_tf_half_pixel_for_nn(nearest_mode):
    model = resize_model(X, scales=[1, 1, 2, 3], opset=11, mode="nearest", nearest_mode=nearest_mode,
                         coordinate_transformation_mode="tf_half_pixel_for_nn")
    check(model, {"x": X}, ort_run)


# -- errors --------------------------------------------------------------------------------

def test_scales_and_sizes_together_is_an_error():
    with pytest.raises(GlowError, match="node 'y' \\(Resize\\): exactly one of 'scales' and 'sizes'"):
        glow_run(resize_model(X, scales=SCALES, sizes=SIZES), {"x": X})


def test_unknown_modes_are_unsupported():
    with pytest.raises(UnsupportedError, match="node 'y' \\(Resize\\): mode 'area'"):
        glow_run(resize_model(X, scales=SCALES, mode="area"), {"x": X})
    with pytest.raises(UnsupportedError, match="coordinate_transformation_mode 'centre'"):
        glow_run(resize_model(X, scales=SCALES, coordinate_transformation_mode="centre"), {"x": X})


def test_upsample_scale_below_one_is_an_error():
    with pytest.raises(GlowError, match="node 'y' \\(Upsample\\): .* must be >= 1"):
        glow_run(single_op_model("Upsample", {"x": X}, opset=7, scales=[1, 1, 0.5, 1]), {"x": X})


def test_ill_typed_resize_is_rejected():
    module = Module()
    function = module.create_function("main")
    x = module.create_placeholder("x", Type(ElemKind.FLOAT32, (1, 2, 3))).result()
    with pytest.raises(GraphError, match="node 'r' \\(Resize\\): shape \\[1, 2\\] and scales"):
        function.create(Resize, [x], "r", shape=(1, 2), scales=(1.0, 1.0))
    with pytest.raises(GraphError, match="node 'crop' \\(Resize\\): roi .* tf_crop_and_resize"):
        function.create(Resize, [x], "crop", shape=(1, 2, 6), scales=(1.0, 1.0, 2.0),
                        coordinate_mode="tf_crop_and_resize")
    flags = module.create_placeholder("b", Type(ElemKind.BOOL, (1, 2, 3))).result()
    with pytest.raises(GraphError, match="node 'flags' \\(Resize\\): input must be"):
        function.create(Resize, [flags], "flags", shape=(1, 2, 6), scales=(1.0, 1.0, 2.0))
