"""IRGen and the interpreter that runs its output.

Structure: what IRGen emits for each kind of node (allocs just before the
instruction, deallocs at the end, Save as a copy, Reshape as a compute
instruction, names after nodes), that every primitive and any node a backend
keeps has an instruction, and that the output verifies. Numbers: the program
runs on flat buffers at the allocated offsets and must agree with the reference
evaluator on the graph, before and after the IR optimiser; a wrong layout must
give wrong numbers.
"""
from __future__ import annotations

import numpy as np
import pytest

from glowsdk.backends import get_backend
from glowsdk.backends.interpreter import InterpreterBackend
from glowsdk.backends.interpreter.executor import ProgramRunner
from glowsdk.compiler.backend import CompileOptions
from glowsdk.compiler.ir import format_ir, verify_ir
from glowsdk.compiler.ir.allocator import allocate, check_plan
from glowsdk.compiler.ir.instructions import OperandKind, derived_spec
from glowsdk.compiler.ir.irgen import generate_ir
from glowsdk.compiler.ir.passes import IR_PASSES
from glowsdk.compiler.ir.program import Program, build_program
from glowsdk.compiler.lowering.primitives import PRIMITIVES
from glowsdk.compiler.passes import PassManager
from glowsdk.compiler.pipeline import compile_function
from glowsdk.errors import InputError, UnsupportedError
from glowsdk.graph import ElemKind, Module, Type, nodes
from glowsdk.graph.function import Function
from glowsdk.graph.node import Node
from glowsdk.reference.evaluator import evaluate

F32 = ElemKind.FLOAT32
RNG = np.random.default_rng(5)


def small_net() -> Function:
    """Conv (no bias) -> MaxPool (both results used) -> Add -> Reshape -> Concat of itself; the
    input is saved as it is, and an unused constant is left in the module."""
    module = Module()
    fn = module.create_function("main")
    x = module.create_placeholder("x", Type(F32, (1, 2, 4, 4))).result()
    w = module.create_constant("w", RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)).result()
    b = module.create_constant("b", RNG.standard_normal((1, 3, 1, 1)).astype(np.float32)).result()
    module.create_constant("unused", np.ones(2, np.float32))
    conv = fn.add(nodes.Conv, x, w, None, name="conv", kernel=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1),
                  dilations=(1, 1))
    pool = fn.create(nodes.MaxPoolWithIndices, [conv], name="pool", kernel=(2, 2), strides=(2, 2), pads=(0, 0, 0, 0),
                     dilations=(1, 1))
    add = fn.add(nodes.Add, pool.result(0), b, name="add")
    flat = fn.add(nodes.Reshape, add, name="flat", shape=(1, 12))
    fn.save(fn.add(nodes.Concat, flat, flat, name="cat", axis=1), "y")
    fn.save(x, "x_again")
    fn.save(pool.result(1), "where")
    return fn


SMALL_NET_IR = """\
function main
declare {
  %x = weight input float32<1x2x4x4>
  %w = weight constant float32<3x2x3x3>
  %b = weight constant float32<1x3x1x1>
  %y = weight output float32<1x24>
  %x_again = weight output float32<1x2x4x4>
  %where = weight output int64<1x3x2x2>
}
program {
  %conv.result = allocactivation {type=float32<1x3x4x4>}
  %conv = conv @out %conv.result, @in %x, @in %w, @in none {kernel=[3, 3], strides=[1, 1], \
pads=[1, 1, 1, 1], dilations=[1, 1], group=1}
  %pool.result = allocactivation {type=float32<1x3x2x2>}
  %pool.indices = allocactivation {type=int64<1x3x2x2>}
  %pool = maxpoolwithindices @out %pool.result, @out %pool.indices, @in %conv.result {kernel=[2, 2], strides=[2, 2], \
pads=[0, 0, 0, 0], dilations=[1, 1], ceil_mode=false, column_major=false}
  %add.result = allocactivation {type=float32<1x3x2x2>}
  %add = add @out %add.result, @in %pool.result, @in %b
  %flat.result = allocactivation {type=float32<1x12>}
  %flat = reshape @out %flat.result, @in %add.result {shape=[1, 12]}
  %cat.result = allocactivation {type=float32<1x24>}
  %cat = concat @out %cat.result, @in %flat.result, @in %flat.result {axis=1}
  %save_y = copy @out %y, @in %cat.result
  %save_x_again = copy @out %x_again, @in %x
  %save_where = copy @out %where, @in %pool.indices
  %dealloc.conv.result = deallocactivation @out %conv.result
  %dealloc.pool.result = deallocactivation @out %pool.result
  %dealloc.pool.indices = deallocactivation @out %pool.indices
  %dealloc.add.result = deallocactivation @out %add.result
  %dealloc.flat.result = deallocactivation @out %flat.result
  %dealloc.cat.result = deallocactivation @out %cat.result
}"""


def feeds_for(fn: Function) -> dict[str, np.ndarray]:
    return {p.name: RNG.standard_normal(p.type.shape).astype(p.type.dtype) for p in fn.input_placeholders()}


def assert_matches_reference(fn: Function, outputs: dict[str, np.ndarray], feeds: dict[str, np.ndarray]) -> None:
    want = evaluate(fn, feeds)
    assert outputs.keys() == want.keys()
    for name, value in want.items():
        assert outputs[name].dtype == value.dtype and outputs[name].shape == value.shape, name
        np.testing.assert_allclose(outputs[name], value, rtol=1e-6, atol=1e-6, err_msg=name)


def test_irgen_emits_allocs_instructions_copies_and_deallocs():
    ir = generate_ir(small_net())
    assert format_ir(ir) == SMALL_NET_IR
    verify_ir(ir)


def test_irgen_keeps_the_data_of_the_constants_it_uses():
    fn = small_net()
    ir = generate_ir(fn)
    assert [(w.name, w.role) for w in ir.weights.values()] == [
        ("x", "input"), ("w", "constant"), ("b", "constant"), ("y", "output"), ("x_again", "output"),
        ("where", "output")]
    for name in ("w", "b"):
        assert ir.weights[name].value is fn.module.constants[name].value


def test_irgen_output_runs_like_the_graph():
    fn = small_net()
    ir = generate_ir(fn)
    plan = allocate(ir)
    check_plan(ir, plan)
    feeds = feeds_for(fn)
    assert_matches_reference(fn, ProgramRunner(Program(ir, plan)).run(feeds), feeds)


def test_every_primitive_has_an_instruction():
    for name, primitive in PRIMITIVES.items():
        spec = derived_spec(name)
        record = primitive.kind.spec
        assert len(spec.dests) == len(record.results), name
        assert [o.name for o in spec.sources] == [o.name for o in record.operands], name
        assert all(o.kind is OperandKind.IN for o in spec.sources)
        assert spec.attrs == record.attrs


class KeepsRelu(InterpreterBackend):
    """Runs Relu natively: the compiler keeps it, and IRGen must still translate it."""

    name = "keeps-relu"

    def is_op_supported(self, node: Node) -> bool:
        return node.kind == "Relu" or super().is_op_supported(node)

    def should_lower(self, node: Node) -> bool:
        return node.kind != "Relu"


def test_a_node_a_backend_kept_becomes_its_own_instruction():
    module = Module()
    fn = module.create_function("main")
    x = module.create_placeholder("x", Type(F32, (2, 5))).result()
    fn.save(fn.add(nodes.Relu, fn.add(nodes.Tanh, x)), "y")
    compiled = compile_function(fn, KeepsRelu())
    kinds = [i.kind for i in compiled.program.ir.instructions]
    assert "Relu" in kinds and "Max" not in kinds
    feeds = feeds_for(fn)
    assert_matches_reference(fn, compiled.execute(feeds), feeds)


def test_a_node_with_a_variable_number_of_results_is_unsupported():
    module = Module()
    fn = module.create_function("main")
    x = module.create_placeholder("x", Type(F32, (6,))).result()
    split = fn.create(nodes.Split, [x], name="cut", axis=0, sizes=(2, 4))
    fn.save(split.result(0), "a")
    with pytest.raises(UnsupportedError, match="node 'cut' \\(Split\\)"):
        generate_ir(fn)


def test_the_interpreter_runs_the_optimised_program():
    fn = small_net()
    compiled = get_backend("interpreter").compile(fn, CompileOptions())
    program = compiled.program
    verify_ir(program.ir)
    check_plan(program.ir, program.plan)
    assert program.plan.report.allocated_bytes <= program.plan.report.naive_bytes
    feeds = feeds_for(fn)
    assert_matches_reference(fn, compiled.execute(feeds), feeds)
    # a second run starts from fresh buffers and returns fresh arrays
    first = compiled.execute(feeds)
    first["y"][...] = 0
    assert_matches_reference(fn, compiled.execute(feeds), feeds)


def test_build_program_runs_the_ir_optimiser_with_the_given_manager():
    dumps: list[tuple[str, str]] = []
    manager = PassManager(registry=IR_PASSES, dump_after={"peel-views"},
                          dump=lambda label, ir: dumps.append((label, format_ir(ir))))
    build_program(small_net(), passes=manager)
    assert [label for label, _ in dumps] == ["after peel-views"]
    assert "= reshape" not in dumps[0][1] and "= tensorview @in %add.result" in dumps[0][1]


def chain(length: int) -> Function:
    """x -> transpose -> tanh -> transpose -> tanh ... -> y: each intermediate dies as the next is
    made, and a transpose cannot write over its source."""
    module = Module()
    fn = module.create_function("main")
    value = module.create_placeholder("x", Type(F32, (4, 16))).result()
    for i in range(length):
        value = fn.add(nodes.Tanh, fn.add(nodes.Transpose, value, name=f"flip{i}", perm=(1, 0)), name=f"tanh{i}")
    fn.save(value, "y")
    return fn


def test_activations_share_memory_yet_compute_the_same():
    fn = chain(6)
    naive = allocate(generate_ir(fn)).report
    program = build_program(fn)
    assert naive.naive_bytes == 12 * 256
    assert program.plan.report.allocated_bytes <= 2 * 256
    feeds = feeds_for(fn)
    assert_matches_reference(fn, ProgramRunner(program).run(feeds), feeds)


def test_a_wrong_layout_gives_wrong_numbers():
    # a = x + x; b = tanh(a); y = b * a. Placing b over a (both live until the Mul)
    # must corrupt y: the runner keeps no copy of any value outside its buffers.
    module = Module()
    fn = module.create_function("main")
    x = module.create_placeholder("x", Type(F32, (4, 16))).result()
    a = fn.add(nodes.Add, x, x, name="a")
    fn.save(fn.add(nodes.Mul, fn.add(nodes.Tanh, a, name="b"), a), "y")
    ir = generate_ir(fn)
    plan = allocate(ir)
    feeds = feeds_for(fn)
    assert_matches_reference(fn, ProgramRunner(Program(ir, plan)).run(feeds), feeds)
    plan.activation_offsets["b.result"] = plan.activation_offsets["a.result"]
    bad = ProgramRunner(Program(ir, plan)).run(feeds)
    assert not np.allclose(bad["y"], evaluate(fn, feeds)["y"])


def test_bad_inputs_are_reported_as_the_evaluator_reports_them():
    fn = small_net()
    compiled = get_backend("interpreter").compile(fn, CompileOptions())
    feeds = feeds_for(fn)
    for bad, message in [({**feeds, "z": feeds["x"]}, "unknown input"), ({}, "missing input 'x'"),
                         ({"x": feeds["x"][0]}, "expected shape"), ({"x": feeds["x"] > 0}, "expected float32")]:
        with pytest.raises(InputError, match=message):
            compiled.execute(bad)
        with pytest.raises(InputError, match=message):
            evaluate(fn, bad)
    # integers convert to a float input, as the evaluator converts them
    ints = {"x": np.ones((1, 2, 4, 4), np.int32)}
    assert_matches_reference(fn, compiled.execute(ints), ints)
