"""The pass pipelines, as data: print them with `glowsdk compile --print-pipeline`.

GRAPH_OPTIMIZATION runs on the high-level graph before lowering (paper 3.6 step 3);
POST_LOWERING runs on the lowered graph (step 5), where lowering exposes new
opportunities (constants to fold, reshapes to merge, common sub-expressions).
"""
from __future__ import annotations

from .manager import Entry, Pipeline

GRAPH_OPTIMIZATION = Pipeline("graph-optimization", [
    Entry("dce", why="drop what the outputs do not need"),
])

POST_LOWERING = Pipeline("post-lowering", [
    Entry("dce", why="drop what lowering left unused"),
])

PIPELINES = {p.name: p for p in (GRAPH_OPTIMIZATION, POST_LOWERING)}
