"""Threads inside one compiled program: work splitting and the barrier between kernels.

The host runs `glowsdk_thread(..., thread, threads)` on `threads` OS threads at
once (backend: one ctypes call per Python thread; ctypes releases the GIL). Each
heavy kernel takes the share of its outer tile loop `split` gives its thread,
and every thread meets at a barrier after every kernel, so a kernel always sees
its inputs complete. The barrier is a counter and a generation number in the
first BARRIER_BYTES of the scratch area (zero when the arena is allocated, and
the counter is back at zero after every barrier): the last thread to arrive
resets the counter and publishes a new generation, the others spin on it
(with the x86 `pause` hint)
(atomic exchanges stand for atomic stores, which llvmlite cannot emit on opaque
pointers). With
one thread the barrier is skipped, so a single-threaded run pays one compare.
"""
from __future__ import annotations

from typing import Callable

from llvmlite import ir

from .kinds import I8, I32, I64, i64

BARRIER_BYTES = 128
"""Counter and generation, on separate cache lines."""
SPINS, YIELDS, IDLE_NAP_US = 40000, 200, 1000
"""A waiter spins SPINS tries, then yields the core (POSIX sched_yield) at every try; after YIELDS
yields an idle pool worker sleeps until the next job (pool.py), and a waiting host thread naps 50 us
doubling up to IDLE_NAP_US (back_off). 40000 `pause` are about 0.5 ms where one takes 13 ns
(measured here), longer than a host's gap between back-to-back runs, so those never sleep."""
MAX_THREADS = 16
"""Kernels size per-thread scratch for this many threads; the backend refuses more."""


def emit_barrier(builder: ir.IRBuilder, address: ir.Value, threads: ir.Value) -> None:
    """Wait until all `threads` threads have reached this point (no-op for one thread)."""
    one = ir.Constant(I32, 1)
    with builder.if_then(builder.icmp_unsigned(">", threads, one)):
        count = address
        generation = builder.gep(address, [i64(64)], inbounds=True, source_etype=I8)
        seen = builder.load_atomic(generation, "acquire", 4, typ=I32)
        arrived = builder.atomic_rmw("add", count, one, "acq_rel")
        last = builder.icmp_unsigned("==", arrived, builder.sub(threads, one))
        with builder.if_else(last) as (then, otherwise):
            with then:
                builder.atomic_rmw("xchg", count, ir.Constant(I32, 0), "monotonic")
                builder.atomic_rmw("xchg", generation, builder.add(seen, one), "release")
            with otherwise:
                _wait(builder, generation, seen)


def _wait(builder: ir.IRBuilder, generation: ir.Value, seen: ir.Value) -> None:
    """Wait until `generation` moves on from `seen`, yielding the core after the spin (see
    back_off), so a descheduled thread we wait for can run."""
    wait_until(builder, lambda: builder.icmp_unsigned(
        "!=", builder.load_atomic(generation, "acquire", 4, typ=I32), seen), nap=False, name="barrier")


def wait_until(builder: ir.IRBuilder, ready: Callable[[], ir.Value], nap: bool, name: str) -> None:
    """Emit a loop that evaluates `ready()` (an i1, re-read every try) and takes one back_off step
    while it is false; code after it runs once it is true."""
    function = builder.function
    before = builder.block
    head = function.append_basic_block(f"{name}.check")
    wait = function.append_basic_block(f"{name}.wait")
    done = function.append_basic_block(f"{name}.done")
    builder.branch(head)
    builder.position_at_end(head)
    tries = builder.phi(I32, name="tries")
    tries.add_incoming(ir.Constant(I32, 0), before)
    builder.cbranch(ready(), done, wait)
    builder.position_at_end(wait)
    back_off(builder, tries, nap)
    tries.add_incoming(builder.add(tries, ir.Constant(I32, 1)), builder.block)
    builder.branch(head)
    builder.position_at_end(done)


def back_off(builder: ir.IRBuilder, tries: ir.Value, nap: bool) -> None:
    """One wait step after `tries` earlier ones: `pause` for the first SPINS, then yield the core;
    with `nap` (a host thread waiting for the pool's workers, pool.py), after YIELDS yields sleep
    50 us, doubling up to IDLE_NAP_US, so a long wait costs almost no CPU."""
    module = builder.module
    spinning = builder.icmp_unsigned("<", tries, ir.Constant(I32, SPINS))
    with builder.if_else(spinning) as (spin, slower):
        with spin:
            pause(builder)
        with slower:
            if nap:
                _yield_or_nap(builder, tries)
            else:
                builder.call(libc(module, "sched_yield", []), [])


def _yield_or_nap(builder: ir.IRBuilder, tries: ir.Value) -> None:
    module = builder.module
    yielding = builder.icmp_unsigned("<", tries, ir.Constant(I32, SPINS + YIELDS))
    with builder.if_else(yielding) as (yield_, sleep):
        with yield_:
            builder.call(libc(module, "sched_yield", []), [])
        with sleep:
            nap(builder, tries)


def nap(builder: ir.IRBuilder, tries: ir.Value) -> None:
    """Sleep 50 us, doubling with every try past SPINS + YIELDS, up to IDLE_NAP_US."""
    doublings = builder.sub(tries, ir.Constant(I32, SPINS + YIELDS))
    small = builder.icmp_unsigned("<", doublings, ir.Constant(I32, 5))
    shift = builder.select(small, doublings, ir.Constant(I32, 5))
    micros = builder.shl(ir.Constant(I32, 50), shift)
    cap = ir.Constant(I32, IDLE_NAP_US)
    micros = builder.select(builder.icmp_unsigned("<", micros, cap), micros, cap)
    builder.call(libc(builder.module, "usleep", [I32]), [micros])


def pause(builder: ir.IRBuilder) -> None:
    """The spin-wait hint (x86 `pause`, which also spares the sibling hyper-thread); nothing elsewhere."""
    module = builder.module
    if module.triple.startswith(("x86_64", "i686", "i386")):
        intrinsic = module.globals.get("llvm.x86.sse2.pause") or ir.Function(
            module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
        builder.call(intrinsic, [])


def libc(module: ir.Module, name: str, arguments: list[ir.Type]) -> ir.Function:
    """The C library function `name` returning int (POSIX: sched_yield, usleep), declared once."""
    existing = module.globals.get(name)
    return existing if existing is not None else ir.Function(module, ir.FunctionType(I32, arguments), name)


def split(builder: ir.IRBuilder, count: int, thread: ir.Value, threads: ir.Value) -> tuple[ir.Value, ir.Value]:
    """This thread's [start, stop) of `count` work items, in contiguous near-equal shares."""
    total = i64(count)
    index, parts = builder.zext(thread, I64), builder.zext(threads, I64)
    start = builder.udiv(builder.mul(total, index), parts)
    stop = builder.udiv(builder.mul(total, builder.add(index, i64(1))), parts)
    return start, stop
