"""What the HTML reports share about plots: matplotlib (the `report` extra) is optional, and a figure goes
into a page as inline SVG, so the page stays one self-contained file."""
from __future__ import annotations

import importlib.util
import io


def plotting_available() -> bool:
    """Whether matplotlib is installed (checked without importing it: the import takes seconds)."""
    return importlib.util.find_spec("matplotlib") is not None


def figure_svg(figure) -> str:
    """A matplotlib figure as an inline <svg> element, its words kept as text (searchable, and small)."""
    import matplotlib

    out = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        figure.savefig(out, format="svg", bbox_inches="tight")
    text = out.getvalue()
    return text[text.index("<svg"):]
