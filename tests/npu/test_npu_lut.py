"""The int8 table lookup: unary functions (Sigmoid, Tanh, GELU...) as one 256-entry table, on the NPU and the host.

The table (quant.lookup_table) is checked against a float oracle within one int8 step; each unary kind, kept
unlowered by the NPU and quantized to a TableLookup, runs on the NPU (LUT_LOAD + LUT) bit-exact with the
reference evaluator, every binary under checked simulation; a TableLookup returned to the host lowers onto
integer primitives with the same bytes; the exported transformer's GELU stays on the NPU.
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest
from onnx import numpy_helper

import glowsdk
from glowsdk.backends.registry import get_backend
from glowsdk.compiler.lowering.driver import lower_function
from glowsdk.compiler.partition.placement import TARGET, supported_sides
from glowsdk.compiler.pipeline import compile_function
from glowsdk.graph.function import Module
from glowsdk.graph.nodes import quant
from glowsdk.graph.types import ElemKind, Type
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile
from glowsdk.reference.evaluator import evaluate
from isa import PRESETS
from sim.binding import run_binary

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from exported_models import exported_model, model_inputs  # noqa: E402

_erf = np.vectorize(math.erf)
ORACLES = {
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "Tanh": np.tanh,
    "Erf": _erf,
    "Exp": np.exp,
    "Gelu": lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "HardSigmoid": lambda x: np.clip(0.2 * x + 0.5, 0, 1),
    "HardSwish": lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
    "Silu": lambda x: x / (1 + np.exp(-x)),
}
"""Each kind's function in float64, written independently of the reference kernels."""


@pytest.mark.parametrize("kind", sorted(ORACLES))
@pytest.mark.parametrize("scale,offset", [(0.05, 3), (0.011, -128), (0.2, 60)])
def test_the_table_is_the_float_function_within_one_step(kind, scale, offset):
    source = Type(ElemKind.QINT8, (), scale, offset)
    x = (np.arange(-128, 128) - offset) * np.float64(np.float32(scale))
    y = ORACLES[kind](x)
    result = Type(ElemKind.QINT8, (), float(np.float32((y.max() - y.min()) / 255)) or 1.0,
                  int(np.clip(round(-128 - y.min() / ((y.max() - y.min()) / 255 or 1.0)), -128, 127)))
    table = quant.lookup_table(ORACLES[kind], source, result)
    assert table.dtype == np.int8 and table.shape == (256,)
    exact = np.clip(y / np.float32(result.scale) + result.offset, -128, 127)
    assert np.abs(table - exact).max() <= 0.5 + 1e-9  # rounding, half to even: never a whole step off
    ties = quant.lookup_table(lambda v: np.full_like(v, 2.5), source, Type(ElemKind.QINT8, (), 1.0, 0))
    assert (ties == 2).all()  # round half to even


def _net(kind: str, shape=(1, 8, 10, 10), seed: int = 0, first_conv: bool = True) -> glowsdk.api.Network:
    """conv -> the unary op -> conv, so that the op sits inside an int8 island (without the first conv the op
    reads the input, and is a layer of its own)."""
    b = NetBuilder(shape, seed=seed)
    x = b.conv("x", shape[1], 16, relu=False) if first_conv else "x"
    y = b.node("Mul", [x, b.node("Sigmoid", [x])]) if kind == "Silu" else b.node(kind, [x])
    return b.network(b.conv(y, 16 if first_conv else shape[1], 8, 1, 0, relu=False))


@pytest.mark.parametrize("kind", sorted(ORACLES))
@pytest.mark.parametrize("config", ["edge", "default"])
def test_each_unary_kind_is_one_table_bit_exact(kind, config):
    """After a convolution the table is a step of its epilogue; on the input, a layer of its own."""
    for first_conv in (True, False):
        npu = assert_bit_exact(_net(kind, first_conv=first_conv), config=config)  # runs the binary in checked mode
        nodes = npu.compiled.function.nodes
        lookups = [n for n in nodes if n.kind == "TableLookup"]
        assert len(lookups) == 1 and not any(n.kind in ORACLES for n in nodes)
        assert [layer.kind for layer in npu.compiled.layers].count("TableLookup") == (0 if first_conv else 1)


def test_a_long_tensor_streams_in_several_chunks():
    """96 x 96 x 16 bytes: five chunks of 32 KiB, so both slots are reused."""
    npu = assert_bit_exact(_net("Gelu", shape=(1, 16, 96, 96), seed=2, first_conv=False), config="edge")
    layer = next(layer for layer in npu.compiled.layers if layer.kind == "TableLookup")
    assert len(layer.body.tiles(lambda t: 0, PRESETS["edge"])) == 5


def _lookup(shape: tuple[int, ...]):
    module = Module()
    fn = module.create_function("main")
    # float32 scales, as the quantizer chooses them (the host binding dequantizes with the float32 scale)
    source = Type(ElemKind.QINT8, shape, float(np.float32(0.043)), -5)
    result = Type(ElemKind.QINT8, (256,), float(np.float32(1 / 256)), -128)
    x = module.create_placeholder("x", source).result()
    table = quant.lookup_table(ORACLES["Sigmoid"], source, result)
    fn.save(fn.add(quant.TableLookup, x, module.create_constant("table", table, result).result()), "y")
    return fn


@pytest.mark.parametrize("shape", [(1, 4, 6, 6), (7, 33), (300,)])
def test_a_table_lookup_lowers_for_the_host_onto_integer_primitives(shape):
    fn = _lookup(shape)
    feeds = {"x": np.random.default_rng(0).integers(-128, 128, shape).astype(np.int8)}
    want = evaluate(fn, feeds)["y"]
    np.testing.assert_array_equal(want, fn.module.constants["table"].value[feeds["x"].astype(int) + 128])
    lowered = fn.module.clone().functions["main"]
    lower_function(lowered, get_backend("cpu"))
    assert "TableLookup" not in lowered.count_kinds() and "Gather" in lowered.count_kinds()
    assert not any(t.elem.is_float for n in lowered.nodes for t in n.types)
    np.testing.assert_array_equal(evaluate(lowered, feeds)["y"], want)
    for host in ("cpu", "interpreter"):
        np.testing.assert_array_equal(compile_function(fn, get_backend(host)).execute(feeds)["y"], want)


def test_a_table_lookup_runs_on_the_npu_alone_bit_exact():
    """float in, Quantize (the host binding), TableLookup, Dequantize (the binding) out: one LUT layer."""
    fn = _lookup((7, 33))
    lookup = next(n for n in fn.nodes if n.kind == "TableLookup")
    source = lookup.input.type
    x = fn.module.create_placeholder("f", Type(ElemKind.FLOAT32, source.shape)).result()
    with fn.inserting_before(lookup):
        quantized = fn.add(quant.Quantize, x, result_type=source)
    fn.replace_all_uses(lookup.input, quantized)
    save = next(n for n in fn.nodes if n.kind == "Save")
    with fn.inserting_before(save):
        out = fn.add(quant.Dequantize, lookup.result(), elem=ElemKind.FLOAT32)
    fn.save(out, "z")
    fn.erase(save)
    fn.module.erase_unused_storage()
    compiled = compile_function(fn, get_backend("npu"))
    assert [layer.kind for layer in compiled.layers].count("TableLookup") == 1
    feeds = {"f": np.random.default_rng(1).uniform(-6, 6, (7, 33)).astype(np.float32)}
    got = run_binary(compiled.binary, PRESETS["default"], feeds, checked=True).outputs["z"]
    np.testing.assert_array_equal(got, evaluate(fn, feeds)["z"])


def test_backends_without_tables_keep_the_functions_float():
    """The cpu runs no TableLookup: Tanh stays float, and so does its producer (no integer user)."""
    network = _net("Tanh")
    profile = collect_profile(network, calibration_random(network, 2))
    stages = {}
    compiled = compile_function(network.function, get_backend("cpu"), quantization=QuantizationConfig(profile),
                                on_stage=lambda stage, fn: stages.setdefault(stage, fn.count_kinds()))
    assert "TableLookup" not in stages["quantized"] and "Tanh" in stages["quantized"]
    assert "not run quantized by cpu" not in compiled.quantization_report.summary()


def test_the_transformers_gelu_runs_on_the_npu_with_fallback_bit_exact():
    """Both GELUs (fused from the exported Div, Erf, Add, Mul, Mul) are one table each, which the NPU runs; the
    parts (the NPU's under checked simulation; a host part's tables lower onto a Gather) give the reference
    evaluator's bytes. Since issue 23 the NPU runs the whole model: one binary, no host part."""
    network = glowsdk.load(exported_model("transformer_encoder"))
    profile = collect_profile(network, calibration_random(network, 4))
    compiled = glowsdk.compile(network, "npu", quantization=QuantizationConfig(profile)).compiled
    kinds = [n.kind for n in compiled.function.nodes]
    assert kinds.count("TableLookup") == 2 and "Erf" not in kinds
    sides = supported_sides(compiled.function, get_backend("npu"))
    assert all(sides[id(n)] == TARGET for n in compiled.function.nodes if n.kind == "TableLookup")
    feeds = model_inputs("transformer_encoder", seed=1)
    values = dict(feeds)
    if not hasattr(compiled, "partitions"):  # the whole model on the NPU
        values.update(run_binary(compiled.binary, compiled.config, feeds, checked=True).outputs)
    for part in getattr(compiled, "partitions", ()):
        inputs = {name: values[name] for name in part.inputs}
        if part.side == "target":
            values.update(run_binary(part.compiled.binary, part.compiled.config, inputs, checked=True).outputs)
        else:
            values.update(part.compiled.execute(inputs))
    for output, value in evaluate(compiled.function, feeds).items():
        np.testing.assert_array_equal(values[output], value)


def test_a_feed_forward_block_with_an_exported_gelu_is_one_npu_function():
    """MatMul, bias, the exported GELU (Div, Erf, Add, Mul, Mul), MatMul, bias: all on the NPU, no host part."""
    b = NetBuilder((128, 64))
    hidden = b.node("Add", [b.node("MatMul", ["x", b.weight((64, 256))]), b.weight((256,))])
    for name, value in (("sqrt2", math.sqrt(2)), ("one", 1.0), ("half", 0.5)):
        b.weights.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
    curve = b.node("Add", [b.node("Erf", [b.node("Div", [hidden, "sqrt2"])]), "one"])
    gelu = b.node("Mul", [b.node("Mul", [hidden, curve]), "half"])
    out = b.node("Add", [b.node("MatMul", [gelu, b.weight((256, 64))]), b.weight((64,))])
    npu = assert_bit_exact(b.network(out), config="default")
    assert [layer.kind for layer in npu.compiled.layers].count("TableLookup") == 1
