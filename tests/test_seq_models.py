"""Issue 23's sequence models (tests/models, scripts/export_seq_models.py) in the interpreter against onnxruntime.

The files must keep the structure they were exported to test (embedding Gather, attention MatMuls, a -inf mask,
LayerNorm, GELU; LSTM, GRU) and stay small; glowsdk's float run must match onnxruntime on the original file.
"""
import collections
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import glowsdk

from seq_models import SEQ_MODELS, seq_inputs, seq_model

STRUCTURE = {
    "bert_layer": {"Gather", "MatMul", "Softmax", "LayerNormalization", "Erf", "Transpose"},
    "decoder_layer": {"Gather", "MatMul", "Softmax", "LayerNormalization", "Tanh", "Transpose"},
    "lstm_seq": {"LSTM", "Gemm"},
    "gru_seq": {"GRU", "Gemm"},
}


@pytest.mark.parametrize("name", SEQ_MODELS)
def test_file_structure(name):
    path = seq_model(name)
    assert os.path.getsize(path) < 1 << 20
    model = onnx.load(path)
    onnx.checker.check_model(model)
    ops = set(collections.Counter(n.op_type for n in model.graph.node))
    assert STRUCTURE[name] <= ops, STRUCTURE[name] - ops


def test_decoder_mask_is_minus_infinity():
    """The causal mask reaches glowsdk as a constant holding -inf above the diagonal."""
    model = onnx.load(seq_model("decoder_layer"))
    values = [onnx.numpy_helper.to_array(t) for t in model.graph.initializer]
    values += [onnx.numpy_helper.to_array(a.t) for n in model.graph.node if n.op_type == "Constant"
               for a in n.attribute if a.name == "value"]
    masks = [v for v in values if v.ndim == 2 and v.shape[0] == v.shape[1] and np.isinf(v).any()]
    assert len(masks) == 1 and np.array_equal(np.isneginf(masks[0]), np.triu(np.ones_like(masks[0], bool), 1))


@pytest.mark.parametrize("name", SEQ_MODELS)
def test_interpreter_matches_onnxruntime(name):
    feeds = seq_inputs(name, seed=1)
    session = ort.InferenceSession(seq_model(name), providers=["CPUExecutionProvider"])
    expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    net = glowsdk.load(seq_model(name))
    got = glowsdk.compile(net, target="interpreter").run(feeds)
    for key, want in expected.items():
        np.testing.assert_allclose(got[key], want, rtol=1e-4, atol=1e-4)
