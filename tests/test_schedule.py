"""The memory-minimising scheduler: the liveness model, valid orders, and lower peaks."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from glowsdk.api import load
from glowsdk.backends import get_backend
from glowsdk.compiler.pipeline import STAGES, compile_function
from glowsdk.compiler.schedule import _STRATEGIES, _Graph, live_bytes_profile, peak_live_bytes, schedule
from glowsdk.errors import GraphError
from glowsdk.graph import ElemKind, Module, Type, nodes
from glowsdk.graph.function import Function
from glowsdk.graph.node import Node
from glowsdk.reference.evaluator import evaluate

F32 = ElemKind.FLOAT32


def live_by_definition(order: list[Node]) -> list[int]:
    """The module docstring's model, computed the slow, obvious way."""
    step = {id(n): s for s, n in enumerate(order)}
    profile = []
    for s in range(len(order)):
        total = 0
        for node in order:
            for index, type_ in enumerate(node.types):
                readers = [step[id(u)] for u in node.users
                           if any(v is not None and v.node is node and v.index == index for v in u.inputs)]
                if step[id(node)] <= s <= max(readers, default=step[id(node)]):
                    total += type_.nbytes
        profile.append(total)
    return profile


def assert_topological(function: Function) -> None:
    step = {id(n): s for s, n in enumerate(function.nodes)}
    for node in function.nodes:
        for value in node.present_inputs():
            assert step.get(id(value.node), -1) < step[id(node)], f"{node.name} runs before {value.node.name}"
    function.verify()


def diamond() -> Function:
    """a = relu(x); b = concat(a, a); c = tanh(a); d = concat(b, c); save d. x is 1x8 float32."""
    module = Module()
    fn = module.create_function("main")
    x = module.create_placeholder("x", Type(F32, (1, 8))).result()
    a = fn.add(nodes.Relu, x, name="a")
    b = fn.add(nodes.Concat, a, a, name="b", axis=1)
    c = fn.add(nodes.Tanh, a, name="c")
    d = fn.add(nodes.Concat, b, c, name="d", axis=1)
    fn.save(d, "out")
    return fn


def test_diamond_profile_by_hand():
    fn = diamond()
    # a=32 B, b=64 B, c=32 B, d=96 B; x and the output placeholder are storage.
    # a: {a}=32; b: {a,b}=96; c: {a,b,c}=128 (a's last use); d: {b,c,d}=192; save: {d}=96.
    assert live_bytes_profile(fn, fn.nodes) == [32, 96, 128, 192, 96]
    assert peak_live_bytes(fn, fn.nodes) == 192
    a, b, c, d, save = fn.nodes
    assert live_bytes_profile(fn, [a, c, b, d, save]) == [32, 64, 128, 192, 96]


def test_multi_result_nodes_allocate_every_result():
    module = Module()
    fn = module.create_function("main")
    x = module.create_placeholder("x", Type(F32, (1, 8))).result()
    topk = fn.create(nodes.TopK, [x], name="topk", k=2, axis=1)
    fn.save(fn.add(nodes.Tanh, topk.result(0)), "out")
    # topk: values 8 B + unused int64 indices 16 B; tanh: values + its result; save: the result.
    assert live_bytes_profile(fn, fn.nodes) == [24, 16, 8]


def test_orders_that_are_not_topological_are_rejected():
    fn = diamond()
    a, b, c, d, save = fn.nodes
    with pytest.raises(GraphError, match="runs 'd' before its operand 'c'"):
        live_bytes_profile(fn, [a, b, d, c, save])
    with pytest.raises(GraphError, match="not a permutation"):
        live_bytes_profile(fn, [a, b, c, d])


def branchy() -> Function:
    """Four branches that each take tanh of an input (64 B), expand it eightfold (512 B) and sum
    it (4 B), built breadth-first; the four sums are joined (16 B) and saved."""
    module = Module()
    fn = module.create_function("main")
    xs = [module.create_placeholder(f"x{k}", Type(F32, (1, 16))).result() for k in range(4)]
    t = [fn.add(nodes.Tanh, x, name=f"t{k}") for k, x in enumerate(xs)]
    big = [fn.add(nodes.Concat, *[v] * 8, name=f"big{k}", axis=1) for k, v in enumerate(t)]
    small = [fn.add(nodes.ReduceSum, v, name=f"small{k}", axes=[1]) for k, v in enumerate(big)]
    fn.save(fn.add(nodes.Concat, *small, name="joined", axis=1), "out")
    return fn


def test_scheduler_strictly_beats_breadth_first_order():
    fn = branchy()
    rng = np.random.default_rng(0)
    x = {f"x{k}": rng.standard_normal((1, 16)).astype(np.float32) for k in range(4)}
    expected = evaluate(fn, x)
    report = schedule(fn)
    assert_topological(fn)
    # Breadth-first holds all four tanh and expansions by the last expansion: 64 + 4*512 = 2112 B.
    # Branch by branch holds one tanh, one expansion and the sums so far: at most 64 + 512 + 3*4 = 588 B.
    assert report.original_peak == 2112
    assert report.scheduled_peak == 588 == peak_live_bytes(fn, fn.nodes)
    assert report.lower_bound == 576 and report.saved_fraction > 0.7
    assert [n.name for n in fn.nodes[:4]] == ["t0", "big0", "small0", "t1"]
    np.testing.assert_array_equal(evaluate(fn, x)["out"], expected["out"])


def test_schedule_is_deterministic_and_stable():
    first, second = diamond(), diamond()
    shuffled = branchy()
    for fn in (first, second, shuffled):
        schedule(fn)
    assert [n.name for n in first.nodes] == [n.name for n in second.nodes]
    again = [n.name for n in shuffled.nodes]
    report = schedule(shuffled)
    assert [n.name for n in shuffled.nodes] == again and report.strategy == "original"


@st.composite
def random_functions(draw) -> Function:
    """Small DAGs of Tanh, Concat, ReduceSum, Add, TopK (indices unused) and Splat over 1xW float32."""
    module = Module()
    fn = module.create_function("main")
    values = [module.create_placeholder("x", Type(F32, (1, draw(st.integers(1, 6))))).result()]
    for _ in range(draw(st.integers(1, 14))):
        op = draw(st.sampled_from(["tanh", "concat", "sum", "add", "topk", "splat"]))
        a, b = (values[draw(st.integers(0, len(values) - 1))] for _ in range(2))
        if op == "tanh" or (op == "add" and a.type != b.type):
            values.append(fn.add(nodes.Tanh, a))
        elif op == "concat":
            values.append(fn.add(nodes.Concat, a, b, axis=1))
        elif op == "sum":
            values.append(fn.add(nodes.ReduceSum, a, axes=[1]))
        elif op == "add":
            values.append(fn.add(nodes.Add, a, b))
        elif op == "topk":
            values.append(fn.create(nodes.TopK, [a], k=1, axis=1).result(0))
        else:
            values.append(fn.add(nodes.Splat, shape=[1, draw(st.integers(1, 9))], value=0.5, elem=F32))
    for i, value in enumerate(draw(st.lists(st.sampled_from(values[1:]), min_size=1, max_size=3, unique=True))):
        fn.save(value, f"out{i}")
    return fn


@settings(max_examples=60, deadline=None)
@given(random_functions())
def test_random_graphs(fn: Function):
    assert live_bytes_profile(fn, fn.nodes) == live_by_definition(fn.nodes)
    graph = _Graph(fn)
    for name, strategy in _STRATEGIES.items():
        order = [graph.nodes[i] for i in strategy(graph)]
        assert live_bytes_profile(fn, order) == live_by_definition(order), name
    x = {"x": np.linspace(-1, 1, fn.module.placeholders["x"].type.size, dtype=np.float32).reshape(1, -1)}
    expected = evaluate(fn, x)
    report = schedule(fn)
    assert_topological(fn)
    assert report.lower_bound <= report.scheduled_peak <= report.original_peak
    assert report.scheduled_peak == min(report.peaks.values()) == peak_live_bytes(fn, fn.nodes)
    outputs = evaluate(fn, x)
    for name, array in expected.items():
        np.testing.assert_array_equal(outputs[name], array)


@pytest.mark.parametrize("model", ["inception_v1", "shufflenet", "densenet121"])
def test_bundled_networks_need_less_memory(model: str):
    network = load(model)
    fn = network.module.clone().functions["main"]
    report = schedule(fn)
    assert_topological(fn)
    assert report.scheduled_peak < report.original_peak
    graph = _Graph(fn)
    for strategy in _STRATEGIES.values():
        order = strategy(graph)
        assert sorted(order) == list(range(len(graph.nodes)))
        graph.indices([graph.nodes[i] for i in order])


def test_scheduled_network_computes_the_same_outputs():
    network = load("shufflenet", random_weights=0)
    fn = network.module.clone().functions["main"]
    report = schedule(fn)
    assert report.strategy != "original" and report.scheduled_peak < report.original_peak
    inputs = network.random_inputs(0)
    expected = evaluate(network.function, inputs)
    for name, array in evaluate(fn, inputs).items():
        np.testing.assert_array_equal(array, expected[name])


def test_compile_function_schedules_after_the_backend_transform():
    fn = branchy()
    seen: dict[str, int] = {}
    compile_function(fn, get_backend("interpreter"),
                     on_stage=lambda stage, f: seen.setdefault(stage, peak_live_bytes(f, f.nodes)))
    assert tuple(seen) == tuple(s for s in STAGES if s != "quantized")  # no profile, no quantization
    assert seen["scheduled"] < seen["transformed"]
