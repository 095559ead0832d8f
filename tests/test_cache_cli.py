"""`glowsdk cache list|size|clear` over a real compile cache entry, in the XDG cache folder."""
from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from glowsdk.cli.main import main


def test_cache_follows_xdg_and_lists_sizes_and_clears(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("GLOWSDK_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), tmp_path / "relu.onnx")
    assert main(["run", str(tmp_path / "relu.onnx"), "--target", "cpu"]) == 0
    folder = tmp_path / "xdg" / "glowsdk" / "cpu"
    [entry] = list(folder.glob("*.glowcpu"))
    capsys.readouterr()

    assert main(["cache", "list"]) == 0
    text = capsys.readouterr().out
    assert entry.name[:16] in text and "input x: float32<2x3>; output y: float32<2x3>" in text
    assert f"{folder}: 1 entry" in text

    assert main(["cache", "size"]) == 0
    assert capsys.readouterr().out.startswith(f"{folder}: 1 entry, ")

    (folder / "stray.glowcpu").write_bytes(b"not an image")  # listed, and cleared, too
    assert main(["cache", "list"]) == 0
    assert "(not a readable entry)" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert capsys.readouterr().out.startswith("removed 2 entries (")
    assert not list(folder.iterdir()) and folder.is_dir()


def test_relative_xdg_cache_home_is_ignored(tmp_path, monkeypatch):
    from glowsdk.backends.cpu.cache import cache_root

    monkeypatch.delenv("GLOWSDK_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_root() == tmp_path / ".cache" / "glowsdk"
    monkeypatch.setenv("GLOWSDK_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"
