"""Threads inside one compiled program: each owns a share of a kernel, idle ones take what is left.

The pool (pool.py) runs `glowsdk_thread(..., thread, threads)` on the caller's
thread (thread 0) and on every worker that joins the run. A kernel worth
splitting (serial_nanoseconds at least the `split_min_us` option, PARALLEL_MIN_US
by default) is shared; every other kernel runs on thread 0 alone as thread 0 of 1.
Each thread owns one share of a shared kernel (`split`'s share `thread` of
`threads`) cut into `per` chunks (CHUNKS_PER_THREAD, fewer past 4 threads). A
thread first claims its whole share, and if nobody took any of it yet runs it as
one call, as thread `thread` of `threads`; then it takes the chunks left in the
others' shares one by one (chunk c of `threads x per`: split's chunks c = t x per
.. t x per + per - 1 of that many make up share t exactly). So the work waits
for no thread: a worker that is not on a core (on a loaded machine it often is
not) loses its share to the threads that are, thread 0 doing the rest. The
earlier static split (one share per thread, a barrier after every kernel) made
every kernel wait for the slowest thread: a 405-kernel GRU took 0.31 ms at the
median on 2 threads of this 2-vCPU machine under load but 17 ms at the 90th
percentile and 430 ms at the 99th (0.24 ms and 12 ms on 1 thread). Taking every
chunk from one shared counter instead kept the load balanced but left it to
chance which thread computed which part of a tensor: a depthwise layer read half
its input from the other core's cache, where the 1x1 convolution before it, split
the same way by channels, had left it. Owned shares keep each thread on its part
of consecutive kernels (mnasnet1_0's 7 x 7 depthwise layers: 1.0x -> 1.9x on 2
threads, with per-thread scratch on lines of its own: KernelContext.thread_scratch).

The synchronisation words live in the activations region (SYNC_LINE bytes each,
on their own cache lines; sync_bytes): thread 0's progress (how many shared
kernels it has opened, published after the kernels before are complete), then
per shared kernel one line of claim counters (per owner, how many chunks of its
share are taken; `per` once the owner claims it whole) and the count of chunks
finished. A worker waits for thread 0 to open a kernel, claims and takes chunks,
and goes on to the next; thread 0 opens it, claims and takes chunks, and waits
until every chunk is finished before the kernels after it. glowsdk_run zeroes the
words before each run (pool.py). With one thread, a shared kernel is one call as
thread 0 of 1.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterable

from llvmlite import ir

from .kinds import I8, I32, I64, i64

SYNC_LINE = 64
"""Bytes per synchronisation word: one cache line, so threads taking chunks do not share a line
with the thread polling progress."""
CHUNKS_PER_THREAD = 4
"""Chunks per thread's share (fewer where threads x this would pass MAX_THREADS): what a thread
that arrives late leaves is taken by the others in pieces this fine. An owner on time runs its
share as one call, so the chunks cost nothing then."""
SPINS, YIELDS, IDLE_NAP_US = 40000, 200, 1000
"""A waiter spins SPINS tries, then yields the core (POSIX sched_yield) at every try; after YIELDS
yields an idle pool worker sleeps until the next job (pool.py), and a waiting host thread naps 50 us
doubling up to IDLE_NAP_US (back_off). 40000 `pause` are about 0.5 ms where one takes 13 ns
(measured here), longer than a host's gap between back-to-back runs, so those never sleep."""
MAX_THREADS = 16
"""Kernels size per-thread scratch for this many threads, a claim line holds a counter for as
many (SYNC_LINE / 4); the backend refuses more."""
PARALLEL_MIN_US = 5.0
"""By default a kernel estimated to take less than this on one thread is not split among threads
(the backend's `split_min_us` option). Sharing one costs about half a microsecond of cache-line
hand-overs on 2 threads (opening it, claiming, reporting it finished)."""
FLOPS_PER_NS, BYTES_PER_NS = 50.0, 25.0
"""One thread's rough speed for the estimate, fitted to the per-kernel times (bench --profile) of
gru, mobilenet_v3_small and resnet18 here: 35 to 75 FLOP/ns in convolutions and matrix products,
20 to 30 bytes/ns in the others (operands mostly in cache)."""


def instruction_flops(instr: Any) -> int:
    """Multiply-adds x 2 of a Conv or MatMul instruction, 0 for any other."""
    if instr.kind == "MatMul":
        *batch, rows, inner = instr.inputs[0].type.shape
        return 2 * math.prod(batch) * rows * inner * instr.inputs[1].type.shape[-1]
    if instr.kind == "Conv":
        out = instr.types[0].shape
        per_output = math.prod(instr.filter.type.shape[1:])
        return 2 * math.prod(out) * per_output
    return 0


def serial_nanoseconds(instrs: Iterable[Any]) -> float:
    """A rough time for `instrs` (one step's instructions) on one thread: its multiply-adds at
    FLOPS_PER_NS plus the bytes of its distinct operands at BYTES_PER_NS."""
    instrs = list(instrs)
    operands = {id(v): v for instr in instrs for v in instr.operands if v is not None}
    nbytes = sum(v.type.nbytes for v in operands.values())
    return sum(instruction_flops(i) for i in instrs) / FLOPS_PER_NS + nbytes / BYTES_PER_NS


def sync_bytes(shared_kernels: int) -> int:
    """Bytes of synchronisation words a program with `shared_kernels` shared kernels needs."""
    return SYNC_LINE * (1 + 2 * shared_kernels)


def emit_shared(builder: ir.IRBuilder, sync: ir.Value, index: int, thread: ir.Value, threads: ir.Value,
                run_chunk: Callable[[ir.Value, ir.Value], None]) -> None:
    """Shared kernel number `index` of the program: `run_chunk(chunk, chunks)` emits one call of
    it; with more than one thread the shares and chunks are claimed at `sync` (see above)."""
    one = ir.Constant(I32, 1)
    with builder.if_else(builder.icmp_unsigned(">", threads, one)) as (many, alone):
        with many:
            _take_chunks(builder, sync, index, thread, threads, run_chunk)
        with alone:
            run_chunk(ir.Constant(I32, 0), one)


def _take_chunks(builder: ir.IRBuilder, sync: ir.Value, index: int, thread: ir.Value, threads: ir.Value,
                 run_chunk: Callable[[ir.Value, ir.Value], None]) -> None:
    def word(line: int) -> ir.Value:
        return builder.gep(sync, [i64(SYNC_LINE * line)], inbounds=True, source_etype=I8)

    progress, claims, finished = word(0), word(1 + 2 * index), word(2 + 2 * index)
    opened = ir.Constant(I32, index + 1)
    cap = ir.Constant(I32, MAX_THREADS // CHUNKS_PER_THREAD)
    per = builder.select(builder.icmp_unsigned("<=", threads, cap), ir.Constant(I32, CHUNKS_PER_THREAD),
                         builder.udiv(ir.Constant(I32, MAX_THREADS), threads))
    chunks = builder.mul(threads, per)
    first = builder.icmp_unsigned("==", thread, ir.Constant(I32, 0))
    with builder.if_else(first) as (opener, joiner):
        with opener:
            builder.atomic_rmw("xchg", progress, opened, "release")
        with joiner:
            wait_until(builder, lambda: builder.icmp_unsigned(
                ">=", builder.load_atomic(progress, "acquire", 4, typ=I32), opened), nap=False, name="open")

    def claim_word(owner: ir.Value) -> ir.Value:
        return builder.gep(claims, [builder.zext(owner, I64)], inbounds=True, source_etype=I32)

    function = builder.function
    steal = function.append_basic_block("chunk.steal")
    look = function.append_basic_block("chunk.look")
    grab = function.append_basic_block("chunk.grab")
    work = function.append_basic_block("chunk.run")
    advance = function.append_basic_block("chunk.next")
    done = function.append_basic_block("chunk.done")
    zero = ir.Constant(I32, 0)
    whole = builder.extract_value(builder.cmpxchg(claim_word(thread), zero, per, "monotonic", "monotonic"), 1)
    own = builder.block
    builder.cbranch(whole, work, steal)

    builder.position_at_end(steal)
    offset = builder.phi(I32, name="victim")
    offset.add_incoming(zero, own)
    builder.cbranch(builder.icmp_unsigned("<", offset, threads), look, done)
    builder.position_at_end(look)
    owner = builder.add(thread, offset)
    owner = builder.select(builder.icmp_unsigned(">=", owner, threads), builder.sub(owner, threads), owner)
    owned = claim_word(owner)
    left = builder.icmp_unsigned("<", builder.load_atomic(owned, "monotonic", 4, typ=I32), per)
    builder.cbranch(left, grab, advance)
    builder.position_at_end(grab)
    taken = builder.atomic_rmw("add", owned, ir.Constant(I32, 1), "monotonic")
    stolen = builder.add(builder.mul(owner, per), taken)
    builder.cbranch(builder.icmp_unsigned("<", taken, per), work, advance)
    builder.position_at_end(advance)
    offset.add_incoming(builder.add(offset, ir.Constant(I32, 1)), advance)
    builder.branch(steal)

    builder.position_at_end(work)
    chunk = builder.phi(I32, name="chunk")
    chunk.add_incoming(thread, own)
    chunk.add_incoming(stolen, grab)
    count = builder.phi(I32, name="chunks")
    count.add_incoming(threads, own)
    count.add_incoming(chunks, grab)
    share = builder.phi(I32, name="share")
    share.add_incoming(per, own)
    share.add_incoming(ir.Constant(I32, 1), grab)
    next_offset = builder.phi(I32, name="resume")
    next_offset.add_incoming(zero, own)
    next_offset.add_incoming(offset, grab)
    run_chunk(chunk, count)
    builder.atomic_rmw("add", finished, share, "release")
    offset.add_incoming(next_offset, builder.block)
    builder.branch(steal)

    builder.position_at_end(done)
    with builder.if_then(first):
        wait_until(builder, lambda: builder.icmp_unsigned(
            ">=", builder.load_atomic(finished, "acquire", 4, typ=I32), chunks), nap=False, name="finished")


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
