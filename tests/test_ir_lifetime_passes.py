"""The IR passes that shape lifetimes, and the whole pipeline (STYLE 12).

shrink-lifetimes, dead-store, dead-alloc and share-buffers on small programs (IR
text in, IR text out, numbers against the reference evaluator on an equivalent
graph), then IR_OPTIMIZATION between IRGen and the allocator on bundled models.
"""
from __future__ import annotations

import numpy as np
import pytest
from ir_pass_util import (
    RNG,
    check,
    graph,
    same_numbers,
    scheduled_function,
    scheduled_ir,
)

from glowsdk.compiler.ir.allocator import allocate
from glowsdk.compiler.ir.irgen import generate_ir
from glowsdk.compiler.ir.passes import IR_OPTIMIZATION, IR_PASSES
from glowsdk.compiler.passes.manager import Entry, PassManager, Pipeline
from glowsdk.graph import nodes
from glowsdk.graph.function import Function


# -- shrink-lifetimes ------------------------------------------------------------------------------
def test_shrink_lifetimes_sinks_allocs_and_views_and_hoists_deallocs():
    fn, (x,) = graph(x=(2, 3))
    fn.save(fn.add(nodes.Exp, fn.add(nodes.Reshape, fn.add(nodes.Tanh, fn.add(nodes.Relu, x)), shape=(6,))), "y")
    declare = """
        function main
        declare {
          %x = weight input float32<2x3>
          %y = weight output float32<6>
        }"""
    check(declare + """
        program {
          %a = allocactivation {type=float32<2x3>}
          %b = allocactivation {type=float32<2x3>}
          %unused = allocactivation {type=float32<2x3>}
          %bv = tensorview @in %b {type=float32<6>, offset=0}
          %relu = relu @out %a, @in %x
          %tanh = tanh @out %b, @in %a
          %exp = exp @out %y, @in %bv
          %da = deallocactivation @out %a
          %db = deallocactivation @out %b
          %du = deallocactivation @out %unused
        }""", ("shrink-lifetimes",), declare + """
        program {
          %a = allocactivation {type=float32<2x3>}
          %unused = allocactivation {type=float32<2x3>}
          %du = deallocactivation @out %unused
          %relu = relu @out %a, @in %x
          %b = allocactivation {type=float32<2x3>}
          %tanh = tanh @out %b, @in %a
          %da = deallocactivation @out %a
          %bv = tensorview @in %b {type=float32<6>, offset=0}
          %exp = exp @out %y, @in %bv
          %db = deallocactivation @out %b
        }""", fn)


# -- dead-store, dead-alloc ------------------------------------------------------------------------
DEAD_CODE = """
    function main
    declare {
      %x = weight input float32<2x3>
      %y = weight output float32<2x3>
    }
    program {
      %a = allocactivation {type=float32<2x3>}
      %relu = relu @out %a, @in %x
      %b = allocactivation {type=float32<2x3>}
      %tanh = tanh @out %b, @in %a
      %c = allocactivation {type=float32<2x3>}
      %exp = exp @out %c, @in %b
      %cv = tensorview @in %c {type=float32<6>, offset=0}
      %neg = neg @out %y, @in %a
      %da = deallocactivation @out %a
      %db = deallocactivation @out %b
      %dc = deallocactivation @out %c
    }"""


def test_dead_store_removes_chains_nobody_reads_but_keeps_output_writes():
    fn, (x,) = graph(x=(2, 3))
    fn.save(fn.add(nodes.Neg, fn.add(nodes.Relu, x)), "y")
    check(DEAD_CODE, ("dead-store",), """
        function main
        declare {
          %x = weight input float32<2x3>
          %y = weight output float32<2x3>
        }
        program {
          %a = allocactivation {type=float32<2x3>}
          %relu = relu @out %a, @in %x
          %b = allocactivation {type=float32<2x3>}
          %c = allocactivation {type=float32<2x3>}
          %cv = tensorview @in %c {type=float32<6>, offset=0}
          %neg = neg @out %y, @in %a
          %da = deallocactivation @out %a
          %db = deallocactivation @out %b
          %dc = deallocactivation @out %c
        }""", fn)


def test_dead_alloc_removes_buffers_and_views_nothing_uses():
    fn, (x,) = graph(x=(2, 3))
    fn.save(fn.add(nodes.Neg, fn.add(nodes.Relu, x)), "y")
    check(DEAD_CODE, ("dead-store", "dead-alloc"), """
        function main
        declare {
          %x = weight input float32<2x3>
          %y = weight output float32<2x3>
        }
        program {
          %a = allocactivation {type=float32<2x3>}
          %relu = relu @out %a, @in %x
          %neg = neg @out %y, @in %a
          %da = deallocactivation @out %a
        }""", fn)


# -- share-buffers ---------------------------------------------------------------------------------
SIGMOID = "  %e = allocactivation {type=float32<1x4>}\n  %sig = sigmoid @out %e, @in %x2\n"


def chain(with_gap: bool) -> tuple[Function, str, dict]:
    """y = -(tanh(x) @ w @ w), z = -sigmoid(x2); with a gap, %e starts between the two matmuls."""
    fn, (x, x2) = graph(x=(1, 8), x2=(1, 4))
    w = RNG.standard_normal((8, 8)).astype(np.float32)
    weight = fn.module.create_constant("w", w).result()
    fn.save(fn.add(nodes.Neg, fn.add(nodes.MatMul, fn.add(nodes.MatMul, fn.add(nodes.Tanh, x), weight), weight)), "y")
    fn.save(fn.add(nodes.Neg, fn.add(nodes.Sigmoid, x2)), "z")
    text = (DECLARE_CHAIN + "program {\n" + ("" if with_gap else SIGMOID)
            + "  %a = allocactivation {type=float32<1x8>}\n"
            + "  %tanh = tanh @out %a, @in %x\n"
            + "  %b = allocactivation {type=float32<1x8>}\n"
            + "  %mm1 = matmul @out %b, @in %a, @in %w\n"
            + "  %da = deallocactivation @out %a\n" + (SIGMOID if with_gap else "")
            + "  %c = allocactivation {type=float32<1x8>}\n"
            + "  %mm2 = matmul @out %c, @in %b, @in %w\n"
            + "  %db = deallocactivation @out %b\n"
            + "  %neg = neg @out %y, @in %c\n"
            + "  %dc = deallocactivation @out %c\n"
            + "  %neg2 = neg @out %z, @in %e\n"
            + "  %de = deallocactivation @out %e\n"
            + "}")
    return fn, text, {"w": w}


DECLARE_CHAIN = """\
function main
declare {
  %x = weight input float32<1x8>
  %x2 = weight input float32<1x4>
  %w = weight constant float32<8x8>
  %y = weight output float32<1x8>
  %z = weight output float32<1x4>
}
"""


def test_share_buffers_gives_a_dead_buffer_to_the_next_of_its_size():
    fn, text, constants = chain(with_gap=False)
    check(text, ("share-buffers",), DECLARE_CHAIN + """\
program {
  %e = allocactivation {type=float32<1x4>}
  %sig = sigmoid @out %e, @in %x2
  %a = allocactivation {type=float32<1x8>}
  %tanh = tanh @out %a, @in %x
  %b = allocactivation {type=float32<1x8>}
  %mm1 = matmul @out %b, @in %a, @in %w
  %mm2 = matmul @out %a, @in %b, @in %w
  %db = deallocactivation @out %b
  %neg = neg @out %y, @in %a
  %da = deallocactivation @out %a
  %neg2 = neg @out %z, @in %e
  %de = deallocactivation @out %e
}""", fn, constants)


def test_share_buffers_leaves_a_gap_another_buffer_starts_in():
    fn, text, constants = chain(with_gap=True)
    check(text, ("share-buffers",), text, fn, constants)


@pytest.mark.parametrize("name", ["resnet50", "inception_v1"])
def test_share_buffers_leaves_fewer_buffers_in_no_more_memory(name):
    ir = scheduled_ir(name)
    others = [e for e in IR_OPTIMIZATION.entries if e.pass_name != "share-buffers"]
    PassManager(registry=IR_PASSES).run(Pipeline("before", others), ir)
    before = allocate(ir).report
    buffers = len(ir.allocs())
    PassManager(registry=IR_PASSES).run(Pipeline("share", [Entry("share-buffers")]), ir)
    after = allocate(ir).report
    assert len(ir.allocs()) < buffers
    assert after.lower_bound_bytes == before.lower_bound_bytes
    assert after.allocated_bytes <= before.allocated_bytes


# -- the pipeline on bundled models ----------------------------------------------------------------
def test_the_pipeline_is_data_with_a_reason_per_pass():
    assert IR_OPTIMIZATION.pass_names()[:2] == ["peel-views", "copy-elimination"]
    assert all(e.why for e in IR_OPTIMIZATION.entries)
    assert set(IR_OPTIMIZATION.pass_names()) == set(IR_PASSES)


@pytest.mark.parametrize("name", ["resnet50", "inception_v1", "shufflenet"])
def test_pipeline_on_bundled_models_keeps_the_numbers_and_needs_far_less_memory(name):
    fn = scheduled_function(name)
    ir = generate_ir(fn)
    naive = allocate(ir).activation_bytes
    runs = PassManager(registry=IR_PASSES).run(IR_OPTIMIZATION, ir)
    assert all(r.changed for r in runs if r.pass_name in ("peel-views", "copy-elimination", "inplace"))
    assert not any(i.kind == "Copy" for i in ir.instructions)  # the Save went into its producer
    assert allocate(ir).activation_bytes < naive / 5
    same_numbers(ir, fn)
