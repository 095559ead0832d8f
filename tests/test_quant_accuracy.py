"""Quantization accuracy metrics (glowsdk.quantization.accuracy), and the onnxruntime half of
bench/quantization_vs_onnxruntime.py run on a tiny Conv + Relu + Gemm model."""
from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glowsdk
import glowsdk.quantization
from glowsdk.quantization import calibration_random
from glowsdk.quantization.accuracy import (compare_outputs, cosine_similarity, is_classifier,
                                           output_accuracy)

BENCH = Path(__file__).resolve().parent.parent / "bench" / "quantization_vs_onnxruntime.py"


def law_of_cosines(a: np.ndarray, b: np.ndarray) -> float:
    """cos(angle) from the three side lengths of the triangle (0, a, b): an independent formula."""
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    la, lb, lc = (math.sqrt(float(np.sum(v * v))) for v in (a, b, a - b))
    return (la * la + lb * lb - lc * lc) / (2 * la * lb)


# --- cosine similarity


def test_cosine_matches_the_law_of_cosines():
    rng = np.random.default_rng(0)
    for shape in [(7,), (3, 10), (2, 4, 1, 1)]:
        a = rng.standard_normal(shape).astype(np.float32)
        b = (a + 0.3 * rng.standard_normal(shape)).astype(np.float32)
        assert cosine_similarity(a, b) == pytest.approx(law_of_cosines(a, b), abs=1e-12)


def test_cosine_of_known_angles():
    a = np.array([1.0, 2.0, -3.0], dtype=np.float32)
    assert cosine_similarity(a, a) == pytest.approx(1.0)
    assert cosine_similarity(a, 5 * a) == pytest.approx(1.0)
    assert cosine_similarity(a, -a) == pytest.approx(-1.0)
    assert cosine_similarity(np.array([1.0, 0.0]), np.array([0.0, 2.0])) == 0.0
    assert cosine_similarity(np.array([1.0, 0.0]), np.array([1.0, 1.0])) == pytest.approx(math.cos(math.pi / 4))


def test_cosine_of_zero_vectors():
    zeros = np.zeros((2, 5), dtype=np.float32)
    assert cosine_similarity(zeros, zeros) == 1.0  # identical outputs
    assert cosine_similarity(zeros, np.ones((2, 5))) == 0.0
    assert cosine_similarity(np.ones((2, 5)), zeros) == 0.0


def test_cosine_of_non_finite_values_is_nan():
    a = np.ones(4, dtype=np.float32)
    for bad in (np.nan, np.inf, -np.inf):
        b = a.copy()
        b[2] = bad
        assert math.isnan(cosine_similarity(a, b))


# --- one output


def logits_with_known_agreement(rows: int, classes: int, disagree: list[int]):
    """Float logits with a clear winner per row, and a copy whose winner moves in rows `disagree`."""
    rng = np.random.default_rng(1)
    ref = rng.uniform(0, 1, (rows, classes)).astype(np.float32)
    winners = rng.integers(0, classes, rows)
    ref[np.arange(rows), winners] = 5.0
    quant = ref.copy()
    for r in disagree:
        quant[r, (winners[r] + 1) % classes] = 6.0
    return ref, quant, winners


def test_top1_agreement_and_errors_of_a_classifier():
    ref, quant, _ = logits_with_known_agreement(10, 5, disagree=[0, 3, 7])
    quant[5, 0] += 0.25  # an error that keeps row 5's winner
    result = output_accuracy("logits", ref, quant)
    assert result.rows == 10
    assert result.top1_agree == 7 and result.top1_agreement == pytest.approx(0.7)
    diff = [abs(float(x) - float(y)) for x, y in zip(ref.ravel(), quant.ravel())]
    assert result.max_abs_error == pytest.approx(max(diff))
    assert result.mean_abs_error == pytest.approx(sum(diff) / len(diff))
    assert result.cosine == pytest.approx(law_of_cosines(ref, quant))
    assert result.nonfinite == 0
    assert result.float_top1_correct is None  # no labels


def test_top1_accuracy_against_labels():
    ref, quant, winners = logits_with_known_agreement(8, 4, disagree=[1, 2])
    labels = winners.copy()
    labels[6] = (labels[6] + 1) % 4  # the float run gets row 6 wrong; the quantized one rows 1, 2 and 6
    result = output_accuracy("logits", ref, quant, labels)
    assert result.float_top1_correct == 7 and result.float_top1_accuracy == pytest.approx(7 / 8)
    assert result.quantized_top1_correct == 5 and result.quantized_top1_accuracy == pytest.approx(5 / 8)
    with pytest.raises(ValueError, match="7 labels for 8 rows"):
        output_accuracy("logits", ref, quant, labels[:7])


def test_which_outputs_are_classifiers():
    assert is_classifier((4, 1000)) and is_classifier((4, 1000, 1, 1))
    assert not is_classifier((4, 1))  # one score per row: a regression
    assert not is_classifier((4, 10, 2, 2))  # a feature map
    assert not is_classifier((4,)) and not is_classifier(())
    ref = np.random.default_rng(2).standard_normal((3, 6, 1, 1)).astype(np.float32)
    assert output_accuracy("prob", ref, ref).top1_agree == 3
    feature_map = np.ones((3, 6, 2, 2), dtype=np.float32)
    result = output_accuracy("features", feature_map, feature_map, labels=np.zeros(3))
    assert result.top1_agree is None and result.top1_agreement is None and result.float_top1_correct is None
    assert result.cosine == 1.0 and result.max_abs_error == 0.0


def test_nan_in_the_quantized_output_is_reported():
    ref, quant, winners = logits_with_known_agreement(4, 3, disagree=[])
    quant[2, 1] = np.nan
    quant[3, 0] = np.inf
    result = output_accuracy("logits", ref, quant, winners)
    assert result.nonfinite == 2
    assert math.isnan(result.cosine) and math.isnan(result.max_abs_error)
    assert result.top1_agree == 2  # rows 2 and 3 hold a non-finite value: they never agree
    assert result.quantized_top1_correct == 2 and result.float_top1_correct == 4
    encoded = json.loads(json.dumps(result.to_json(), allow_nan=False))  # strict JSON: no NaN literals
    assert encoded["cosine"] is None and encoded["max_abs_error"] is None and encoded["nonfinite"] == 2
    assert result.summary_cells()[0] == "nan"


def test_empty_output():
    empty = np.zeros((2, 0), dtype=np.float32)
    result = output_accuracy("empty", empty, empty)
    assert (result.cosine, result.max_abs_error, result.mean_abs_error) == (1.0, 0.0, 0.0)


def test_shape_mismatch_is_an_error():
    with pytest.raises(ValueError, match=r"quantized shape \[2, 3\] differs from float shape \[2, 4\]"):
        output_accuracy("y", np.zeros((2, 4)), np.zeros((2, 3)))


# --- a report over samples


def test_report_concatenates_samples_along_the_batch_axis():
    ref, quant, winners = logits_with_known_agreement(6, 4, disagree=[4])
    features = np.random.default_rng(3).standard_normal((6, 3)).astype(np.float32)[:, :1]  # not a classifier
    reference = [{"prob": ref[i:i + 2], "score": features[i:i + 2]} for i in range(0, 6, 2)]
    quantized = [{"score": features[i:i + 2] * 2, "prob": quant[i:i + 2]} for i in range(0, 6, 2)]
    report = compare_outputs(reference, quantized, labels=winners)
    assert report.samples == 3 and report.labelled
    prob, score = report.outputs
    assert (prob.name, prob.shape, score.name, score.shape) == ("prob", (6, 4), "score", (6, 1))
    assert prob.cosine == pytest.approx(law_of_cosines(ref, quant))
    assert prob.top1_agree == 5 and prob.quantized_top1_correct == 5 and prob.float_top1_correct == 6
    assert score.cosine == pytest.approx(1.0) and score.top1_agree is None
    assert score.max_abs_error == pytest.approx(float(np.max(np.abs(features))))

    document = json.loads(json.dumps(report.to_json(), allow_nan=False))
    assert document["samples"] == 3 and [o["name"] for o in document["outputs"]] == ["prob", "score"]
    assert document["outputs"][0]["top1_agreement"] == pytest.approx(5 / 6)
    table = report.table()
    assert "quantized top-1 acc" in table and "83.3% (5/6)" in table and "100.0% (6/6)" in table
    assert "\nscore " in table and "3 samples" in table


def test_report_without_labels_has_no_accuracy_columns():
    ref, quant, _ = logits_with_known_agreement(2, 3, disagree=[])
    report = compare_outputs([{"p": ref}], [{"p": quant}])
    assert not report.labelled and "top-1 acc" not in report.table()
    assert report.outputs[0].quantized_top1_accuracy is None


def test_report_errors():
    sample = {"y": np.zeros((1, 3))}
    with pytest.raises(ValueError, match="missing from quantized sample 1"):
        compare_outputs([sample, sample], [sample, {"z": np.zeros((1, 3))}])
    with pytest.raises(ValueError, match="1 quantized samples for 2 float samples"):
        compare_outputs([sample, sample], [sample])
    with pytest.raises(ValueError, match="no samples"):
        compare_outputs([], [])


# --- the benchmark's onnxruntime half


@pytest.fixture(scope="module")
def bench():
    pytest.importorskip("onnxruntime")
    spec = importlib.util.spec_from_file_location("quantization_vs_onnxruntime", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def tiny_model() -> onnx.ModelProto:
    """Conv 3x3 (3->4) + Relu + Flatten + Gemm (256->10), as old as the bundled models:
    opset 9, IR version 3 with every initializer also a graph input."""
    rng = np.random.default_rng(4)
    weights = {
        "w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32) * 0.3,
        "b": rng.standard_normal(4).astype(np.float32) * 0.1,
        "fc_w": rng.standard_normal((10, 256)).astype(np.float32) * 0.1,
        "fc_b": rng.standard_normal(10).astype(np.float32) * 0.1,
    }
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], transB=1),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
    inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in weights.items()]
    graph = helper.make_graph(nodes, "tiny", inputs,
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
                              initializer=[numpy_helper.from_array(a, n) for n, a in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 3
    onnx.checker.check_model(model)
    return model


def test_bench_samples_are_the_profilers_random_calibration(bench):
    model = tiny_model()
    samples = bench.make_samples(bench.model_inputs(model), 3, bench.CALIBRATION_SEED)
    assert [list(s) for s in samples] == [["x"]] * 3
    expected = list(calibration_random(glowsdk.load(model), 3, seed=bench.CALIBRATION_SEED))
    for got, want in zip(samples, expected):
        np.testing.assert_array_equal(got["x"], want["x"])
    others = bench.make_samples(bench.model_inputs(model), 3, bench.EVALUATION_SEED)
    assert not np.array_equal(others[0]["x"], samples[0]["x"])


def test_bench_onnxruntime_side_on_a_tiny_model(bench, tmp_path):
    import onnxruntime as ort

    model = tiny_model()
    inputs = bench.model_inputs(model)
    calibration = bench.make_samples(inputs, 8, bench.CALIBRATION_SEED)
    evaluation = bench.make_samples(inputs, 8, bench.EVALUATION_SEED)
    progress = bench.Progress("tiny")
    result = bench.ModelResult("tiny")
    reference = bench.onnxruntime_side(model, calibration, evaluation, tmp_path, progress, result)

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for sample, outputs in zip(evaluation, reference):
        np.testing.assert_array_equal(outputs["logits"], session.run(["logits"], sample)[0])
    largest = max(float(np.max(np.abs(outputs["logits"]))) for outputs in reference)
    assert [row.method for row in result.rows] == list(bench.ORT_METHODS)
    for row in result.rows:
        (logits,) = row.report.outputs
        assert logits.shape == (8, 10) and logits.nonfinite == 0
        assert 0.99 < logits.cosine <= 1.0
        assert 0 < logits.max_abs_error < 0.25 * largest
        assert logits.top1_agree >= 6
    assert "onnx version_converter to opset 13" in progress.seconds

    bench.glowsdk_side(model, calibration, evaluation, reference, progress, result)
    glowsdk_rows = result.rows[2:]
    assert [row.method for row in glowsdk_rows] == list(bench.GLOWSDK_METHODS)
    for row in glowsdk_rows:
        assert not row.unavailable and row.report.outputs[0].cosine > 0.99, row.method
    document = json.loads(json.dumps(result.to_json(), allow_nan=False))
    assert [r["method"] for r in document["rows"]] == [r.method for r in result.rows]


def test_bench_rejects_unknown_models(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--models", "resnet50,nosuchnet"])
    assert "not bundled: nosuchnet" in capsys.readouterr().err
