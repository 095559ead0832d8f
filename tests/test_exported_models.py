"""Small PyTorch-exported models (random weights, tests/models) in glowsdk against onnxruntime.

The models come from scripts/export_test_models.py (TorchScript exporter, opset 17):
a MobileNetV2-style CNN with BatchNorm left in the graph, a two-layer transformer
encoder over token ids, a two-layer LSTM and a small U-Net. Each is imported from
its file as PyTorch wrote it, compiled for the interpreter and cpu targets and run on
seeded random inputs; onnxruntime is the oracle.
"""
import collections
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import glowsdk

from exported_models import EXPORTED_MODELS, exported_model, model_inputs

# float32 throughout; glowsdk and onnxruntime sum convolutions, matrix products, reductions
# and the LSTM's recurrences in different orders. The measured differences are below 1e-6,
# so the default tolerances leave two orders of magnitude of headroom.
RTOL = 1e-4
ATOL = 1e-4

# Ops that make each model what it is: a re-export that lost them would no longer test them.
STRUCTURE = {
    "mobilenet_v2_mini": {"Conv", "BatchNormalization", "Clip", "Add", "GlobalAveragePool", "Gemm"},
    "transformer_encoder": {"Gather", "MatMul", "Softmax", "LayerNormalization", "Erf", "Add"},
    "lstm": {"LSTM", "Gemm"},
    "unet_small": {"Conv", "Relu", "MaxPool", "ConvTranspose", "Resize", "Concat"},
}

SEEDS = (0, 1)


@pytest.fixture(scope="module")
def oracle():
    """onnxruntime's outputs by (model, seed), computed once."""
    cache = {}

    def run(name, seed):
        if (name, seed) not in cache:
            session = ort.InferenceSession(exported_model(name), providers=["CPUExecutionProvider"])
            names = [o.name for o in session.get_outputs()]
            cache[name, seed] = dict(zip(names, session.run(None, model_inputs(name, seed))))
        return cache[name, seed]
    return run


@pytest.mark.parametrize("name", EXPORTED_MODELS)
def test_model_file(name):
    path = exported_model(name)
    assert os.path.getsize(path) < 1 << 20
    model = onnx.load(path)
    onnx.checker.check_model(model)
    ops = collections.Counter(n.op_type for n in model.graph.node)
    assert STRUCTURE[name] <= set(ops), STRUCTURE[name] - set(ops)


@pytest.mark.parametrize("target", ["interpreter", "cpu"])
@pytest.mark.parametrize("name", EXPORTED_MODELS)
def test_matches_onnxruntime(name, target, oracle):
    net = glowsdk.load(exported_model(name))
    exe = glowsdk.compile(net, target=target)
    for seed in SEEDS:
        feeds = model_inputs(name, seed)
        assert {i.name for i in net.inputs} == set(feeds)
        got = exe.run(feeds)
        want = oracle(name, seed)
        assert set(got) == set(want)
        for output, expected in want.items():
            assert got[output].shape == expected.shape, output
            assert got[output].dtype == expected.dtype, output
            np.testing.assert_allclose(got[output], expected, rtol=RTOL, atol=ATOL,
                                       err_msg=f"{name} on {target}, seed {seed}, output {output}")


def test_token_ids_span_the_vocabulary():
    tokens = np.concatenate([model_inputs("transformer_encoder", s)["tokens"].ravel() for s in range(8)])
    assert tokens.dtype == np.int64 and tokens.min() >= 0 and tokens.max() < 100
    assert tokens.max() >= 90        # not just the low ids
