"""LSTM, GRU and RNN against onnxruntime (and onnx.reference for layout 1) on seeded random inputs.

onnx.reference ignores activations, clip, input_forget and sequence_lens, so
those are checked against onnxruntime; onnxruntime refuses layout 1, which is
checked against onnx.reference.
"""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from glowsdk.errors import GraphError, UnsupportedError
from glowsdk.frontend.onnx.importer import import_model
from glowsdk.graph.nodes import rnn

from oracle import glow_run, reference_run
from rnn_cases import recurrent_node



def make_case(op, seq=4, batch=3, size=5, hidden=6, present=("B",), lengths=None, layout=0, opset=22,
              runtime=("X",), seed=0, **attrs):
    """(model, feeds) for one recurrent node; inputs in `runtime` are graph inputs, others initializers."""
    node, arrays, outputs = recurrent_node(op, seq=seq, batch=batch, size=size, hidden=hidden, present=present,
                                           lengths=lengths, layout=layout, dtype=np.float32, seed=seed,
                                           attrs=attrs)
    feeds = {n: a for n, a in arrays.items() if n in runtime}
    inits = [numpy_helper.from_array(a, n) for n, a in arrays.items() if n not in runtime]
    graph = helper.make_graph(
        [node], op.lower(),
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in feeds.items()],
        [helper.make_tensor_value_info(o, onnx.TensorProto.FLOAT, None) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model, feeds


def ort_run(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def check(model, feeds, oracle=ort_run):
    want = oracle(model, feeds)
    got = glow_run(model, feeds)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("present", [(), ("B", "initial_h", "initial_c", "P")])
def test_directions_and_optional_inputs(op, direction, present):
    check(*make_case(op, direction=direction, present=present))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("runtime", [("X",), ("X", "sequence_lens")])
def test_sequence_lens_masks_each_batch_entry(op, direction, runtime):
    model, feeds = make_case(op, batch=4, lengths=[4, 1, 0, 2], present=("B", "initial_h", "initial_c"),
                             runtime=runtime, direction=direction)
    check(model, feeds)


def test_full_length_sequence_lens_is_dropped():
    model, feeds = make_case("GRU", lengths=[4, 4, 4])
    module = import_model(model, input_shapes={"X": feeds["X"].shape})
    (node,) = [n for n in module.functions["main"].nodes if isinstance(n, rnn.GRU)]
    assert node.lengths is None
    check(model, feeds)


@pytest.mark.parametrize("op,attrs", [
    ("LSTM", dict(activations=["HardSigmoid", "LeakyRelu", "Softplus"], activation_alpha=[0.3, 0.2],
                  activation_beta=[0.4])),
    ("LSTM", dict(activations=["Sigmoid", "Tanh", "Tanh", "HardSigmoid", "Elu", "Softsign"],
                  direction="bidirectional", activation_alpha=[0.25, 0.8], activation_beta=[0.45])),
    ("LSTM", dict(clip=0.7, input_forget=1)),
    ("GRU", dict(activations=["Sigmoid", "ScaledTanh"], activation_alpha=[1.5], activation_beta=[0.7])),
    ("GRU", dict(linear_before_reset=1, clip=1.1, direction="bidirectional")),
    ("RNN", dict(activations=["Relu"], clip=2.0)),
    ("RNN", dict(activations=["Affine", "ThresholdedRelu"], activation_alpha=[0.5, 0.1],
                 activation_beta=[0.2], direction="bidirectional")),
])
def test_activations_clip_and_gate_options(op, attrs):
    check(*make_case(op, present=("B", "initial_h", "initial_c", "P"), **attrs))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_batch_major_layout(op, direction):
    check(*make_case(op, layout=1, direction=direction, present=("B", "initial_h", "initial_c")),
          oracle=reference_run)


def test_opset_7_and_weights_at_run_time():
    check(*make_case("LSTM", opset=7, runtime=("X", "W", "R", "B"), present=("B", "P")))


def test_unknown_activation_is_unsupported():
    model, feeds = make_case("RNN", activations=["Gelu"])
    with pytest.raises(UnsupportedError, match=r"node 'Y' \(RNN\): activation 'Gelu'"):
        import_model(model)


def test_leftover_activation_alpha_is_unsupported():
    model, _ = make_case("GRU", activation_alpha=[0.5])
    with pytest.raises(UnsupportedError, match=r"node 'Y' \(GRU\): activation_alpha has more values"):
        import_model(model)


def test_misshapen_weights_are_a_graph_error():
    model, _ = make_case("LSTM", hidden=6)
    model.graph.node[0].attribute[0].i = 5  # hidden_size no longer fits W and R
    expected = r"node 'Y' \(LSTM\): weights has shape \[1, 24, 5\], expected \[1, 20, 5\]"
    with pytest.raises(GraphError, match=expected):
        import_model(model)
