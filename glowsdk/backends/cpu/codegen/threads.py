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

from .kinds import I1, I8, I32, I64, PTR, i64

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


CHUNK_STATE_WORDS = 4
"""What a thread knows between taking chunks of one shared kernel (i32 words in a stack slot of
the thread entry, `emit_shared`'s `state`): the next owner to take from (as an offset from the thread, -1
before it claimed its own share), the chunk taken and of how many, and its weight in finished
chunks (the whole share, 1, or 0 before the first)."""
VICTIM, CHUNK, CHUNKS, SHARE = range(4)


def emit_shared(builder: ir.IRBuilder, sync: ir.Value, index: int, thread: ir.Value, threads: ir.Value,
                state: ir.Value, run_chunk: Callable[[ir.Value, ir.Value], None]) -> None:
    """Shared kernel number `index` of the program: `run_chunk(chunk, chunks)` emits its one call,
    in a loop over the chunks this thread takes through the three functions of the protocol the
    module defines once (`_protocol`), `state` (CHUNK_STATE_WORDS i32 words) carrying what they
    know between calls; with one thread, one chunk of one, the synchronisation words untouched.
    Inline at every shared call (each call twice: one thread or several), the protocol's five
    loops made the thread entry a quarter of the LLVM time of a network's compile
    (efficientnet_b0: 1.3 of 4.3 s)."""
    def word(line: int) -> ir.Value:
        return builder.gep(sync, [i64(SYNC_LINE * line)], inbounds=True, source_etype=I8)

    open_kernel, take_chunk, close_kernel = _protocol(builder.module)
    progress, claims, finished = word(0), word(1 + 2 * index), word(2 + 2 * index)
    builder.call(open_kernel, [progress, ir.Constant(I32, index + 1), thread, threads])
    builder.store(ir.Constant(I32, -1), _field(builder, state, VICTIM))
    builder.store(ir.Constant(I32, 0), _field(builder, state, SHARE))
    function = builder.function
    take, work, done = (function.append_basic_block(f"chunk.{name}") for name in ("take", "run", "done"))
    builder.branch(take)
    builder.position_at_end(take)
    builder.cbranch(builder.call(take_chunk, [claims, finished, state, thread, threads]), work, done)
    builder.position_at_end(work)
    run_chunk(builder.load(_field(builder, state, CHUNK), typ=I32), builder.load(_field(builder, state, CHUNKS), typ=I32))
    builder.branch(take)
    builder.position_at_end(done)
    builder.call(close_kernel, [finished, thread, threads])


def _field(builder: ir.IRBuilder, state: ir.Value, field: int) -> ir.Value:
    return builder.gep(state, [i64(field)], inbounds=True, source_etype=I32)


PROTOCOL = ("glowsdk.chunks.open", "glowsdk.chunks.take", "glowsdk.chunks.close")
"""The functions of the chunk protocol, internal to the module."""


def _protocol(module: ir.Module) -> tuple[ir.Function, ir.Function, ir.Function]:
    """The module's three functions of the protocol, defined at the first call:
    open(progress, opened, thread, threads): thread 0 publishes that kernel `opened` - 1 may start,
    the others wait for it; take(claims, finished, state, thread, threads) -> i1: counts the chunk
    run last as finished, then claims the thread's own share whole, or else the next chunk left
    in another's share, into `state` (false: none left); close(finished, thread, threads): thread
    0 waits until every chunk is finished. With one thread, open and close do nothing and take
    gives chunk 0 of 1 once."""
    if PROTOCOL[0] in module.globals:
        return tuple(module.globals[name] for name in PROTOCOL)
    signatures = (ir.FunctionType(ir.VoidType(), [PTR, I32, I32, I32]), ir.FunctionType(I1, [PTR, PTR, PTR, I32, I32]),
                  ir.FunctionType(ir.VoidType(), [PTR, I32, I32]))
    functions = []
    for name, signature in zip(PROTOCOL, signatures):
        function = ir.Function(module, signature, name)
        function.linkage = "internal"
        function.attributes.add("noinline")
        function.attributes.add("nounwind")
        functions.append(function)
    _define_open(functions[0])
    _define_take(functions[1])
    _define_close(functions[2])
    return functions[0], functions[1], functions[2]


def _chunks_per_thread(builder: ir.IRBuilder, threads: ir.Value) -> ir.Value:
    """`per`: CHUNKS_PER_THREAD, fewer where threads x that would pass MAX_THREADS."""
    cap = ir.Constant(I32, MAX_THREADS // CHUNKS_PER_THREAD)
    return builder.select(builder.icmp_unsigned("<=", threads, cap), ir.Constant(I32, CHUNKS_PER_THREAD),
                          builder.udiv(ir.Constant(I32, MAX_THREADS), threads))


def _define_open(function: ir.Function) -> None:
    progress, opened, thread, threads = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    with builder.if_then(builder.icmp_unsigned("<=", threads, ir.Constant(I32, 1))):
        builder.ret_void()
    with builder.if_else(builder.icmp_unsigned("==", thread, ir.Constant(I32, 0))) as (opener, joiner):
        with opener:
            builder.atomic_rmw("xchg", progress, opened, "release")
        with joiner:
            wait_until(builder, lambda: builder.icmp_unsigned(
                ">=", builder.load_atomic(progress, "acquire", 4, typ=I32), opened), nap=False, name="open")
    builder.ret_void()


def _define_take(function: ir.Function) -> None:
    claims, finished, state, thread, threads = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    zero, one = ir.Constant(I32, 0), ir.Constant(I32, 1)
    per = _chunks_per_thread(builder, threads)

    def field(index: int) -> ir.Value:
        return _field(builder, state, index)

    def taken(chunk: ir.Value, chunks: ir.Value, share: ir.Value) -> None:
        for index, value in ((CHUNK, chunk), (CHUNKS, chunks), (SHARE, share)):
            builder.store(value, field(index))
        builder.ret(ir.Constant(I1, 1))

    def claim_word(owner: ir.Value) -> ir.Value:
        return builder.gep(claims, [builder.zext(owner, I64)], inbounds=True, source_etype=I32)

    with builder.if_then(builder.icmp_unsigned("<=", threads, one)):
        alone = builder.icmp_signed("<", builder.load(field(VICTIM), typ=I32), zero)
        with builder.if_then(alone):
            builder.store(zero, field(VICTIM))
            taken(zero, one, zero)
        builder.ret(ir.Constant(I1, 0))
    share = builder.load(field(SHARE), typ=I32)
    with builder.if_then(builder.icmp_unsigned("!=", share, zero)):
        builder.atomic_rmw("add", finished, share, "release")
    first = builder.load(field(VICTIM), typ=I32)
    with builder.if_then(builder.icmp_signed("<", first, zero)):
        builder.store(zero, field(VICTIM))
        whole = builder.extract_value(builder.cmpxchg(claim_word(thread), zero, per, "monotonic", "monotonic"), 1)
        with builder.if_then(whole):
            taken(thread, threads, per)
    start = builder.load(field(VICTIM), typ=I32)
    before = builder.block
    steal, look, grab, advance, done = (function.append_basic_block(f"chunk.{name}")
                                        for name in ("steal", "look", "grab", "next", "done"))
    builder.branch(steal)
    builder.position_at_end(steal)
    offset = builder.phi(I32, name="victim")
    offset.add_incoming(start, before)
    builder.cbranch(builder.icmp_unsigned("<", offset, threads), look, done)
    builder.position_at_end(look)
    owner = builder.add(thread, offset)
    owner = builder.select(builder.icmp_unsigned(">=", owner, threads), builder.sub(owner, threads), owner)
    owned = claim_word(owner)
    left = builder.icmp_unsigned("<", builder.load_atomic(owned, "monotonic", 4, typ=I32), per)
    builder.cbranch(left, grab, advance)
    builder.position_at_end(grab)
    got = builder.atomic_rmw("add", owned, one, "monotonic")
    with builder.if_then(builder.icmp_unsigned("<", got, per)):
        builder.store(offset, field(VICTIM))
        taken(builder.add(builder.mul(owner, per), got), builder.mul(threads, per), one)
    builder.branch(advance)
    builder.position_at_end(advance)
    offset.add_incoming(builder.add(offset, one), advance)
    builder.branch(steal)
    builder.position_at_end(done)
    builder.ret(ir.Constant(I1, 0))


def _define_close(function: ir.Function) -> None:
    finished, thread, threads = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    last = builder.and_(builder.icmp_unsigned("==", thread, ir.Constant(I32, 0)),
                        builder.icmp_unsigned(">", threads, ir.Constant(I32, 1)))
    with builder.if_then(last):
        chunks = builder.mul(threads, _chunks_per_thread(builder, threads))
        wait_until(builder, lambda: builder.icmp_unsigned(
            ">=", builder.load_atomic(finished, "acquire", 4, typ=I32), chunks), nap=False, name="finished")
    builder.ret_void()


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
