"""The in-scope ONNX backend node tests on the interpreter: the pass rate, and every case
that does not pass is one of the stated limitations below (a new failure fails this test)."""
import pytest

from glowsdk.backends import get_backend
from glowsdk.conformance.node_tests import run_node_tests
from glowsdk.conformance.report import totals

LIMITATIONS = {
    "training_mode": "only inference is supported (training Dropout is random, training "
                     "BatchNormalization uses batch statistics)",
    "not a tensor": "sequence and optional values are outside glowsdk's tensor-only type system",
    "element type STRING": "strings are outside the type system",
    "opset 1 is outside": "opsets before 7 are outside the supported range",
}
HALF_PRECISION_ATTENTION = {
    # The expected data rounds to bfloat16/float16 after every op of the expanded graph; glowsdk
    # computes each op in float32 and rounds once. The results differ by one half-precision ulp
    # and glowsdk is the closer of the two to a float64 evaluation.
    "test_attention_3d_causal_bf16_expanded", "test_attention_4d_attn_mask_causal_bf16_expanded",
    "test_attention_4d_causal_bf16_expanded", "test_attention_4d_causal_fp16_expanded",
    "test_attention_4d_causal_padded_kv_bf16_expanded", "test_attention_4d_padded_kv_bf16_expanded",
}


@pytest.fixture(scope="module")
def results():
    return run_node_tests(get_backend("interpreter"))


def test_no_case_crashes(results):
    errors = [f"{r.name}: {r.detail}" for r in results if r.status == "error"]
    assert not errors, "\n".join(errors)


def test_every_non_passing_case_is_a_stated_limitation(results):
    unexplained = [f"{r.status} {r.name}: {r.detail}" for r in results
                   if r.status != "pass" and r.name not in HALF_PRECISION_ATTENTION
                   and not any(reason in r.detail for reason in LIMITATIONS)]
    assert not unexplained, "\n".join(unexplained)


def test_pass_rate(results):
    t = totals(results)
    assert t["total"] > 1200
    assert t["pass"] / t["total"] >= 0.95, t
