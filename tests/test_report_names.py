"""Reports name a compiled model's layers after its ONNX nodes: simulate (text, json, csv) and disasm."""
from __future__ import annotations

import csv
import io
import json

from isa.container import read_npub, write_npub
from isa.origins import origins_from_metadata

from glowsdk.cli.main import main
from npu_nets import NetBuilder


def _binary(tmp_path):
    builder = NetBuilder((1, 8, 12, 12))
    out = builder.conv(builder.conv("x", 8, 16, relu=False), 16, 8, relu=False)
    model = builder.model(out)
    for node in model.graph.node:
        node.name = f"block.{node.output[0]}"
    (tmp_path / "net.onnx").write_bytes(model.SerializeToString())
    path = tmp_path / "net.npub"
    assert main(["compile", str(tmp_path / "net.onnx"), "--target", "npu", "--fallback", "none", "-o", str(path)]) == 0
    return path, {node.name: node.op_type for node in model.graph.node}


def test_simulate_and_disasm_name_the_onnx_nodes(tmp_path, capsys):
    path, nodes = _binary(tmp_path)
    capsys.readouterr()
    assert main(["simulate", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:4] == ["ONNX", "node", "op", "layer"])
    rows = [line.split() for line in lines[start + 2:]]
    rows = rows[:next(i for i, row in enumerate(rows) if row[0] == "(total)")]  # the roofline table's layers
    named = {row[0]: row[1] for row in rows if row[0] in nodes}
    assert named == nodes  # each ONNX node first, with its op type
    assert main(["simulate", str(path), "--report", "json"]) == 0
    layers = json.loads(capsys.readouterr().out)["layers"]
    assert {layer["onnx_node"]: layer["onnx_op"] for layer in layers if layer["onnx_node"]} == nodes
    assert main(["simulate", str(path), "--report", "csv"]) == 0
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {r["onnx_node"]: r["onnx_op"] for r in table if r["onnx_node"]} == nodes
    assert main(["disasm", str(path)]) == 0
    text = capsys.readouterr().out
    assert all(f"from ONNX {op} '{name}'" in text for name, op in nodes.items())


def test_a_malformed_origin_is_left_out_not_refused(tmp_path, capsys):
    path, nodes = _binary(tmp_path)
    binary = read_npub(str(path))
    good = origins_from_metadata(binary.metadata)
    assert {name for name, _ in good.values()} == set(nodes)
    layer = next(iter(good))
    binary.metadata["origins"][layer] = ["only a name"]
    write_npub(str(path), binary)
    assert layer not in origins_from_metadata(read_npub(str(path)).metadata)
    capsys.readouterr()
    assert main(["simulate", str(path), "--report", "json"]) == 0
    layers = {r["name"]: r for r in json.loads(capsys.readouterr().out)["layers"]}
    assert layers[layer]["onnx_node"] is None
    binary.metadata["origins"] = "not an object"
    write_npub(str(path), binary)
    assert origins_from_metadata(read_npub(str(path)).metadata) == {}
