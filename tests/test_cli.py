"""The glowsdk command as a user runs it; numbers checked against onnxruntime."""
import json
import subprocess
import sys

import numpy as np
import pytest

from glowsdk import zoo
from glowsdk.files import safe_file_name


def cli(*args):
    proc = subprocess.run([sys.executable, "-m", "glowsdk", *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_models_and_backends():
    assert cli("models").split() == list(zoo.BUNDLED)
    assert "interpreter" in cli("backends")


def test_safe_file_names():
    assert safe_file_name("gpu_0/softmax_1") == "gpu_0_softmax_1"
    assert safe_file_name('a:b*c?"<>|') == "a_b_c_____"
    assert safe_file_name("..") == "_"


def test_run_writes_outputs_that_match_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    model = zoo.randomize_weights(zoo.load_bundled("squeezenet"), 0)
    x = np.random.default_rng(7).standard_normal((1, 3, 224, 224)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = cli("run", "squeezenet", "--random-weights", "0", "--input", f"data_0={tmp_path / 'x.npy'}",
              "--output", str(tmp_path / "out"))
    assert "softmaxout_1" in out
    got = np.load(tmp_path / "out" / "softmaxout_1.npy")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {"data_0": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-6)
    assert got.argmax() == want.argmax()


def test_output_names_with_slashes_are_sanitised(tmp_path):
    cli("run", "resnet50", "--output", str(tmp_path))
    assert (tmp_path / "gpu_0_softmax_1.npy").is_file()


def test_dump_text_and_dot(tmp_path):
    text = cli("dump", "squeezenet")
    assert "= Conv(" in text and "placeholder input : float32<1x3x224x224>" in text
    cli("dump", "squeezenet", "--format", "dot", "-o", str(tmp_path / "g.dot"))
    dot = (tmp_path / "g.dot").read_text()
    assert dot.startswith('digraph "main"') and "Conv" in dot


def test_conformance_prints_a_table_and_writes_json(tmp_path):
    out = cli("conformance", "--target", "interpreter", "--suite", "nodes", "--ops", "Relu,Softsign",
              "--json", str(tmp_path / "r.json"))
    assert "Relu" in out and "node tests:" in out
    report = json.loads((tmp_path / "r.json").read_text())
    totals = report["node_tests"]["totals"]
    assert totals["total"] == 3 and totals["pass"] == totals["total"]
    assert report["node_tests"]["per_op"]["Relu"]["pass"] >= 1


def test_compile_reports_stages_schedule_and_dumps(tmp_path):
    out = cli("compile", "resnet50", "--random-weights", "0", "--dump-graph", "dot", "--dump-dir",
              str(tmp_path), "--dump-after", "fold-batchnorm")
    header = next(line for line in out.splitlines() if line.startswith("node kind"))
    assert header.split() == ["node", "kind", "imported", "optimized", "lowered"]
    batchnorm = next(line for line in out.splitlines() if line.startswith("BatchNorm"))
    assert batchnorm.split() == ["BatchNorm", "53"]  # folded into the convolutions, never lowered
    assert "peak live activations:" in out
    for name in ("imported.dot", "optimized.dot", "lowered.dot", "after_fold-batchnorm.dot"):
        assert (tmp_path / name).read_text().startswith("digraph")
    pipeline = cli("compile", "--print-pipeline")
    assert "pipeline graph-optimization:" in pipeline and "fold-batchnorm" in pipeline


def test_compile_dumps_ir_and_reports_memory(tmp_path):
    import re

    from glowsdk.compiler.ir import parse_ir, verify_ir
    from glowsdk.compiler.ir.allocator import allocate

    out = cli("compile", "squeezenet", "--random-weights", "0", "--dump-ir", "--dump-ir-after",
              "shrink-lifetimes", "--dump-dir", str(tmp_path))
    line = next(line for line in out.splitlines() if line.startswith("activations:"))
    naive, allocated, bound = (float(v) for v in re.findall(r"([\d.]+) MiB", line))
    assert bound <= allocated <= 1.1 * bound and allocated < naive / 2
    final = parse_ir((tmp_path / "ir.txt").read_text())
    verify_ir(final)
    assert allocate(final).report.line() == line  # the line describes the IR that was dumped
    shrunk = parse_ir((tmp_path / "ir_after_shrink-lifetimes.txt").read_text())
    kinds = [i.kind for i in shrunk.instructions]
    first_dealloc = kinds.index("DeallocActivation")  # IRGen puts them all at the end; the pass moves them up
    assert any(kind != "DeallocActivation" for kind in kinds[first_dealloc:])
    printed = cli("compile", "squeezenet", "--dump-ir")
    assert "== ir ==\nfunction main\ndeclare {" in printed
    assert "pipeline ir-optimization:" in cli("compile", "--print-pipeline")
    proc = subprocess.run([sys.executable, "-m", "glowsdk", "compile", "squeezenet", "--dump-ir-after", "nope"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "--dump-ir-after: unknown pass(es) nope" in proc.stderr
