"""The IR optimiser: memory passes on the low-level IR (paper 3.5); importing registers them.

Every pass reads legality from the operand directions (@in/@out/@inout) of the
instruction records and keeps `verify_ir` green and the numbers unchanged.
IR_OPTIMIZATION is the pipeline `build_program` runs between IRGen and the
allocator, ordered so the allocator sees as few, as small and as short-lived
buffers as the data flow allows.
"""
from ...passes.manager import Entry, Pipeline
from . import (  # noqa: F401
    copy_elimination,
    dead_alloc,
    dead_store,
    inplace,
    peel_views,
    share_buffers,
    shrink_lifetimes,
)
from .registry import IR_PASSES

IR_OPTIMIZATION = Pipeline("ir-optimization", [
    Entry("peel-views", why="reshapes and contiguous slices become views: no copy, no buffer"),
    Entry("copy-elimination", "fixpoint",
          why="producers write the outputs directly (also through peeled views); copies of activations forward"),
    Entry("inplace", why="element-wise results overwrite a source read for the last time"),
    Entry("dead-store", why="drop instructions whose results nobody reads"),
    Entry("dead-alloc", why="drop the buffers and views the passes above left unused"),
    Entry("shrink-lifetimes", why="every buffer lives from first to last use, so the allocator can reuse it"),
    Entry("share-buffers", why="one buffer fewer where a same-size buffer dies just before another starts"),
])

__all__ = ["IR_OPTIMIZATION", "IR_PASSES"]
