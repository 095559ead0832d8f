"""Bad input gets one clear line naming the problem, exit code 2, never a traceback."""
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from glowsdk.errors import GlowError, UnsupportedOpsError
from glowsdk.frontend.onnx.importer import import_model
from glowsdk.frontend.onnx.loader import load_onnx_file


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "glowsdk", *args], capture_output=True, text=True, timeout=300)


def assert_one_line_error(proc, pattern):
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert pattern in lines[0], lines[0]


def model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def save(tmp_path, proto, name="m.onnx"):
    path = tmp_path / name
    path.write_bytes(proto.SerializeToString())
    return str(path)


def test_missing_file(tmp_path):
    assert_one_line_error(run_cli("run", str(tmp_path / "nope.onnx")), "no such file")


def test_empty_and_truncated_and_non_onnx_files(tmp_path):
    (tmp_path / "empty.onnx").write_bytes(b"")
    assert_one_line_error(run_cli("run", str(tmp_path / "empty.onnx")), "empty")
    good = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3])])
    data = good.SerializeToString()
    (tmp_path / "cut.onnx").write_bytes(data[: len(data) // 2])
    assert_one_line_error(run_cli("run", str(tmp_path / "cut.onnx")), "not a valid ONNX model")
    (tmp_path / "text.onnx").write_text("this is not a model at all\n")
    proc = run_cli("run", str(tmp_path / "text.onnx"))
    assert_one_line_error(proc, "text.onnx")


def test_unsupported_ops_are_listed_together(tmp_path):
    m = model([helper.make_node("FooBar", ["x"], ["t"]), helper.make_node("Relu", ["t"], ["u"]),
               helper.make_node("Bizarre", ["u"], ["y"])], [vi("x", [2])], [vi("y", [2])])
    with pytest.raises(UnsupportedOpsError) as info:
        import_model(m)
    assert info.value.ops == ["Bizarre", "FooBar"]
    assert_one_line_error(run_cli("run", save(tmp_path, m)), "unsupported op(s): Bizarre, FooBar")


def test_ill_typed_graph_names_the_node(tmp_path):
    m = model([helper.make_node("Add", ["x", "i"], ["y"], name="the_add")],
              [vi("x", [2, 3]), vi("i", [2, 3], TensorProto.INT64)], [vi("y", [2, 3])])
    assert_one_line_error(run_cli("run", save(tmp_path, m)), "node 'the_add' (Add)")


def test_cycle_is_reported(tmp_path):
    m = model([helper.make_node("Relu", ["x", ], ["a"]), helper.make_node("Add", ["a", "c"], ["b"], name="n1"),
               helper.make_node("Relu", ["b"], ["c"], name="n2")], [vi("x", [2])], [vi("c", [2])])
    assert_one_line_error(run_cli("run", save(tmp_path, m)), "cycle")


def test_undefined_value_is_reported(tmp_path):
    m = model([helper.make_node("Add", ["x", "ghost"], ["y"], name="n")], [vi("x", [2])], [vi("y", [2])])
    assert_one_line_error(run_cli("run", save(tmp_path, m)), "'ghost'")


def test_input_shape_that_does_not_fit(tmp_path):
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", ["N", 3])], [vi("y", ["N", 3])])
    path = save(tmp_path, m)
    assert_one_line_error(run_cli("run", path), "symbolic shape")
    assert_one_line_error(run_cli("run", path, "--input-shape", "x=2x4"), "does not fit")
    assert_one_line_error(run_cli("run", path, "--input-shape", "x=2x3x1"), "rank")
    assert_one_line_error(run_cli("run", path, "--input-shape", "x=two"), "expected NAME=DxDx")
    ok = run_cli("run", path, "--input-shape", "x=5x3")
    assert ok.returncode == 0, ok.stderr
    assert "float32[5, 3]" in ok.stdout


def test_input_file_that_does_not_fit(tmp_path):
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3])])
    np.save(tmp_path / "x.npy", np.zeros((3, 3), np.float32))
    proc = run_cli("run", save(tmp_path, m), "--input", f"x={tmp_path / 'x.npy'}")
    assert_one_line_error(proc, "expected shape [2, 3]")
    proc = run_cli("run", save(tmp_path, m), "--input", f"zz={tmp_path / 'x.npy'}")
    assert_one_line_error(proc, "no such input")


def test_external_data_outside_the_model_folder(tmp_path):
    weight = numpy_helper.from_array(np.ones(4, np.float32), "w")
    weight.ClearField("raw_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in [("location", "../secret.bin"), ("offset", "0"), ("length", "16")]:
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    (tmp_path / "secret.bin").write_bytes(np.ones(4, np.float32).tobytes())
    folder = tmp_path / "model"
    folder.mkdir()
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", [4])], [vi("y", [4])], [weight])
    path = save(folder, m)
    with pytest.raises(GlowError, match="outside the model's folder"):
        load_onnx_file(path)
    assert_one_line_error(run_cli("run", path), "outside the model's folder")


def test_unknown_target_and_model_name():
    assert_one_line_error(run_cli("run", "no_such_model"), "neither a file nor a bundled model")
    assert_one_line_error(run_cli("run", "squeezenet", "--target", "warp-drive"), "unknown target 'warp-drive'")


def test_unusable_destinations_are_refused_before_any_work(tmp_path):
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3])])
    path = save(tmp_path, m)
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    assert_one_line_error(run_cli("run", path, "--output", str(a_file)), "is a file, not a folder")
    assert_one_line_error(run_cli("dump", path, "-o", str(tmp_path)), "is a folder, not a file")
    assert_one_line_error(run_cli("compile", path, "--dump-graph", "text", "--dump-dir", str(a_file)),
                          "is a file, not a folder")
    assert_one_line_error(run_cli("conformance", "--suite", "nodes", "--ops", "Relu", "--json",
                                  str(tmp_path / "missing" / "r.json")), "no such folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "m.onnx"]


def test_bad_numbers_and_names_in_options(tmp_path):
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2, 3])], [vi("y", [2, 3])])
    path = save(tmp_path, m)
    assert_one_line_error(run_cli("run", path, "--seed", "-1"), "is not a seed")
    assert_one_line_error(run_cli("run", path, "--random-weights", "x"), "is not a seed")
    assert_one_line_error(run_cli("run", path, "--batch", "0"), "is not a whole number >= 1")
    assert_one_line_error(run_cli("run", path, "--batch", "4"), "not a batch of 1 or a symbolic batch")
    assert_one_line_error(run_cli("conformance", "--suite", "nodes", "--ops", "NoSuchOp"),
                          "NoSuchOp is not an in-scope op")


def test_unknown_backend_option_is_refused():
    import glowsdk
    from glowsdk.errors import UnsupportedError

    network = glowsdk.load(model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])]))
    with pytest.raises(UnsupportedError, match="takes no option"):
        glowsdk.compile(network, "interpreter", bogus=3)


def test_bfloat16_outputs_are_written_as_float32(tmp_path):
    m = model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16)], [vi("x", [3])],
              [vi("y", [3], TensorProto.BFLOAT16)])
    x = np.array([1.5, -2.0, 0.25], np.float32)  # exact in bfloat16
    np.save(tmp_path / "x.npy", x)
    proc = run_cli("run", save(tmp_path, m), "--input", f"x={tmp_path / 'x.npy'}", "--output", str(tmp_path / "o"))
    assert proc.returncode == 0, proc.stderr
    got = np.load(tmp_path / "o" / "y.npy")
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, x)
