"""The IR passes that remove copies: peel-views, copy-elimination, inplace (STYLE 12).

Each test parses a small program, runs a pass through the pass manager (which
verifies the IR after it, including that no instruction but an in-place one reads
bytes it writes), compares the printed result with the expected text, and checks
the program before and after against the reference evaluator on an equivalent
graph (tests/ir_pass_util.py).
"""
from __future__ import annotations

from textwrap import dedent

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ir_pass_util import F32, RNG, check, graph

from glowsdk.compiler.ir import IRFunction, parse_ir, verify_ir
from glowsdk.compiler.ir.passes.peel_views import contiguous_window
from glowsdk.errors import GraphError
from glowsdk.graph import ElemKind, Module, Type, nodes


# -- peel-views ------------------------------------------------------------------------------------
def test_peel_views_turns_a_reshape_into_a_view_of_its_source():
    fn, (x,) = graph(x=(2, 3))
    fn.save(fn.add(nodes.Tanh, fn.add(nodes.Reshape, fn.add(nodes.Relu, x), shape=(6,))), "y")
    check("""
        function main
        declare {
          %x = weight input float32<2x3>
          %y = weight output float32<6>
        }
        program {
          %a = allocactivation {type=float32<2x3>}
          %relu = relu @out %a, @in %x
          %b = allocactivation {type=float32<6>}
          %flat = reshape @out %b, @in %a {shape=[6]}
          %c = allocactivation {type=float32<6>}
          %tanh = tanh @out %c, @in %b
          %save = copy @out %y, @in %c
          %da = deallocactivation @out %a
          %db = deallocactivation @out %b
          %dc = deallocactivation @out %c
        }""", ("peel-views",), """
        function main
        declare {
          %x = weight input float32<2x3>
          %y = weight output float32<6>
        }
        program {
          %a = allocactivation {type=float32<2x3>}
          %relu = relu @out %a, @in %x
          %flat = tensorview @in %a {type=float32<6>, offset=0}
          %c = allocactivation {type=float32<6>}
          %tanh = tanh @out %c, @in %flat
          %save = copy @out %y, @in %c
          %da = deallocactivation @out %a
          %dc = deallocactivation @out %c
        }""", fn)


def test_peel_views_turns_contiguous_slices_into_offset_views_and_keeps_strided_ones():
    fn, (x,) = graph(x=(1, 4, 2, 3))
    relu = fn.add(nodes.Relu, x)
    fn.save(fn.add(nodes.Slice, relu, starts=(0, 1, 0, 0), ends=(1, 3, 2, 3), steps=(1, 1, 1, 1)), "mid")
    fn.save(fn.add(nodes.Slice, relu, starts=(0, 0, 0, 0), ends=(1, 4, 2, 2), steps=(1, 1, 1, 1)), "left")
    declare = """
        function main
        declare {
          %x = weight input float32<1x4x2x3>
          %mid = weight output float32<1x2x2x3>
          %left = weight output float32<1x4x2x2>
        }"""
    check(declare + """
        program {
          %a = allocactivation {type=float32<1x4x2x3>}
          %relu = relu @out %a, @in %x
          %b = allocactivation {type=float32<1x2x2x3>}
          %channels = slice @out %b, @in %a {starts=[0, 1, 0, 0], ends=[1, 3, 2, 3], steps=[1, 1, 1, 1]}
          %c = allocactivation {type=float32<1x4x2x2>}
          %columns = slice @out %c, @in %a {starts=[0, 0, 0, 0], ends=[1, 4, 2, 2], steps=[1, 1, 1, 1]}
          %save_mid = copy @out %mid, @in %b
          %save_left = copy @out %left, @in %c
          %da = deallocactivation @out %a
          %db = deallocactivation @out %b
          %dc = deallocactivation @out %c
        }""", ("peel-views",), declare + """
        program {
          %a = allocactivation {type=float32<1x4x2x3>}
          %relu = relu @out %a, @in %x
          %channels = tensorview @in %a {type=float32<1x2x2x3>, offset=24}
          %c = allocactivation {type=float32<1x4x2x2>}
          %columns = slice @out %c, @in %a {starts=[0, 0, 0, 0], ends=[1, 4, 2, 2], steps=[1, 1, 1, 1]}
          %save_mid = copy @out %mid, @in %channels
          %save_left = copy @out %left, @in %c
          %da = deallocactivation @out %a
          %dc = deallocactivation @out %c
        }""", fn)


def test_peel_views_turns_a_reinterpret_of_a_weight_into_a_view_of_it():
    module = Module()
    fn = module.create_function("main")
    x = module.create_placeholder("x", Type(ElemKind.UINT8, (2, 3))).result()
    quantized = fn.add(nodes.Reinterpret, x, result_type=Type(ElemKind.QUINT8, (2, 3), 0.5, 3))
    fn.save(fn.add(nodes.Dequantize, quantized, elem=F32), "y")
    declare = """
        function main
        declare {
          %x = weight input uint8<2x3>
          %y = weight output float32<2x3>
        }"""
    check(declare + """
        program {
          %a = allocactivation {type=uint8q[0.5,3]<2x3>}
          %q = reinterpret @out %a, @in %x {result_type=uint8q[0.5,3]<2x3>}
          %deq = dequantize @out %y, @in %a {elem=float32}
          %da = deallocactivation @out %a
        }""", ("peel-views",), declare + """
        program {
          %q = tensorview @in %x {type=uint8q[0.5,3]<2x3>, offset=0}
          %deq = dequantize @out %y, @in %q {elem=float32}
        }""", fn)


def test_peel_views_keeps_a_reshape_whose_source_is_overwritten_later():
    fn, (x,) = graph(x=(2, 3))
    fn.save(fn.add(nodes.Reshape, fn.add(nodes.Relu, x), shape=(6,)), "y")
    fn.save(fn.add(nodes.Tanh, x), "z")
    text = """
        function main
        declare {
          %x = weight input float32<2x3>
          %y = weight output float32<6>
          %z = weight output float32<2x3>
        }
        program {
          %a = allocactivation {type=float32<2x3>}
          %relu = relu @out %a, @in %x
          %b = allocactivation {type=float32<6>}
          %flat = reshape @out %b, @in %a {shape=[6]}
          %tanh = tanh @out %a, @in %x
          %save_y = copy @out %y, @in %b
          %save_z = copy @out %z, @in %a
          %da = deallocactivation @out %a
          %db = deallocactivation @out %b
        }"""
    check(text, ("peel-views",), text, fn)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4).flatmap(
    lambda shape: st.tuples(st.just(tuple(shape)), st.tuples(*[
        st.tuples(st.integers(0, d - 1), st.integers(1, d), st.sampled_from([1, 1, 2, -1])) for d in shape]))))
def test_a_slice_is_a_view_exactly_when_it_picks_one_contiguous_byte_range(case):
    """Oracle: the flat indices numpy picks from an arange array are consecutive, from offset/itemsize."""
    shape, axes = case
    starts, ends, steps = [], [], []
    for (lo, hi, step), dim in zip(axes, shape):
        # a backward step runs from dim - 1 - lo down to (but excluding) the mirrored end
        starts.append(lo if step > 0 else dim - 1 - lo)
        ends.append(max(hi, lo) if step > 0 else dim - 1 - max(hi, lo))
        steps.append(step)
    picked = [np.arange(start, end, step) for start, end, step in zip(starts, ends, steps)]
    flat = np.arange(int(np.prod(shape))).reshape(shape)[np.ix_(*picked)].ravel()
    ir = IRFunction("main")
    x = ir.add_weight("x", Type(F32, shape), "input")
    dest = ir.create("AllocActivation", [], type=Type(F32, tuple(len(p) for p in picked)))
    instr = ir.create("Slice", [dest, x], starts=starts, ends=ends, steps=steps)
    verify_ir(ir)
    got = contiguous_window(instr)
    if flat.size and np.array_equal(flat, np.arange(flat[0], flat[0] + flat.size)):
        assert got == flat[0] * 4
    else:
        assert got is None


# -- copy-elimination ------------------------------------------------------------------------------
def test_copy_elimination_makes_the_writer_write_the_output():
    fn, (x,) = graph(x=(2, 3))
    fn.save(fn.add(nodes.Relu, x), "y")
    check("""
        function main
        declare {
          %x = weight input float32<2x3>
          %y = weight output float32<2x3>
        }
        program {
          %a = allocactivation {type=float32<2x3>}
          %relu = relu @out %a, @in %x
          %save = copy @out %y, @in %a
          %da = deallocactivation @out %a
        }""", ("copy-elimination",), """
        function main
        declare {
          %x = weight input float32<2x3>
          %y = weight output float32<2x3>
        }
        program {
          %relu = relu @out %y, @in %x
        }""", fn)


def test_copy_elimination_writes_through_a_view_of_the_output_after_a_peeled_reshape():
    fn, (x,) = graph(x=(2, 3))
    fn.save(fn.add(nodes.Reshape, fn.add(nodes.Relu, x), shape=(6,)), "y")
    check("""
        function main
        declare {
          %x = weight input float32<2x3>
          %y = weight output float32<6>
        }
        program {
          %a = allocactivation {type=float32<2x3>}
          %relu = relu @out %a, @in %x
          %b = allocactivation {type=float32<6>}
          %flat = reshape @out %b, @in %a {shape=[6]}
          %save = copy @out %y, @in %b
          %da = deallocactivation @out %a
          %db = deallocactivation @out %b
        }""", ("peel-views", "copy-elimination"), """
        function main
        declare {
          %x = weight input float32<2x3>
          %y = weight output float32<6>
        }
        program {
          %a = tensorview @in %y {type=float32<2x3>, offset=0}
          %relu = relu @out %a, @in %x
        }""", fn)


def test_copy_elimination_moves_a_source_into_the_output_for_its_whole_life():
    """Written twice and read before and after the copy: every access goes to %y instead."""
    fn, (x,) = graph(x=(2, 3))
    relu = fn.add(nodes.Relu, x)
    fn.save(fn.add(nodes.Tanh, relu), "z")
    neg = fn.add(nodes.Neg, relu)
    fn.save(neg, "y")
    fn.save(fn.add(nodes.Exp, neg), "e")
    declare = """
        function main
        declare {
          %x = weight input float32<2x3>
          %y = weight output float32<2x3>
          %z = weight output float32<2x3>
          %e = weight output float32<2x3>
        }"""
    check(declare + """
        program {
          %a = allocactivation {type=float32<2x3>}
          %relu = relu @out %a, @in %x
          %tanh = tanh @out %z, @in %a
          %neg = neg @out %a, @in %a
          %save = copy @out %y, @in %a
          %exp = exp @out %e, @in %a
          %da = deallocactivation @out %a
        }""", ("copy-elimination",), declare + """
        program {
          %relu = relu @out %y, @in %x
          %tanh = tanh @out %z, @in %y
          %neg = neg @out %y, @in %y
          %exp = exp @out %e, @in %y
        }""", fn)


def test_copy_elimination_fills_windows_of_the_output_while_neighbouring_windows_are_written():
    fn, (x,) = graph(x=(1, 3))
    fn.save(fn.add(nodes.Concat, fn.add(nodes.Relu, x), fn.add(nodes.Tanh, x), axis=0), "y")
    declare = """
        function main
        declare {
          %x = weight input float32<1x3>
          %y = weight output float32<2x3>
        }"""
    check(declare + """
        program {
          %d = allocactivation {type=float32<2x3>}
          %top = tensorview @in %d {type=float32<1x3>, offset=0}
          %bottom = tensorview @in %d {type=float32<1x3>, offset=12}
          %a = allocactivation {type=float32<1x3>}
          %relu = relu @out %a, @in %x
          %tanh = tanh @out %bottom, @in %x
          %fill = copy @out %top, @in %a
          %save = copy @out %y, @in %d
          %da = deallocactivation @out %a
          %dd = deallocactivation @out %d
        }""", ("copy-elimination",), declare + """
        program {
          %top = tensorview @in %y {type=float32<1x3>, offset=0}
          %bottom = tensorview @in %y {type=float32<1x3>, offset=12}
          %relu = relu @out %top, @in %x
          %tanh = tanh @out %bottom, @in %x
        }""", fn)


def test_copy_elimination_forwards_a_copied_activation():
    fn, (x,) = graph(x=(2, 3))
    relu = fn.add(nodes.Relu, x)
    fn.save(fn.add(nodes.Tanh, relu), "y")
    fn.save(fn.add(nodes.Exp, relu), "z")
    declare = """
        function main
        declare {
          %x = weight input float32<2x3>
          %y = weight output float32<2x3>
          %z = weight output float32<2x3>
        }"""
    check(declare + """
        program {
          %a = allocactivation {type=float32<2x3>}
          %relu = relu @out %a, @in %x
          %b = allocactivation {type=float32<2x3>}
          %cp = copy @out %b, @in %a
          %tanh = tanh @out %y, @in %b
          %exp = exp @out %z, @in %a
          %db = deallocactivation @out %b
          %da = deallocactivation @out %a
        }""", ("copy-elimination",), declare + """
        program {
          %a = allocactivation {type=float32<2x3>}
          %relu = relu @out %a, @in %x
          %tanh = tanh @out %y, @in %a
          %exp = exp @out %z, @in %a
          %da = deallocactivation @out %a
        }""", fn)


def test_copy_elimination_keeps_a_copy_whose_source_is_rewritten_after_it():
    fn, (x,) = graph(x=(2, 3))
    relu = fn.add(nodes.Relu, x)
    fn.save(relu, "y")
    fn.save(fn.add(nodes.Tanh, fn.add(nodes.Neg, relu)), "z")
    text = """
        function main
        declare {
          %x = weight input float32<2x3>
          %y = weight output float32<2x3>
          %z = weight output float32<2x3>
        }
        program {
          %a = allocactivation {type=float32<2x3>}
          %relu = relu @out %a, @in %x
          %save = copy @out %y, @in %a
          %neg = neg @out %a, @in %a
          %tanh = tanh @out %z, @in %a
          %da = deallocactivation @out %a
        }"""
    check(text, ("copy-elimination",), text, fn)


def test_copy_elimination_keeps_a_copy_into_a_buffer_used_before_it():
    """Retargeting tanh would clobber %b before add reads it; forwarding would lose relu's write."""
    fn, (x,) = graph(x=(2, 3))
    total = fn.add(nodes.Add, fn.add(nodes.Relu, x), x)
    fn.save(fn.add(nodes.Sub, fn.add(nodes.Tanh, x), total), "y")
    text = """
        function main
        declare {
          %x = weight input float32<2x3>
          %y = weight output float32<2x3>
        }
        program {
          %b = allocactivation {type=float32<2x3>}
          %a = allocactivation {type=float32<2x3>}
          %tanh = tanh @out %a, @in %x
          %relu = relu @out %b, @in %x
          %t = allocactivation {type=float32<2x3>}
          %add = add @out %t, @in %b, @in %x
          %cp = copy @out %b, @in %a
          %sub = sub @out %y, @in %b, @in %t
          %da = deallocactivation @out %a
          %db = deallocactivation @out %b
          %dt = deallocactivation @out %t
        }"""
    check(text, ("copy-elimination",), text, fn)


# -- inplace ---------------------------------------------------------------------------------------
def test_inplace_reuses_a_source_read_for_the_last_time():
    """tanh cannot reuse %a (add reads it later); add reuses %b, its first dying source of its type."""
    fn, (x,) = graph(x=(2, 3))
    relu = fn.add(nodes.Relu, x)
    fn.save(fn.add(nodes.Add, fn.add(nodes.Tanh, relu), relu), "y")
    declare = """
        function main
        declare {
          %x = weight input float32<2x3>
          %y = weight output float32<2x3>
        }"""
    check(declare + """
        program {
          %a = allocactivation {type=float32<2x3>}
          %relu = relu @out %a, @in %x
          %b = allocactivation {type=float32<2x3>}
          %tanh = tanh @out %b, @in %a
          %c = allocactivation {type=float32<2x3>}
          %add = add @out %c, @in %b, @in %a
          %save = copy @out %y, @in %c
          %da = deallocactivation @out %a
          %db = deallocactivation @out %b
          %dc = deallocactivation @out %c
        }""", ("inplace",), declare + """
        program {
          %a = allocactivation {type=float32<2x3>}
          %relu = relu @out %a, @in %x
          %b = allocactivation {type=float32<2x3>}
          %tanh = tanh @out %b, @in %a
          %add = add @out %b, @in %b, @in %a
          %save = copy @out %y, @in %b
          %da = deallocactivation @out %a
          %db = deallocactivation @out %b
        }""", fn)


def test_inplace_never_reuses_a_broadcast_source():
    fn, (x, z) = graph(x=(1, 3), z=(2, 3))
    fn.save(fn.add(nodes.Add, fn.add(nodes.Relu, x), fn.add(nodes.Tanh, z)), "y")
    declare = """
        function main
        declare {
          %x = weight input float32<1x3>
          %z = weight input float32<2x3>
          %y = weight output float32<2x3>
        }"""
    check(declare + """
        program {
          %a = allocactivation {type=float32<1x3>}
          %relu = relu @out %a, @in %x
          %b = allocactivation {type=float32<2x3>}
          %tanh = tanh @out %b, @in %z
          %c = allocactivation {type=float32<2x3>}
          %add = add @out %c, @in %a, @in %b
          %save = copy @out %y, @in %c
          %da = deallocactivation @out %a
          %db = deallocactivation @out %b
          %dc = deallocactivation @out %c
        }""", ("inplace",), declare + """
        program {
          %a = allocactivation {type=float32<1x3>}
          %relu = relu @out %a, @in %x
          %b = allocactivation {type=float32<2x3>}
          %tanh = tanh @out %b, @in %z
          %add = add @out %b, @in %a, @in %b
          %save = copy @out %y, @in %b
          %da = deallocactivation @out %a
          %db = deallocactivation @out %b
        }""", fn)


def test_inplace_leaves_weights_and_non_elementwise_instructions_alone():
    fn, (x,) = graph(x=(3, 3))
    w = RNG.standard_normal((3, 3)).astype(np.float32)
    fn.save(fn.add(nodes.MatMul, fn.add(nodes.Relu, x), fn.module.create_constant("w", w).result()), "y")
    text = """
        function main
        declare {
          %x = weight input float32<3x3>
          %w = weight constant float32<3x3>
          %y = weight output float32<3x3>
        }
        program {
          %a = allocactivation {type=float32<3x3>}
          %relu = relu @out %a, @in %x
          %m = allocactivation {type=float32<3x3>}
          %mm = matmul @out %m, @in %a, @in %w
          %save = copy @out %y, @in %m
          %da = deallocactivation @out %a
          %dm = deallocactivation @out %m
        }"""
    check(text, ("inplace",), text, fn, constants={"w": w})


def test_the_verifier_refuses_a_destination_over_a_source_unless_in_place():
    """What in-place legality rests on: a streaming kernel may write element i before reading i+1."""
    program = """
        function main
        declare {{
          %x = weight input float32<3x3>
          %w = weight constant float32<3x3>
        }}
        program {{
          %a = allocactivation {{type=float32<3x3>}}
          %relu = relu @out %a, @in %x
          {}
          %da = deallocactivation @out %a
        }}"""
    verify_ir(parse_ir(dedent(program.format("%t = tanh @out %a, @in %a"))))
    with pytest.raises(GraphError, match="writes %a over bytes of %a"):
        verify_ir(parse_ir(dedent(program.format("%mm = matmul @out %a, @in %a, @in %w"))))
    shifted = ("%u = tensorview @in %a {type=float32<3>, offset=0}\n"
               "%v = tensorview @in %a {type=float32<3>, offset=4}\n"
               "%t = tanh @out %u, @in %v")
    with pytest.raises(GraphError, match="writes %u over bytes of %v"):
        verify_ir(parse_ir(dedent(program.format(shifted))))
