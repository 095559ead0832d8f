"""The training node kinds: reference kernels against oracles written from the definitions
(numpy) or by others (onnx.reference), and their lowering onto primitives on interpreter and cpu."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from glowsdk.backends import get_backend
from glowsdk.compiler.pipeline import compile_function
from glowsdk.frontend.onnx.importer import import_model
from glowsdk.graph.function import Module
from glowsdk.graph.nodes import training as tr
from glowsdk.graph.types import ElemKind, Type
from glowsdk.reference.evaluator import evaluate
from glowsdk.training import differentiate

F32 = ElemKind.FLOAT32


def _sgd_function(shape, momentum: float, **attrs):
    module = Module()
    fn = module.create_function()
    w, g = (module.create_placeholder(n, Type(F32, shape)) for n in ("w", "g"))
    v = module.create_placeholder("v", Type(F32, shape)) if momentum else None
    node = fn.create(tr.SGD, [w.result(), g.result(), v and v.result()], momentum=momentum, **attrs)
    fn.save(node.result(0), "w_new")
    fn.save(node.result(1), "v_new")
    return fn


@pytest.mark.parametrize("target", ["reference", "interpreter", "cpu"])
@pytest.mark.parametrize("momentum,decay", [(0.0, 0.0), (0.9, 0.0), (0.5, 0.01)])
def test_sgd_matches_the_update_formula(target, momentum, decay):
    rng = np.random.default_rng(3)
    w, g, v = (rng.standard_normal((3, 4)).astype(np.float32) for _ in range(3))
    fn = _sgd_function((3, 4), momentum, learning_rate=0.1, weight_decay=decay)
    feeds = {"w": w, "g": g, **({"v": v} if momentum else {})}
    got = evaluate(fn, feeds) if target == "reference" else \
        compile_function(fn, get_backend(target)).execute(feeds)
    step = g + np.float32(decay) * w                      # L2 decay adds decay * w to the gradient
    velocity = np.float32(momentum) * v + step if momentum else step
    np.testing.assert_allclose(got["v_new"], velocity, rtol=1e-6)
    np.testing.assert_allclose(got["w_new"], w - np.float32(0.1) * velocity, rtol=1e-6)


def test_sgd_with_momentum_matches_onnx_momentum():
    """onnx.reference's ai.onnx.preview.training Momentum (standard mode, after the first step)."""
    rng = np.random.default_rng(4)
    w, g, v = (rng.standard_normal((5,)).astype(np.float32) for _ in range(3))
    node = helper.make_node("Momentum", ["r", "t", "x", "g", "v"], ["x_new", "v_new"],
                            domain="ai.onnx.preview.training", alpha=0.9, beta=1.0, mode="standard",
                            norm_coefficient=0.01)
    graph = helper.make_graph([node], "momentum", [], [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                                                      for n in ("x_new", "v_new")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("ai.onnx.preview.training", 1)])
    expected = ReferenceEvaluator(model).run(None, {"r": np.float32(0.05), "t": np.int64(3), "x": w, "g": g, "v": v})
    got = evaluate(_sgd_function((5,), 0.9, learning_rate=0.05, weight_decay=0.01), {"w": w, "g": g, "v": v})
    np.testing.assert_allclose(got["w_new"], expected[0], rtol=1e-6)
    np.testing.assert_allclose(got["v_new"], expected[1], rtol=1e-6)


def test_softmax_cross_entropy_matches_onnx():
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((6, 4)).astype(np.float32) * 3
    labels = np.array([0, 3, 1, 1, 2, 3], np.int64)
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "y"], ["loss"], reduction="mean")
    graph = helper.make_graph([node], "sce", [], [helper.make_tensor_value_info("loss", onnx.TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    expected = ReferenceEvaluator(model).run(None, {"x": logits, "y": labels})[0]
    module = Module()
    fn = module.create_function()
    x = module.create_placeholder("x", Type(F32, (6, 4)))
    y = module.create_placeholder("y", Type(ElemKind.INT64, (6,)))
    fn.save(fn.add(tr.SoftmaxCrossEntropy, x.result(), y.result()), "loss")
    for target in ("reference", "interpreter", "cpu"):
        feeds = {"x": logits, "y": labels}
        got = evaluate(fn, feeds) if target == "reference" else \
            compile_function(fn, get_backend(target)).execute(feeds)
        np.testing.assert_allclose(got["loss"], expected, rtol=1e-6, err_msg=target)


def test_regression_lowers_to_identity_for_inference():
    """Paper 3.4: without differentiation the Regression node is a no-op."""
    module = Module()
    fn = module.create_function()
    x, e = (module.create_placeholder(n, Type(F32, (2, 3))) for n in ("x", "e"))
    fn.save(fn.add(tr.Regression, x.result(), e.result()), "y")
    seen = {}
    compiled = compile_function(fn, get_backend("interpreter"),
                                on_stage=lambda stage, f: seen.setdefault(stage, f.count_kinds()))
    assert "Regression" not in seen["lowered"]
    value = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(compiled.execute({"x": value, "e": value * 0})["y"], value)


def test_training_kinds_are_not_primitives():
    """No backend implements a gradient kernel: every training kind lowers."""
    from glowsdk.compiler.lowering.primitives import PRIMITIVES
    from glowsdk.compiler.lowering.registry import LOWERINGS

    for kind in (tr.SoftmaxCrossEntropy, tr.Regression, tr.MaxPoolGrad, tr.SGD):
        assert kind.spec.name not in PRIMITIVES and kind.spec.name in LOWERINGS


ONNX_GRADIENT_CASES = ["test_gradient_of_add", "test_gradient_of_add_and_mul"]


@pytest.mark.parametrize("case", ONNX_GRADIENT_CASES)
def test_onnx_gradient_op_cases(case):
    """onnx's backend test data for the Gradient op: the forward graph is imported, differentiated
    by glowsdk with respect to the op's xs, and compared with the stored expected outputs."""
    folder = Path(onnx.__file__).parent / "backend" / "test" / "data" / "simple" / case
    model = onnx.load(folder / "model.onnx")
    grad_node = next(n for n in model.graph.node if n.op_type == "Gradient")
    attrs = {a.name: helper.get_attribute_value(a) for a in grad_node.attribute}
    xs, y = [x.decode() for x in attrs["xs"]], attrs["y"].decode()
    forward = onnx.ModelProto()
    forward.CopyFrom(model)
    del forward.graph.node[:]
    forward.graph.node.extend(n for n in model.graph.node if n.op_type != "Gradient")
    del forward.graph.output[:]
    forward.graph.output.extend(o for o in model.graph.output if o.name == y)
    del forward.opset_import[:]
    forward.opset_import.extend([helper.make_opsetid("", 13)])
    data = folder / "test_data_set_0"
    feeds = [numpy_helper.to_array(onnx.load_tensor(data / f"input_{i}.pb")) for i in range(len(xs))]
    expected = [numpy_helper.to_array(onnx.load_tensor(data / f"output_{i}.pb")) for i in range(1 + len(xs))]
    module = import_model(forward)
    fn = module.functions["main"]
    loss = fn.output_placeholders()[0]
    value = next(n for n in fn.nodes if n.kind == "Save").input
    grads = differentiate(fn, value, [module.placeholders[x] for x in xs])
    for x in xs:
        fn.save(grads[x], f"d_{x}")
    got = evaluate(fn, dict(zip(xs, feeds)))
    np.testing.assert_allclose(got[loss.name], expected[0])
    for i, x in enumerate(xs):
        np.testing.assert_allclose(got[f"d_{x}"], expected[1 + i], err_msg=x)
