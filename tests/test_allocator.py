"""The static memory allocator: offsets by hand, the plan checker, and random lifetimes."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glowsdk.api import load
from glowsdk.backends import get_backend
from glowsdk.compiler.ir import IRFunction, parse_ir, verify_ir
from glowsdk.compiler.ir.allocator import MemoryReport, PlanError, allocate, check_plan
from glowsdk.compiler.pipeline import compile_function
from glowsdk.graph import ElemKind, Type
from glowsdk.reference.evaluator import evaluate

# Three 1x100 float32 activations (400 bytes, 448 once 64-byte aligned) in a chain:
# %a dies before %c is allocated, so they can share one slot; %b overlaps both.
CHAIN = """
function chain
declare {
  %x = weight input float32<1x100>
  %w = weight constant float32<3>
  %k = weight constant float32<100x1>
  %y = weight output float32<1x100>
}
program {
  %a = allocactivation {type=float32<1x100>}
  %ra = relu @out %a, @in %x
  %b = allocactivation {type=float32<1x100>}
  %tb = tanh @out %b, @in %a
  %da = deallocactivation @out %a
  %c = allocactivation {type=float32<1x100>}
  %v = tensorview @in %b {type=float32<100>, offset=0}
  %tail = tensorview @in %b {type=float32<1x50>, offset=200}
  %rc = relu @out %c, @in %b
  %db = deallocactivation @out %b
  %cp = copy @out %y, @in %c
  %dc = deallocactivation @out %c
}
"""


def test_chain_by_hand():
    function = parse_ir(CHAIN)
    verify_ir(function)
    plan = allocate(function)
    check_plan(function, plan)
    assert plan.report == MemoryReport(naive_bytes=3 * 448, allocated_bytes=2 * 448, lower_bound_bytes=2 * 448)
    offsets = plan.activation_offsets
    assert set(offsets) == {"a", "b", "c"}
    assert offsets["a"] == offsets["c"] != offsets["b"]
    # Views take their base's bytes, never space of their own.
    assert plan.address(function.instructions[6]) == ("activations", offsets["b"])
    assert plan.address(function.instructions[7]) == ("activations", offsets["b"] + 200)
    # Weights are packed in declaration order, each 64-byte aligned: 12 -> 64, 400 -> 448.
    assert plan.constant_offsets == {"w": 0, "k": 64} and plan.constant_bytes == 64 + 448
    assert plan.placeholder_offsets == {"x": 0, "y": 448} and plan.placeholder_bytes == 2 * 448


def test_alignment_is_honoured():
    function = parse_ir(CHAIN)
    plan = allocate(function, alignment=256)
    check_plan(function, plan)
    assert all(o % 256 == 0 for o in plan.activation_offsets.values())
    assert plan.report.lower_bound_bytes == 2 * 512
    with pytest.raises(ValueError, match="alignment"):
        allocate(function, alignment=0)


def test_report_line():
    report = MemoryReport(naive_bytes=3 << 20, allocated_bytes=(3 << 20) // 2, lower_bound_bytes=1 << 20)
    assert report.line() == "activations: naive 3.00 MiB, allocated 1.50 MiB, lower bound 1.00 MiB"


def test_check_plan_catches_broken_plans():
    function = parse_ir(CHAIN)
    plan = allocate(function)
    plan.activation_offsets["b"] = plan.activation_offsets["a"]
    with pytest.raises(PlanError, match="overlap in memory while both are live"):
        check_plan(function, plan)
    plan = allocate(function)
    plan.activation_offsets["c"] += 8
    with pytest.raises(PlanError, match="not 64-byte aligned"):
        check_plan(function, plan)
    plan = allocate(function)
    plan.constant_offsets["k"] = plan.constant_bytes
    with pytest.raises(PlanError, match="outside the constants region"):
        check_plan(function, plan)
    plan = allocate(function)
    del plan.activation_offsets["c"]
    with pytest.raises(PlanError, match="%c has no offset"):
        check_plan(function, plan)


def test_empty_function():
    plan = allocate(IRFunction("empty"))
    assert plan.report == MemoryReport(0, 0, 0) and plan.activation_bytes == 0


# -- random lifetimes -------------------------------------------------------------------------------
@st.composite
def interval_programs(draw, equal_sizes=False):
    """An IR program of allocs and deallocs with random lifetimes and sizes (some never freed)."""
    count = draw(st.integers(0, 40))
    sizes = ([draw(st.integers(1, 300))] * count if equal_sizes
             else draw(st.lists(st.integers(0, 5000), min_size=count, max_size=count)))
    starts = draw(st.lists(st.integers(0, 30), min_size=count, max_size=count))
    spans = draw(st.lists(st.one_of(st.integers(0, 15), st.none()), min_size=count, max_size=count))
    function = IRFunction("random")
    allocs = {}
    for time in range(50):
        for i in range(count):
            if starts[i] == time:
                allocs[i] = function.create("AllocActivation", [], f"b{i}", type=Type(ElemKind.UINT8, (sizes[i],)))
        for i in range(count):
            if spans[i] is not None and starts[i] + spans[i] == time:
                function.create("DeallocActivation", [allocs[i]])
    return function


def live_bytes_by_definition(function: IRFunction, alignment: int) -> list[int]:
    """The aligned bytes live at each program point, scanning the program the slow, obvious way."""
    live, profile = {}, []
    for instr in function.instructions:
        if instr.kind == "AllocActivation":
            live[instr.name] = -(-instr.type.nbytes // alignment) * alignment
        profile.append(sum(live.values()))
        if instr.kind == "DeallocActivation":
            del live[instr.operands[0].name]
    return profile


@settings(max_examples=150, deadline=None)
@given(interval_programs(), st.sampled_from([1, 16, 64]))
def test_random_lifetimes_get_a_valid_plan(function, alignment):
    plan = allocate(function, alignment)
    check_plan(function, plan)
    report = plan.report
    assert report.lower_bound_bytes == max(live_bytes_by_definition(function, alignment), default=0)
    assert report.naive_bytes == sum(-(-a.type.nbytes // alignment) * alignment for a in function.allocs())
    assert report.lower_bound_bytes <= report.allocated_bytes <= report.naive_bytes
    assert report.allocated_bytes == plan.activation_bytes
    assert allocate(function, alignment).activation_offsets == plan.activation_offsets  # deterministic


@settings(max_examples=80, deadline=None)
@given(interval_programs(equal_sizes=True))
def test_equal_sizes_reach_the_lower_bound(function):
    # Equal sizes make placement interval-graph colouring, which earliest-first solves optimally.
    plan = allocate(function)
    check_plan(function, plan)
    assert plan.report.allocated_bytes == plan.report.lower_bound_bytes


def test_no_deallocs_means_no_sharing():
    function = IRFunction("all-live")
    for size in (100, 7, 3000, 64):
        function.create("AllocActivation", [], type=Type(ElemKind.UINT8, (size,)))
    plan = allocate(function)
    check_plan(function, plan)
    assert plan.report == MemoryReport(128 + 64 + 3008 + 64, 128 + 64 + 3008 + 64, 128 + 64 + 3008 + 64)


# -- the real pipeline ------------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["resnet50", "densenet121"])
def test_bundled_models_allocate_at_the_lower_bound(model):
    # densenet's growing concatenations defeat every greedy order; the local search closes the gap.
    network = load(model, random_weights=0)
    compiled = compile_function(network.function, get_backend("interpreter"))
    program = compiled.program
    check_plan(program.ir, program.plan)
    report = program.plan.report
    assert report.lower_bound_bytes == max(live_bytes_by_definition(program.ir, program.plan.alignment))
    assert report.allocated_bytes <= 1.1 * report.lower_bound_bytes
    assert report.allocated_bytes < report.naive_bytes / 2
    if model == "densenet121":
        # The interpreter runs on the planned offsets: an overlap would show in the numbers.
        inputs = network.random_inputs(0)
        got, want = compiled.execute(inputs), evaluate(network.function, inputs)
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5)
