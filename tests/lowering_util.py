"""Test helper: lower a graph for the interpreter and compare with the unlowered reference."""
from __future__ import annotations

from typing import Mapping

import numpy as np
import onnx

from glowsdk.backends import get_backend
from glowsdk.compiler.lowering.primitives import is_primitive
from glowsdk.compiler.pipeline import compile_function
from glowsdk.frontend.onnx.importer import import_model
from glowsdk.graph.node import Storage
from glowsdk.reference.evaluator import evaluate


def check_lowering(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], constants=(),
                   rtol: float = 1e-5, atol: float = 1e-6, expect_lowered: str | None = None) -> dict:
    """Import `model`, evaluate it unlowered (the reference), compile it for the interpreter
    (which runs only primitives) and check the results agree and only primitives remain.

    Returns the node counts of the lowered function. `expect_lowered` names a kind that
    must appear in the imported graph and must be gone after lowering.
    """
    bound = {n: feeds[n] for n in constants}
    runtime = {n: a for n, a in feeds.items() if n not in bound}
    module = import_model(model, input_shapes={n: a.shape for n, a in runtime.items()}, constants=bound)
    function = module.functions["main"]
    if expect_lowered is not None:
        assert expect_lowered in function.count_kinds(), function.count_kinds()
    want = evaluate(function, runtime)
    lowered = {}

    def grab(stage, fn):
        if stage == "lowered":
            lowered["counts"] = fn.count_kinds()
            lowered["bad"] = [n.kind for n in fn.nodes
                              if not isinstance(n, Storage) and n.kind != "Save" and not is_primitive(n)]

    compiled = compile_function(function, get_backend("interpreter"), on_stage=grab, verify_each=True)
    assert not lowered["bad"], f"non-primitive kinds after lowering: {lowered['bad']}"
    if expect_lowered is not None:
        assert expect_lowered not in lowered["counts"], lowered["counts"]
    got = compiled.execute(runtime)
    for name, value in want.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
        if value.dtype.kind in "fc" or value.dtype.name.startswith(("bfloat", "float")):
            np.testing.assert_allclose(got[name].astype(np.float64), value.astype(np.float64),
                                       rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(got[name], value)
    return lowered["counts"]
