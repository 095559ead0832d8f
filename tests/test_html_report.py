"""`glowsdk simulate|compile --report html`: a self-contained page with the roofline plot, named after
the model's ONNX nodes, parsed here (no headless browser on the test machines)."""
from __future__ import annotations

import importlib.util
from html.parser import HTMLParser

import pytest

from glowsdk.cli.main import main
from npu_nets import NetBuilder


class _Page(HTMLParser):
    """The page's figures (by id, with whether each holds an <svg>), table cells, links and outside references."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: dict[str, bool] = {}
        self.cells: list[str] = []
        self.links: list[str] = []
        self.external: list[str] = []
        self._figure: str | None = None
        self._cell = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "figure":
            self._figure = attrs.get("id", "")
            self.figures[self._figure] = False
        elif tag == "svg" and self._figure is not None:
            self.figures[self._figure] = True
        elif tag == "td":
            self._cell = True
            self.cells.append("")
        elif tag == "a":
            self.links.append(attrs["href"])
        elif tag in ("script", "img", "link") and (attrs.get("src") or attrs.get("href")):
            self.external.append(attrs.get("src") or attrs.get("href"))

    def handle_endtag(self, tag):
        if tag == "figure":
            self._figure = None
        elif tag == "td":
            self._cell = False

    def handle_data(self, data):
        if self._cell:
            self.cells[-1] += data


def _model(tmp_path):
    builder = NetBuilder((1, 8, 16, 16))
    x = builder.conv("x", 8, 16, relu=False)
    out = builder.conv(x, 16, 16, relu=False)
    model = builder.model(out)
    for node in model.graph.node:
        node.name = f"user/{node.op_type.lower()}_{node.output[0]}"
    path = tmp_path / "net.onnx"
    path.write_bytes(model.SerializeToString())
    return path, [node.name for node in model.graph.node]


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="the report extra is not installed")
def test_simulate_and_compile_write_a_page_with_the_plot_and_the_onnx_names(tmp_path, capsys):
    model, names = _model(tmp_path)
    binary = tmp_path / "net.npub"
    assert main(["compile", str(model), "--target", "npu", "--fallback", "none", "-o", str(binary),
                 "--report", "html"]) == 0
    assert f"wrote {tmp_path / 'net.html'}" in capsys.readouterr().out
    compiled = _Page()
    compiled.feed((tmp_path / "net.html").read_text())
    assert compiled.figures == {"roofline": True, "units": True}
    assert set(names) <= set(compiled.cells)

    page, trace = tmp_path / "r.html", tmp_path / "sub" / "t.json"
    trace.parent.mkdir()
    assert main(["simulate", str(binary), "--report", "html", "-o", str(page), "--trace", str(trace)]) == 0
    assert f"wrote {page}" in capsys.readouterr().out
    parsed = _Page()
    parsed.feed(page.read_text())
    assert parsed.figures == {"roofline": True, "units": True}
    assert set(names) <= set(parsed.cells)  # the layer table names the ONNX nodes
    assert "sub/t.json" in parsed.links and not parsed.external  # the trace linked; nothing else fetched
    assert "stall causes by layer" in page.read_text()  # the architect's view, root causes included
    plot = page.read_text().split('id="roofline"')[1].split("</figure>")[0]
    assert all(f">{name}</text>" in plot for name in names)  # each convolution a point, labelled


def test_html_needs_a_file_and_the_plotting_extra(tmp_path, capsys, monkeypatch):
    model, _ = _model(tmp_path)
    assert main(["compile", str(model), "--target", "npu", "--fallback", "none", "--report", "html"]) == 2
    assert "--report html writes a page" in capsys.readouterr().err
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else object())
    assert main(["simulate", str(tmp_path / "missing.npub"), "--report", "html", "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "pip install 'glowsdk[report]'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.html").exists()
