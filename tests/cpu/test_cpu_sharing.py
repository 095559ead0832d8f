"""Steps that differ only in where their operands live share one kernel (codegen/sharing.py).

Counted, not timed: identical convolutions compile to one function called twice,
each call reading its own packed weights (the numbers agree with onnx's reference
evaluator); an unrolled GRU has as many kernels at 16 time steps as at 4; and
every pair of steps with equal signatures, built apart, gives the same code.
"""
from __future__ import annotations

import re
from collections import defaultdict

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from glowsdk.backends import get_backend
from glowsdk.backends.cpu.codegen.module import ModuleBuilder
from glowsdk.backends.cpu.codegen.sharing import signature, step_operands
from glowsdk.backends.cpu.jit import host_machine
from glowsdk.backends.cpu.kernels import KERNELS
from glowsdk.backends.cpu.stacking import plan_steps
from glowsdk.compiler.ir.program import build_program
from glowsdk.compiler.pipeline import compile_function
from glowsdk.frontend.onnx.importer import import_model

KERNEL = re.compile(r'^define internal i32 @"?((?:(?!\.call\b)[^"(])+)"?\(', re.M)
"""A kernel's definition (not one of the `.call` functions the entry calls it through)."""


def convs(channels: int = 8, seed: int = 0) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """x -> Conv(a) -> Relu -> Conv(b) -> Relu -> Conv(c): a and b alike but for their weights, c
    of another shape."""
    rng = np.random.default_rng(seed)
    shape = (1, channels, 10, 10)
    weights = {"a": rng.standard_normal((channels, channels, 3, 3)) * 0.2,
               "b": rng.standard_normal((channels, channels, 3, 3)) * 0.2,
               "c": rng.standard_normal((2 * channels, channels, 1, 1)) * 0.2}
    weights.update({f"{n}_bias": rng.standard_normal(w.shape[0]) for n, w in list(weights.items())})
    nodes = [helper.make_node("Conv", ["x", "a", "a_bias"], ["ya"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["ya"], ["ra"]),
             helper.make_node("Conv", ["ra", "b", "b_bias"], ["yb"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["yb"], ["rb"]),
             helper.make_node("Conv", ["rb", "c", "c_bias"], ["y"])]
    graph = helper.make_graph(
        nodes, "convs", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w.astype(np.float32), n) for n, w in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return model, {"x": rng.standard_normal(shape).astype(np.float32)}


def gru(steps: int, size: int = 8, hidden: int = 16, seed: int = 0) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A one-layer GRU over `steps` time steps with seeded weights and input."""
    rng = np.random.default_rng(seed)
    weights = {"W": rng.standard_normal((1, 3 * hidden, size)) * 0.5,
               "R": rng.standard_normal((1, 3 * hidden, hidden)) * 0.5,
               "B": rng.standard_normal((1, 6 * hidden)) * 0.5}
    node = helper.make_node("GRU", ["X", "W", "R", "B"], ["Y", "Y_h"], hidden_size=hidden, linear_before_reset=1)
    graph = helper.make_graph(
        [node], "gru", [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, (steps, 1, size))],
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in ("Y", "Y_h")],
        [numpy_helper.from_array(w.astype(np.float32), n) for n, w in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return model, {"X": rng.standard_normal((steps, 1, size)).astype(np.float32)}


def compiled(model: onnx.ModelProto, feeds: dict[str, np.ndarray]):
    module = import_model(model, input_shapes={n: a.shape for n, a in feeds.items()})
    return compile_function(module.functions["main"], get_backend("cpu"))


def check_numbers(model: onnx.ModelProto, feeds: dict[str, np.ndarray], function) -> None:
    got = function.execute(feeds)
    for output, want in zip(model.graph.output, ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_allclose(got[output.name], want, rtol=1e-4, atol=1e-4)


def test_identical_convs_share_one_kernel_each_with_its_own_weights():
    model, feeds = convs()
    function = compiled(model, feeds)
    check_numbers(model, feeds, function)
    assert sum(s.instrs[0].kind == "Conv" for s in function.steps) == 3
    kernels = [name for name in KERNEL.findall(function.llvm_ir) if name.startswith("conv.")]
    # the entry calls a kernel through its `.call` functions (module.py, ModuleBuilder._call_site)
    calls = [re.findall(rf'call i32 @"?{re.escape(name)}\.call(\.\d+)?"?\(', function.llvm_ir) for name in kernels]
    assert sorted(map(len, calls)) == [1, 2]


def test_an_unrolled_gru_has_as_many_kernels_at_16_steps_as_at_4():
    counts = []
    for steps in (4, 16):
        model, feeds = gru(steps)
        function = compiled(model, feeds)
        check_numbers(model, feeds, function)
        counts.append((len(KERNEL.findall(function.llvm_ir)), len(function.steps)))
    (short_kernels, short_steps), (long_kernels, long_steps) = counts
    assert long_steps > 3 * short_steps
    assert long_kernels == short_kernels


def kernel_text(program, step) -> str:
    """The code of `step`'s kernel built alone, its names made positional (the scratch area after
    the activations as the compile laid it out, which each builder grows)."""
    machine = host_machine()
    activation_bytes = program.plan.activation_bytes
    builder = ModuleBuilder(program, machine.triple, str(machine.target_data))
    builder.add_step(step, KERNELS[step.instrs[0].kind].build)
    program.plan.activation_bytes = activation_bytes
    text, = builder.definitions
    for index, argument in enumerate(re.findall(r'%("[^"]*")', text.split("\n", 1)[0])):
        text = text.replace(f"%{argument}", f"%arg{index}")
    text = text.replace(KERNEL.match(text).group(1), "kernel")
    return re.sub(r"@\"?kernel\.[\w.]*\"?", "@table", text)


def program_of(model: onnx.ModelProto, feeds: dict[str, np.ndarray]):
    """The Program the cpu backend builds for `model`, before code generation."""
    programs = []

    def on_stage(stage, function):
        if stage == "scheduled":
            programs.append(build_program(function))

    module = import_model(model, input_shapes={n: a.shape for n, a in feeds.items()})
    compile_function(module.functions["main"], get_backend("cpu"), on_stage=on_stage)
    return programs[0]


def test_steps_with_equal_signatures_build_the_same_code():
    for model, feeds in (gru(3), convs()):
        program = program_of(model, feeds)
        groups = defaultdict(list)
        for step in plan_steps(program):
            operands = step_operands(program.plan, step.instrs, step.epilogue)
            groups[signature(step.instrs, step.epilogue, step.unstored, operands)].append(step)
        shared = [steps for steps in groups.values() if len(steps) > 1]
        assert shared
        for steps in shared:
            first = kernel_text(program, steps[0])
            for other in steps[1:]:
                assert kernel_text(program, other) == first
