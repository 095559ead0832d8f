"""fuse-activations: exported GELU (erf and tanh forms), SiLU and HardSwish arithmetic become one node.

Each case checks structure (the pattern is one node of the intended kind, nothing of it left) and numbers
(the interpreter's outputs on random inputs agree within float32 roundings), and that near misses stay.
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest

import glowsdk
from glowsdk.compiler.passes import GRAPH_OPTIMIZATION, PassManager, run_passes
from glowsdk.graph import ElemKind, Module, Type
from glowsdk.graph.nodes import elementwise as ew
from glowsdk.reference.evaluator import evaluate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from exported_models import exported_model  # noqa: E402

F32 = ElemKind.FLOAT32
RNG = np.random.default_rng(0)
PASS = ["fuse-activations", "dce"]


def _graph(build):
    """A function y = build(fn, c, x) of one float32 input x (3 x 40), `c(value)` making a scalar Constant."""
    module = Module()
    fn = module.create_function("main")
    x = module.create_placeholder("x", Type(F32, (3, 40))).result()
    names = iter(range(100))

    def c(value: float):
        return module.create_constant(f"c{next(names)}", np.asarray(value, np.float32)).result()

    fn.save(build(fn, c, x), "y")
    return module, fn


def _fused(module, fn):
    """The optimised copy, its outputs checked against the original's on random inputs (some far out)."""
    feeds = {"x": (RNG.standard_normal((3, 40)) * 3).astype(np.float32)}
    copy = module.clone().functions["main"]
    changed = run_passes(copy, PASS)
    np.testing.assert_allclose(evaluate(copy, feeds)["y"], evaluate(fn, feeds)["y"], rtol=1e-5, atol=1e-6)
    return copy, changed


def _gelu_erf(fn, c, x):  # PyTorch: (x * (1 + erf(x / sqrt(2)))) * 0.5
    curve = fn.add(ew.Add, fn.add(ew.Erf, fn.add(ew.Div, x, c(math.sqrt(2)))), c(1.0))
    return fn.add(ew.Mul, fn.add(ew.Mul, x, curve), c(0.5))


def _gelu_erf_hf(fn, c, x):  # x * 0.5 * (1 + erf(x * (1 / sqrt(2)))), the other association
    curve = fn.add(ew.Add, c(1.0), fn.add(ew.Erf, fn.add(ew.Mul, c(1 / math.sqrt(2)), x)))
    return fn.add(ew.Mul, fn.add(ew.Mul, x, c(0.5)), curve)


def _gelu_tanh(fn, c, x):  # PyTorch's approximate="tanh" below opset 20
    cube = fn.add(ew.Mul, x, fn.add(ew.Mul, x, x))
    inner = fn.add(ew.Mul, c(math.sqrt(2 / math.pi)), fn.add(ew.Add, x, fn.add(ew.Mul, c(0.044715), cube)))
    curve = fn.add(ew.Add, c(1.0), fn.add(ew.Tanh, inner))
    return fn.add(ew.Mul, c(0.5), fn.add(ew.Mul, x, curve))


def _gelu_tanh_pow(fn, c, x):
    cube = fn.add(ew.Pow, x, c(3.0))
    inner = fn.add(ew.Mul, fn.add(ew.Add, fn.add(ew.Mul, cube, c(0.044715)), x), c(math.sqrt(2 / math.pi)))
    curve = fn.add(ew.Add, fn.add(ew.Tanh, inner), c(1.0))
    return fn.add(ew.Mul, fn.add(ew.Mul, curve, c(0.5)), x)


def _silu(fn, c, x):
    return fn.add(ew.Mul, fn.add(ew.Sigmoid, x), x)


def _hard_swish(fn, c, x):
    return fn.add(ew.Mul, x, fn.add(ew.HardSigmoid, x, alpha=1 / 6, beta=0.5))


@pytest.mark.parametrize("build,kind,attrs", [
    (_gelu_erf, "Gelu", {"approximate": "none"}), (_gelu_erf_hf, "Gelu", {"approximate": "none"}),
    (_gelu_tanh, "Gelu", {"approximate": "tanh"}), (_gelu_tanh_pow, "Gelu", {"approximate": "tanh"}),
    (_silu, "Silu", {}), (_hard_swish, "HardSwish", {}),
])
def test_the_pattern_becomes_one_node(build, kind, attrs):
    module, fn = _graph(build)
    copy, changed = _fused(module, fn)
    assert changed
    assert [n.kind for n in copy.nodes] == [kind, "Save"]
    assert copy.nodes[0].attrs == attrs and copy.nodes[0].input.node.name == "x"


def _wrong_half(fn, c, x):  # 0.4 is no GELU
    curve = fn.add(ew.Add, fn.add(ew.Erf, fn.add(ew.Div, x, c(math.sqrt(2)))), c(1.0))
    return fn.add(ew.Mul, fn.add(ew.Mul, x, curve), c(0.4))


def _shared_erf(fn, c, x):  # the Erf is read outside the pattern too: fusing would compute it twice
    erf = fn.add(ew.Erf, fn.add(ew.Div, x, c(math.sqrt(2))))
    gelu = fn.add(ew.Mul, fn.add(ew.Mul, x, fn.add(ew.Add, erf, c(1.0))), c(0.5))
    return fn.add(ew.Add, gelu, erf)


def _other_sigmoid(fn, c, x):  # y * sigmoid(x), y != x
    return fn.add(ew.Mul, fn.add(ew.Sigmoid, x), fn.add(ew.Neg, x))


@pytest.mark.parametrize("build", [_wrong_half, _shared_erf, _other_sigmoid])
def test_near_misses_stay(build):
    module, fn = _graph(build)
    copy, changed = _fused(module, fn)
    assert not changed and copy.count_kinds() == fn.count_kinds()


def test_the_graph_optimisation_pipeline_fuses_the_exported_transformers_gelu():
    network = glowsdk.load(exported_model("transformer_encoder"))
    fn = network.function.module.clone().functions[network.function.name]
    PassManager().run(GRAPH_OPTIMIZATION, fn)
    kinds = fn.count_kinds()
    assert kinds.get("Gelu") == 2 and "Erf" not in kinds
