"""The Resize node kind: N-d nearest, linear and cubic resampling (ONNX Resize and Upsample).

The importer resolves scales or sizes, `axes`, `keep_aspect_ratio_policy` and
the opset's defaults into one static form: the output `shape` and one `scale`
per axis, which the coordinate transformation uses (they differ when the
output size was rounded). Attributes that do not apply to the mode are reset to
their defaults, so equal resizes compare equal.
"""
from __future__ import annotations

from ..kinds import define_node
from ..node import Node
from ..spec import bool_attr, float_attr, floats_attr, ints_attr, str_attr
from ..types import Type
from .rules import is_numeric, require_elem

FAMILY = "resize"

MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                    "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
DEFAULT_CUBIC_COEFF_A = -0.75


def _check_choice(node: Node, what: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise node.fail(f"{what} '{value}' is not one of {', '.join(choices)}")


def _resize_type(node: Node) -> Type:
    source = node.input.type
    require_elem(node, source, is_numeric, "input")
    _check_choice(node, "mode", node.mode, MODES)
    _check_choice(node, "coordinate_mode", node.coordinate_mode, COORDINATE_MODES)
    _check_choice(node, "nearest_mode", node.nearest_mode, NEAREST_MODES)
    rank = source.rank
    if len(node.shape) != rank or len(node.scales) != rank:
        raise node.fail(f"shape {list(node.shape)} and scales {list(node.scales)} need one entry per "
                        f"axis of the rank-{rank} input")
    if any(s <= 0 for s in node.scales):
        raise node.fail(f"scales {list(node.scales)} must be positive")
    crops = node.coordinate_mode == "tf_crop_and_resize"
    if len(node.roi) != (2 * rank if crops else 0):
        raise node.fail(f"roi {list(node.roi)} must hold {2 * rank} values with tf_crop_and_resize, "
                        f"none otherwise")
    for axis, (before, after) in enumerate(zip(source.shape, node.shape)):
        if before == 0 and after != 0:
            raise node.fail(f"cannot resize the empty axis {axis} to {after}")
    return source.with_shape(node.shape)


Resize = define_node(
    "Resize", "input", infer=_resize_type, family=FAMILY,
    attrs=[ints_attr("shape", doc="the output shape"),
           floats_attr("scales", doc="output/input scale per axis, as the coordinate transform uses it"),
           str_attr("mode", "nearest"),
           str_attr("coordinate_mode", "half_pixel"),
           str_attr("nearest_mode", "round_prefer_floor"),
           float_attr("cubic_coeff_a", DEFAULT_CUBIC_COEFF_A),
           bool_attr("exclude_outside", False),
           bool_attr("antialias", False),
           floats_attr("roi", (), doc="crop box, all starts then all ends, for tf_crop_and_resize"),
           float_attr("extrapolation_value", 0.0)],
    doc="Resample each axis independently (separable interpolation, ONNX Resize semantics). Output "
        "index y of an axis maps to the input coordinate x by `coordinate_mode` (half_pixel: "
        "(y + 0.5) / scale - 0.5; asymmetric: y / scale; align_corners: y * (in - 1) / (scale * in - 1); "
        "...). nearest takes the element nearest x, rounding by `nearest_mode`; linear and cubic "
        "(Keys kernel with coefficient `cubic_coeff_a`) weight the 2 or 4 neighbours of x, reading "
        "edge elements beyond the border, or giving outside neighbours weight 0 and renormalising "
        "if exclude_outside. antialias (linear and cubic) widens the kernel by 1/scale when "
        "downsampling. tf_crop_and_resize maps y into the crop box `roi` and writes "
        "`extrapolation_value` where x falls outside the input. Integer results round half to even "
        "and saturate.")
