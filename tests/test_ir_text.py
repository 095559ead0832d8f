"""The IR text form: print/parse round trips of IRGen output and of hand-written IR, and errors.

A round trip must rebuild the same function: the same text, the same weights with
the same data, and a program that still computes what the graph it came from
computes (the reference evaluator on that graph is the oracle).
"""
from __future__ import annotations

import numpy as np
import pytest

from glowsdk.api import load
from glowsdk.backends import get_backend
from glowsdk.backends.interpreter.executor import ProgramRunner
from glowsdk.compiler.ir import IRFunction, format_ir, parse_ir, verify_ir
from glowsdk.compiler.ir.allocator import allocate
from glowsdk.compiler.ir.irgen import generate_ir
from glowsdk.compiler.ir.program import Program
from glowsdk.compiler.pipeline import compile_function
from glowsdk.errors import GlowError
from glowsdk.graph.function import Function
from glowsdk.reference.evaluator import evaluate

MODELS = ["squeezenet", "shufflenet", "resnet50"]


@pytest.fixture(scope="module")
def scheduled() -> dict[str, tuple[Function, dict[str, np.ndarray]]]:
    """Each model's lowered, scheduled graph (random weights) and one random input."""
    out = {}
    for name in MODELS:
        network = load(name, random_weights=0)
        stages: dict[str, Function] = {}
        compile_function(network.function, get_backend("interpreter"),
                         on_stage=lambda stage, fn: stages.__setitem__(stage, fn))
        out[name] = (stages["scheduled"], network.random_inputs(0))
    return out


def constants_of(function: IRFunction) -> dict[str, np.ndarray]:
    return {w.name: w.value for w in function.weights.values() if w.role == "constant"}


def assert_same_function(a: IRFunction, b: IRFunction) -> None:
    """Structurally equal: weights, instruction kinds, names, operand names, attributes."""
    assert a.name == b.name
    assert [(w.name, w.role, w.type) for w in a.weights.values()] == \
        [(w.name, w.role, w.type) for w in b.weights.values()]
    for wa, wb in zip(a.weights.values(), b.weights.values()):
        assert (wa.value is None) == (wb.value is None)
        if wa.value is not None:
            np.testing.assert_array_equal(wa.value, wb.value)
    assert len(a.instructions) == len(b.instructions)
    for ia, ib in zip(a.instructions, b.instructions):
        assert (ia.kind, ia.name) == (ib.kind, ib.name)
        assert [None if v is None else v.name for v in ia.operands] == \
            [None if v is None else v.name for v in ib.operands]
        assert ia.attrs.keys() == ib.attrs.keys()
        for key, value in ia.attrs.items():
            np.testing.assert_array_equal(np.asarray(value), np.asarray(ib.attrs[key]))


@pytest.mark.parametrize("model", MODELS)
def test_irgen_output_of_bundled_models_round_trips(scheduled, model):
    function, _ = scheduled[model]
    ir = generate_ir(function)
    text = format_ir(ir)
    parsed = parse_ir(text, constants_of(ir))
    assert format_ir(parsed) == text
    assert_same_function(ir, parsed)
    verify_ir(parsed)


def test_parsed_irgen_output_computes_what_the_graph_computes(scheduled):
    function, feeds = scheduled["shufflenet"]
    ir = generate_ir(function)
    parsed = parse_ir(format_ir(ir), constants_of(ir))
    got = ProgramRunner(Program(parsed, allocate(parsed))).run(feeds)
    for name, want in evaluate(function, feeds).items():
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6)


# Every operand direction, an absent optional operand, a variadic operand, a
# multi-result instruction, views, and attributes of many kinds.
HAND_WRITTEN = """\
function hand
declare {
  %x = weight input float32<1x2x4x4>
  %w = weight constant float32<3x2x3x3>
  %table = weight constant int64<2>
  %y = weight output float32<1x6x4x4>
  %idx = weight output int64<1x3x2x2>
}
program {
  %c = allocactivation {type=float32<1x3x4x4>}
  %conv = conv @out %c, @in %x, @in %w, @in none {kernel=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], \
dilations=[1, 1], group=1}
  %r = relu @out %c, @in %c
  %cat = allocactivation {type=float32<1x6x4x4>}
  %concat = concat @out %cat, @in %c, @in %c {axis=1}
  %p = allocactivation {type=float32<1x3x2x2>}
  %i = allocactivation {type=int64<1x3x2x2>}
  %pool = maxpoolwithindices @out %p, @out %i, @in %c {kernel=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0], \
dilations=[1, 1], ceil_mode=false, column_major=false}
  %flat = tensorview @in %cat {type=float32<96>, offset=0}
  %tail = tensorview @in %flat {type=float32<48>, offset=192}
  %cp = copy @out %y, @in %cat
  %cpi = copy @out %idx, @in %i
  %d0 = deallocactivation @out %c
  %d1 = deallocactivation @out %cat
  %d2 = deallocactivation @out %p
  %d3 = deallocactivation @out %i
}"""


def test_hand_written_ir_round_trips():
    parsed = parse_ir(HAND_WRITTEN)
    text = format_ir(parsed)
    again = parse_ir(text)
    assert format_ir(again) == text
    assert_same_function(parsed, again)
    conv, pool = parsed.instructions[1], parsed.instructions[7]
    assert conv.bias is None and conv.kernel == (3, 3)
    assert [v.name for v in parsed.instructions[4].parts] == ["c", "c"]
    assert [v.name for v in pool.operands[:2]] == ["p", "i"]
    assert parsed.instructions[9].attrs["offset"] == 192


def test_constant_data_is_attached_by_name():
    data = np.arange(54, dtype=np.float32).reshape(3, 2, 3, 3)
    parsed = parse_ir(HAND_WRITTEN, {"w": data})
    assert parsed.weights["w"].value is data and parsed.weights["table"].value is None


@pytest.mark.parametrize("line, bad, message", [
    (12, "  %r = relu @out %c, @in %nowhere", "not defined before use"),
    (12, "  %r = relu @in %c, @in %c", "takes operands @out @in, got @in @in"),
    (12, "  %r = frobnicate @out %c, @in %c", "frobnicate"),
    (12, "  %r = relu @out %c, @in %c {alpha=1.0}", "has no attribute 'alpha'"),
    (10, "  %c = allocactivation {type=float32<1x3x4x4}", "not an IR type"),
    (12, "  %c = relu @out %c, @in %c", "defined twice"),
    (3, "  %x = weight mutable float32<1x2x4x4>", "expected '%name = weight ROLE TYPE'"),
    (12, "  r = relu @out %c, @in %c", "expected '%name = mnemonic"),
])
def test_malformed_text_names_the_line(line, bad, message):
    lines = HAND_WRITTEN.splitlines()
    lines[line - 1] = bad
    with pytest.raises(GlowError) as info:
        parse_ir("\n".join(lines))
    assert f"line {line}" in str(info.value) and message in str(info.value)


def test_text_outside_the_sections_is_an_error():
    text = HAND_WRITTEN.replace("program {", "%z = relu @out %c, @in %c\nprogram {")
    line = text.splitlines().index("%z = relu @out %c, @in %c") + 1
    with pytest.raises(GlowError, match=f"line {line}: .*outside the declare and program sections"):
        parse_ir(text)
    with pytest.raises(GlowError, match="must start with 'function NAME'"):
        parse_ir("declare {\n}")
