"""Lowering of LSTM, GRU and RNN: unrolled over time onto MatMul, Add, Mul, Slice, Concat,
Where and the activation kinds (which lower further), checked against the unlowered
reference kernels on seeded random inputs."""
import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import helper

from glowsdk.backends import get_backend
from glowsdk.compiler.lowering.driver import lower_function
from glowsdk.frontend.onnx.importer import import_model
from lowering_util import check_lowering
from rnn_cases import recurrent_node

SEQ, BATCH, SIZE, HIDDEN = 4, 3, 5, 6


def make_case(op, present=("B",), lengths=None, layout=0, runtime=("X",), dtype=np.float32, seed=0,
              seq=SEQ, **attrs):
    """(model, feeds, constants) for one recurrent node; every input is a model input, those
    outside `runtime` bound as compile-time constants."""
    node, arrays, outputs = recurrent_node(op, seq=seq, batch=BATCH, size=SIZE, hidden=HIDDEN, present=present,
                                           lengths=lengths, layout=layout, dtype=dtype, seed=seed, attrs=attrs)
    feeds = arrays
    graph = helper.make_graph(
        [node], op.lower(),
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in feeds.items()],
        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    return model, feeds, [n for n in feeds if n not in runtime]


def check(op, rtol=1e-4, atol=1e-5, **kwargs):
    """Check the numbers through the whole pipeline; return the node counts right after
    lowering (before the post-lowering passes fold and merge them)."""
    model, feeds, constants = make_case(op, **kwargs)
    check_lowering(model, feeds, constants, rtol=rtol, atol=atol, expect_lowered=op)
    bound = {n: feeds[n] for n in constants}
    shapes = {n: a.shape for n, a in feeds.items() if n not in bound}
    function = import_model(model, input_shapes=shapes, constants=bound).functions["main"]
    lower_function(function, get_backend("interpreter"))
    return function.count_kinds()


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction,layout", [("forward", 0), ("reverse", 1), ("bidirectional", 1)])
def test_directions_and_layouts(op, direction, layout):
    counts = check(op, direction=direction, layout=layout, present=("B", "initial_h", "initial_c", "P"))
    dirs = 2 if direction == "bidirectional" else 1
    per_step = {"LSTM": 1, "GRU": 2, "RNN": 1}[op]
    assert counts["MatMul"] == dirs * (1 + per_step * SEQ)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_without_optional_inputs_and_with_runtime_weights(op):
    check(op, present=(), direction="bidirectional")
    check(op, present=("B", "initial_h", "initial_c"), runtime=("X", "W", "R", "B", "initial_h", "initial_c"))


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_clip(op):
    counts = check(op, clip=0.7, direction="bidirectional")
    clips_per_step = {"LSTM": 4, "GRU": 2, "RNN": 1}[op]  # GRU clips z and r together
    assert counts["Max"] >= 2 * SEQ * clips_per_step


def test_lstm_input_forget_and_peepholes():
    check("LSTM", input_forget=1, present=("B", "P"))
    check("LSTM", input_forget=1, present=("P", "initial_c"), direction="reverse", layout=1)


@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("present", [(), ("B", "initial_h")])
def test_gru_linear_before_reset(linear_before_reset, present):
    check("GRU", linear_before_reset=linear_before_reset, present=present, direction="bidirectional")


PARAMS = {"LeakyRelu": (0.2,), "ThresholdedRelu": (0.4,), "Elu": (0.7,), "Affine": (0.8, -0.3),
          "ScaledTanh": (1.3, 0.6), "HardSigmoid": (0.3, 0.4)}
"""alpha (and beta) of the activations that take them."""
ACTIVATIONS = [["Relu", "Affine", "LeakyRelu"], ["HardSigmoid", "ScaledTanh", "Elu"],
               ["Sigmoid", "Softsign", "Softplus"], ["ThresholdedRelu", "Tanh", "Tanh"]]


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("names", ACTIVATIONS)
def test_activations(op, names):
    count = {"LSTM": 3, "GRU": 2, "RNN": 1}[op]
    chosen = names[:count] + names[-count:]  # the two directions differ
    params = [PARAMS.get(n, ()) for n in chosen]
    packed = {"activation_alpha": [p[0] for p in params if p],
              "activation_beta": [p[1] for p in params if len(p) > 1]}
    check(op, activations=chosen, direction="bidirectional", seq=2, **{k: v for k, v in packed.items() if v})


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("layout", [0, 1])
def test_lengths_at_run_time(op, layout):
    counts = check(op, lengths=[4, 0, 2], runtime=("X", "sequence_lens"), layout=layout,
                   direction="bidirectional", present=("B", "initial_h", "initial_c"))
    assert counts["Less"] == 2  # one table of valid steps, one mask of started entries


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_constant_lengths_use_compile_time_masks(op):
    counts = check(op, lengths=[2, 0, 1], direction="bidirectional", present=("B", "initial_h"))
    assert "Less" not in counts
    # steps 2 and 3 are nobody's: neither direction computes them
    per_step = {"LSTM": 1, "GRU": 2, "RNN": 1}[op]
    assert counts["MatMul"] == 2 * (1 + per_step * 2)
    full = check(op, lengths=[4, 4, 4], present=("initial_h",))
    assert "Where" not in full


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float64])
def test_element_kinds(op, dtype):
    tolerance = {np.float16: {"rtol": 2e-3, "atol": 2e-3}, ml_dtypes.bfloat16: {"rtol": 2e-2, "atol": 2e-2},
                 np.float64: {"rtol": 1e-10, "atol": 1e-12}}[dtype]
    counts = check(op, dtype=dtype, direction="bidirectional", present=("B", "initial_h", "initial_c", "P"),
                   lengths=[3, 1, 4], runtime=("X", "sequence_lens"), **tolerance)
    assert ("Cast" in counts) == (dtype != np.float64)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_one_step_and_no_steps(op):
    check(op, seq=1, direction="bidirectional")
    counts = check(op, seq=0, direction="bidirectional", present=("B", "initial_h"))
    assert "MatMul" not in counts
