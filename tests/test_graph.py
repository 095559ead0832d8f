"""The high-level IR: construction, type rules, the verifier, editing and printing."""
import numpy as np
import pytest

from glowsdk.errors import GraphError
from glowsdk.graph import ElemKind, Module, NODE_KINDS, Type, nodes
from glowsdk.graph.printer import format_dot, format_function
from glowsdk.reference.evaluator import evaluate
from glowsdk.reference.registry import KERNELS

F32 = ElemKind.FLOAT32


def small_function():
    module = Module()
    fn = module.create_function("main")
    x = module.create_placeholder("x", Type(F32, (2, 3))).result()
    w = module.create_constant("w", np.arange(3, dtype=np.float32)).result()
    s = fn.add(nodes.Add, x, w, name="sum")
    r = fn.add(nodes.Relu, s, name="relu")
    fn.save(r, "out")
    return module, fn


def test_build_verify_and_evaluate():
    module, fn = small_function()
    fn.verify()
    x = np.array([[-5, 0, 1], [2, -3, 4]], np.float32)
    out = evaluate(fn, {"x": x})["out"]
    np.testing.assert_array_equal(out, np.maximum(x + np.arange(3, dtype=np.float32), 0))
    assert fn.count_kinds() == {"Add": 1, "Relu": 1, "Save": 1}


def test_type_rule_rejects_ill_typed_operands():
    module, fn = small_function()
    i = module.create_placeholder("i", Type(ElemKind.INT64, (2, 3))).result()
    with pytest.raises(GraphError, match=r"node 'bad' \(Add\): operands must share one element kind"):
        fn.add(nodes.Add, fn.nodes[0].result(), i, name="bad")
    with pytest.raises(GraphError, match=r"node 'shape' \(Add\)"):
        fn.add(nodes.Add, fn.nodes[0].result(), module.create_constant("c", np.ones(4, np.float32)).result(),
               name="shape")


def test_verifier_names_node_with_wrong_declared_type():
    module, fn = small_function()
    relu = fn.nodes[1]
    relu.types = [Type(F32, (3, 2))]
    with pytest.raises(GraphError, match=r"node 'relu' \(Relu\): declared type"):
        fn.verify()


def test_verifier_finds_cycles():
    module, fn = small_function()
    add, relu = fn.nodes[0], fn.nodes[1]
    fn.set_input(add, 0, relu.result())
    with pytest.raises(GraphError, match="cycle"):
        fn.verify()


def test_verifier_rejects_values_from_another_function():
    module, fn = small_function()
    other = module.create_function("other")
    with pytest.raises(GraphError, match="not in function 'other'"):
        other.add(nodes.Relu, fn.nodes[0].result())


def test_erase_refuses_used_nodes_and_replace_checks_types():
    module, fn = small_function()
    add = fn.nodes[0]
    with pytest.raises(GraphError, match="still used by relu"):
        fn.erase(add)
    other = module.create_placeholder("z", Type(F32, (3,))).result()
    with pytest.raises(GraphError, match="cannot replace"):
        fn.replace_all_uses(add.result(), other)


def test_structural_key_equal_for_identical_nodes():
    module, fn = small_function()
    add = fn.nodes[0]
    twin = fn.create(nodes.Add, list(add.inputs), name="twin")
    assert twin.key() == add.key()
    other = fn.create(nodes.Sub, list(add.inputs), name="sub")
    assert other.key() != add.key()


def test_unknown_or_missing_attributes_are_errors():
    module, fn = small_function()
    x = module.placeholders["x"].result()
    with pytest.raises(GraphError, match="has no attribute"):
        fn.add(nodes.Relu, x, alpha=1.0)
    with pytest.raises(GraphError, match="needs attribute 'to'"):
        fn.add(nodes.Cast, x)


def test_text_and_dot_dumps():
    module, fn = small_function()
    text = format_function(fn)
    assert "%relu = Relu(input=%sum) : float32<2x3>" in text
    assert "%x = placeholder input : float32<2x3>" in text
    dot = format_dot(fn)
    assert dot.startswith('digraph "main"') and dot.count("->") == 5


def test_every_kind_is_documented_and_has_a_reference_kernel():
    for name, cls in NODE_KINDS.items():
        assert cls.spec.doc, f"{name} has no doc"
        if name != "Save":
            assert name in KERNELS, f"{name} has no reference kernel"


def test_quantized_types_carry_scale_and_offset():
    t = Type(ElemKind.QINT8, (4,), 0.5, -3)
    assert str(t) == "int8q[0.5,-3]<4>"
    with pytest.raises(ValueError):
        Type(ElemKind.QINT8, (4,))
    with pytest.raises(ValueError):
        Type(ElemKind.FLOAT32, (4,), 0.5, 0)


def test_node_kind_reference_is_current():
    from pathlib import Path

    from glowsdk.graph import docgen

    guide = Path(__file__).resolve().parent.parent / "vendor_guide" / "node_kinds.md"
    assert guide.read_text() == docgen.render() + "\n", \
        "regenerate: python -m glowsdk.graph.docgen > vendor_guide/node_kinds.md"
