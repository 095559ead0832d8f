"""The registry of IR passes: each pass module registers itself here by its short name."""
from __future__ import annotations

from ...passes.manager import PassRegistry

IR_PASSES = PassRegistry()
"""IR passes by name, for `PassManager(registry=IR_PASSES)` and the IR pipelines."""
