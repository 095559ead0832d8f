"""The NPU backend against the interpreter: every primitive bit-exact on the quantized graph, in checked mode.

Each case builds a small network, quantizes it with a profile of random inputs, compiles it for the
NPU, and runs the binary and the reference evaluator (the interpreter's kernels) on the quantized graph
the binary was compiled from, on seeded random inputs: the simulator (checked mode: races and
out-of-bounds accesses are errors) must give the interpreter's bytes. (The interpreter target's own
quantized graph can differ where it does more than the NPU, e.g. dequantizing int32 accumulators.) Shapes include layers that must be tiled over rows, output channels and input channels on the
edge preset.
"""
from __future__ import annotations

import numpy as np
import pytest

import glowsdk
from glowsdk.backends.npu.layers import LAYERS
from glowsdk.backends.npu.support import SUPPORT
from glowsdk.errors import UnsupportedError, UnsupportedOpsError
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile
from glowsdk.reference.evaluator import evaluate
from isa import PRESETS
from sim.binding import run_binary

from npu_nets import NetBuilder


def assert_bit_exact(network, config: str = "edge", per_channel: bool = False, seed: int = 3):
    profile = collect_profile(network, calibration_random(network, 2))
    quant = QuantizationConfig(profile, per_channel=per_channel)
    npu = glowsdk.compile(network, "npu", quantization=quant, config=config)
    inputs = network.random_inputs(seed)
    want = evaluate(npu.compiled.function, inputs)
    got = run_binary(npu.compiled.binary, PRESETS[config], inputs, checked=True).outputs
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)
    return npu


def conv_case(c, h, w, oc, k, pad, stride, pool=None):
    b = NetBuilder((1, c, h, w))
    out = b.conv("x", c, oc, k, pad, stride)
    if pool == "max":
        out = b.node("MaxPool", [out], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    elif pool == "avg":
        out = b.node("AveragePool", [out], kernel_shape=[2, 2], strides=[2, 2])
    elif pool == "avgpad":
        out = b.node("AveragePool", [out], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
                     count_include_pad=1)
    return b.network(b.conv(out, oc, oc, 1, 0, 1, relu=False))  # a float tail op would stay on the host


@pytest.mark.parametrize("c,h,w,oc,k,pad,stride,pool", [
    (3, 8, 8, 8, 3, 1, 1, None),
    (3, 17, 13, 20, 3, 0, 2, "max"),
    (16, 12, 12, 24, 5, 2, 1, "avg"),
    (8, 9, 9, 8, 1, 0, 1, "avgpad"),
    (160, 28, 28, 72, 3, 1, 1, None),   # edge: tiled over rows, output and input channels
])
def test_conv_and_pool_bit_exact(c, h, w, oc, k, pad, stride, pool):
    assert_bit_exact(conv_case(c, h, w, oc, k, pad, stride, pool))


def test_the_support_table_and_the_layer_table_name_the_same_kinds():
    """Every kind the NPU runs as it is has a layer builder, and every builder a kind the support table admits."""
    assert {kind for kind, s in SUPPORT.items() if s.form is not None} == set(LAYERS)


def test_a_kind_without_a_layer_builder_is_named(monkeypatch):
    """The layer table is the only dispatch: a kind it lacks stops the compile with the node named (a pool whose
    windows read the padding below a 9 x 7 image: no convolution's tiles can do it, gemm.GemmLayer.window)."""
    network = conv_case(3, 19, 15, 20, 3, 0, 2, "max")
    quant = QuantizationConfig(collect_profile(network, calibration_random(network, 2)))
    monkeypatch.delitem(LAYERS, "MaxPool")
    with pytest.raises(UnsupportedError, match="the NPU has no layer for MaxPool node"):
        glowsdk.compile(network, "npu", quantization=quant, config="edge", fallback=None)


def test_per_channel_weights_bit_exact():
    assert_bit_exact(conv_case(8, 10, 10, 16, 3, 1, 1), per_channel=True)


def test_residual_add_max_concat_bit_exact():
    b = NetBuilder((1, 8, 10, 10))
    left = b.conv("x", 8, 8)
    right = b.conv("x", 8, 8, relu=False)
    added = b.node("Add", [left, right])
    joined = b.node("Concat", [added, b.conv("x", 8, 4)], axis=1)
    out = b.node("Max", [joined, b.conv("x", 8, 12, relu=False)])
    assert_bit_exact(b.network(b.conv(out, 12, 6, 1, 0, relu=False)), config="default")


def test_matmul_with_bias_bit_exact():
    b = NetBuilder((1, 4, 6, 6))
    out = b.conv("x", 4, 8)
    flat = b.node("Flatten", [out])
    hidden = b.node("Gemm", [flat, b.weight((288, 300)), b.weight((300,))])
    assert_bit_exact(b.network(b.node("Gemm", [b.node("Relu", [hidden]), b.weight((300, 10)), b.weight((10,))])))


def test_transpose_and_slice_bit_exact():
    b = NetBuilder((1, 6, 8, 8))
    out = b.conv("x", 6, 10)
    moved = b.node("Transpose", [out], perm=[0, 2, 3, 1])
    back = b.node("Transpose", [moved], perm=[0, 3, 1, 2])
    assert_bit_exact(b.network(b.conv(back, 10, 4, relu=False)), config="default")


def test_digits_cnn_bit_exact_on_every_preset():
    network = glowsdk.load(glowsdk.zoo.digits_model_path(), input_shapes={"image": (1, 1, 8, 8)})
    for config in ("edge", "default", "server"):
        npu = assert_bit_exact(network, config=config)
    assert {"Conv", "MaxPool", "MatMul"} <= {r.kind for r in npu.compiled.binary.debug}


@pytest.mark.parametrize("batch,classes", [(1, 10), (3, 1000)])
def test_softmax_classifier_bit_exact(batch, classes):
    b = NetBuilder((batch, 64))
    logits = b.node("Gemm", ["x", b.weight((64, classes)), b.weight((classes,))])
    npu = assert_bit_exact(b.network(b.node("Softmax", [logits], axis=1)))
    assert "Softmax" in {n.kind for n in npu.compiled.function.nodes}


def test_float_ops_are_named_in_one_line():
    b = NetBuilder((1, 3, 8, 8))
    out = b.node("Sin", [b.conv("x", 3, 4)])
    network = b.network(b.conv(out, 4, 4, relu=False))
    quant = QuantizationConfig(collect_profile(network, calibration_random(network, 2)))
    with pytest.raises(UnsupportedOpsError) as err:
        glowsdk.compile(network, "npu", quantization=quant, fallback=None)
    message = str(err.value)
    assert "\n" not in message and message.startswith("target 'npu'") and "unsupported op(s)" in message
    assert "in model node(s) " in message and "Sin '" in message


def test_float_ops_fall_back_to_the_host_by_default():
    b = NetBuilder((1, 3, 8, 8))
    out = b.node("Sin", [b.conv("x", 3, 4)])
    network = b.network(b.conv(out, 4, 4, relu=False))
    quant = QuantizationConfig(collect_profile(network, calibration_random(network, 2)))
    compiled = glowsdk.compile(network, "npu", quantization=quant)
    # the cost model decides where the two tiny convolutions run; the Sin can only run on the host
    assert {p.backend for p in compiled.compiled.partitions} <= {"npu", "cpu"}
    assert any(p.backend == "cpu" for p in compiled.compiled.partitions)
    feeds = network.random_inputs(seed=1)
    want = evaluate(compiled.compiled.function, feeds)  # the reference evaluator on the same quantized graph
    got = compiled.run(feeds)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)


def test_without_quantization_compile_names_the_float_ops():
    network = conv_case(3, 8, 8, 8, 3, 1, 1)
    with pytest.raises(UnsupportedOpsError, match="Conv"):
        glowsdk.compile(network, "npu", fallback=None)


def test_cli_compile_then_simulate(tmp_path, capsys):
    from glowsdk.cli.main import main

    binary = tmp_path / "digits.npub"
    model = str(glowsdk.zoo.digits_model_path())
    assert main(["compile", model, "--input-shape", "image=1x1x8x8", "--target", "npu",
                 "--calibration-random", "2", "-o", str(binary)]) == 0
    assert "accuracy is unknown" in capsys.readouterr().err
    assert main(["simulate", str(binary)]) == 0
    assert "cycles" in capsys.readouterr().out
