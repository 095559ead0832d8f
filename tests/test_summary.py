"""`glowsdk summary`, `--version`, `run --top-k`: counts checked against ones made from the ONNX file alone."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper, shape_inference

import glowsdk
from glowsdk.cli.main import main
from glowsdk.summary import summarize
from glowsdk.zoo import bundled_path


def _onnx_counts(model: onnx.ModelProto) -> tuple[int, int]:
    """Float weight elements (the initializers nodes use, Constant and ConstantOfShape outputs) and Conv/Gemm/MatMul
    multiply-adds, from the ONNX file and onnx's own shape inference: no glowsdk code involved."""
    inferred = shape_inference.infer_shapes(model)
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]}
    shapes.update({name: list(value.shape) for name, value in init.items()})
    used = {name for node in model.graph.node for name in node.input}
    params = sum(v.size for name, v in init.items() if v.dtype.kind == "f" and name in used)
    for node in model.graph.node:
        if node.op_type == "ConstantOfShape":
            value = next((numpy_helper.to_array(a.t) for a in node.attribute if a.name == "value"), np.zeros(1))
            shape = init[node.input[0]].astype(int).tolist()
            shapes[node.output[0]] = shape
            params += int(np.prod(shape)) if value.dtype.kind == "f" else 0
        elif node.op_type == "Constant":
            value = numpy_helper.to_array(node.attribute[0].t)
            params += value.size if value.dtype.kind == "f" else 0
    macs = 0
    for node in model.graph.node:
        out = int(np.prod(shapes[node.output[0]]))
        if node.op_type == "Conv":
            macs += out * int(np.prod(shapes[node.input[1]][1:]))
        elif node.op_type == "Gemm":
            trans_a = next((a.i for a in node.attribute if a.name == "transA"), 0)
            a = shapes[node.input[0]]
            macs += out * (a[0] if trans_a else a[-1])
        elif node.op_type == "MatMul":
            macs += out * shapes[node.input[0]][-1]
    return params, macs


def test_resnet50_counts_match_an_independent_count():
    model = onnx.load(str(bundled_path("resnet50")))
    params, macs = _onnx_counts(model)
    summary = summarize(glowsdk.load("resnet50"), {})
    assert summary.parameters == params
    assert summary.macs == macs
    assert 25.5e6 <= params <= 25.7e6 and 4.0e9 <= macs <= 4.2e9  # the published ResNet-50 figures
    convs = [layer for layer in summary.layers if layer.op_type == "Conv"]
    assert len(convs) == 53 and all(layer.macs > 0 for layer in convs)
    assert summary.histogram["Conv"] == 53 and summary.histogram["Gemm"] == 1


def test_cli_summary_names_the_onnx_nodes_and_the_targets(tmp_path, capsys):
    from npu_nets import NetBuilder

    builder = NetBuilder((1, 3, 8, 8))
    out = builder.conv("x", 3, 4)
    model = builder.model(out)
    for k, node in enumerate(model.graph.node):
        node.name = f"user_{node.op_type.lower()}_{k}"
    path = tmp_path / "net.onnx"
    path.write_bytes(model.SerializeToString())
    assert main(["summary", str(path), "--targets", "interpreter,npu", "--json", str(tmp_path / "s.json")]) == 0
    text = capsys.readouterr().out
    params, macs = _onnx_counts(model)
    assert f"parameters  {params:,}" in text and f"MACs        {macs:,}" in text
    assert "user_conv_0" in text and "user_relu_1" in text
    assert "interpreter: runs 2 of 2 nodes" in text
    # the npu's count agrees with its compiler: the whole model compiles without a fallback iff it runs all
    whole = "npu: runs 2 of 2 nodes (on the int8 graph)" in text
    assert whole or "npu: runs 1 of 2 nodes (on the int8 graph)" in text
    assert (main(["compile", str(path), "--target", "npu", "--fallback", "none"]) == 0) == whole
    assert f"wrote {tmp_path / 's.json'}" in text


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"glowsdk {glowsdk.__version__}"


def test_run_top_k_prints_the_best_classes(tmp_path, capsys):
    from onnx import TensorProto, helper

    scores = np.array([[0.1, 0.7, 0.05, 0.15]], np.float32)
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "id.onnx")
    np.save(tmp_path / "x.npy", scores)
    assert main(["run", str(tmp_path / "id.onnx"), "--input", f"x={tmp_path / 'x.npy'}", "--top-k", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index("output y: the top 2 of 4 classes")
    assert [line.split() for line in lines[start + 3:start + 5]] == [["0", "1", "1", "0.7"], ["0", "2", "3", "0.15"]]
