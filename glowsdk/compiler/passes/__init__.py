"""Graph optimisation passes and the pass manager; importing this package registers the passes."""
from . import (  # noqa: F401  (registers the passes)
    canonicalize, cse, dce, fold_batchnorm, fold_constants, fold_pad, fuse_activations, merge_reshape, quantized,
    simplify_arithmetic, sink_transpose)
from .manager import PASSES, Entry, Pass, PassManager, Pipeline, register_pass, run_passes
from .pipelines import FLOAT_WEIGHTS, GRAPH_OPTIMIZATION, PIPELINES, POST_LOWERING, QUANTIZATION

__all__ = ["Entry", "FLOAT_WEIGHTS", "GRAPH_OPTIMIZATION", "PASSES", "PIPELINES", "POST_LOWERING", "QUANTIZATION", "Pass", "PassManager",
           "Pipeline", "register_pass", "run_passes"]
