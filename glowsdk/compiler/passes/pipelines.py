"""The pass pipelines, as data: print them with `glowsdk compile --print-pipeline`.

GRAPH_OPTIMIZATION runs on the high-level graph before lowering (paper 3.6 step 3);
POST_LOWERING runs on the lowered graph (step 5), where lowering exposes new
opportunities (constants to fold, reshapes to merge, common sub-expressions).

There is no pass removing Dropout or Identity: the importer forwards their input,
so they never reach the graph. Rule passes run to a fixpoint (one sweep already
collapses chains; the next confirms nothing is left); whole-function passes run once.

POST_LOWERING holds only passes that create nothing but Constants, the kinds they
rewrite, and the data-movement primitives Reshape, Transpose and Concat, so a
lowered graph stays lowered. fold-pad and fold-batchnorm are not there: their
kinds are gone by then.
"""
from __future__ import annotations

from .manager import Entry, Pipeline

GRAPH_OPTIMIZATION = Pipeline("graph-optimization", [
    Entry("dce", why="drop what the outputs do not need, so no pass works on it"),
    Entry("cse", why="merge identical nodes (the light models' equal Splat weights) before they are materialised"),
    Entry("fold-constants", why="Constant-only sub-graphs (Splat weights, Reshape'd scales) become Constants"),
    Entry("merge-reshape", "fixpoint", why="Reshape chains collapse into one Reshape or none"),
    Entry("sink-transpose", "fixpoint", why="Transposes move below element-wise ops, then merge or cancel"),
    Entry("simplify-arithmetic", "fixpoint", why="x*1, x+0, x-0, x/1, -(-x), no-op Casts go"),
    Entry("canonicalize", "fixpoint", why="single-part and nested same-axis Concats flatten"),
    Entry("fuse-activations", why="exported GELU, SiLU, HardSwish arithmetic becomes one unary node (one int8 table)"),
    Entry("fold-pad", why="explicit spatial Pads move into Conv/pool pads"),
    Entry("fold-batchnorm", why="needs Constant weights and statistics, so after fold-constants"),
    Entry("cse", why="the rewrites above can make nodes identical again"),
    Entry("dce", why="drop the nodes and Constants the rewrites left unused"),
])

POST_LOWERING = Pipeline("post-lowering", [
    Entry("fold-constants", why="lowering computes on Constants (BatchNorm's a and b, transposed weights)"),
    Entry("merge-reshape", "fixpoint", why="lowering rules chain Reshapes"),
    Entry("sink-transpose", "fixpoint", why="Transposes from lowered layouts merge or cancel"),
    Entry("simplify-arithmetic", "fixpoint", why="general lowering formulas leave x*1 and x+0 behind"),
    Entry("canonicalize", "fixpoint", why="lowered Concats of Concats flatten"),
    Entry("cse", why="lowerings of equal nodes are equal"),
    Entry("dce", why="drop what lowering and the rewrites left unused"),
])

QUANTIZATION = Pipeline("quantization", [
    Entry("merge-conversions", "fixpoint", why="each node was quantized on its own: Dequantize->Quantize pairs meet"),
    Entry("move-conversions", "fixpoint", why="conversions cross layout ops and max pools to meet their pairs"),
    Entry("fold-constants", why="Quantize of weights and biases, and layout ops on int8 weights, become Constants"),
    Entry("fold-qdq", "fixpoint", why="imported QDQ models: float ops between conversions become integer ones"),
    Entry("fold-constants", why="the int32 biases fold-qdq rescaled"),
    Entry("merge-conversions", "fixpoint", why="the pairs the moves and fold-qdq brought together"),
    Entry("fold-rescale", "fixpoint", why="no-op and chained requantizations fold"),
    Entry("cse", why="operands quantized twice to one type are one node"),
    Entry("fold-dequantized", why="quantized weights of ops that stay float become float Constants"),
    Entry("dce", why="drop the float nodes the islands replaced"),
])

FLOAT_WEIGHTS = Pipeline("float-weights", [
    Entry("fold-dequantized", why="an imported quantized model on a backend without integer ops: "
                                  "its int8 weights become float Constants once, not at every run"),
    Entry("dce", why="drop the int8 weights"),
])

PIPELINES = {p.name: p for p in (GRAPH_OPTIMIZATION, POST_LOWERING, QUANTIZATION, FLOAT_WEIGHTS)}
