"""A persistent pool of worker threads, in the module itself: no thread is started per run.

Starting OS threads and handing the GIL around costs tens of microseconds per
run, more than a whole small network takes, so the workers stay alive between
runs inside the machine code. The host (parallel.py) allocates a zeroed pool
state of POOL_BYTES, starts `threads - 1` threads that each call
`glowsdk_worker(state, index)` once (it returns only when the pool stops), and
runs the network with `glowsdk_run(state, constants, activations, bindings,
threads)` (bindings: the table of input and output pointers, module.py): it
zeroes the threads' synchronisation words (threads.py), publishes the job, runs
the program as thread 0, closes the run to workers that have not joined it yet,
waits for those that have, and returns 0 or the status of a thread that failed.
A worker joins a run by counting itself in the join word (the run's generation
and the count of workers in it, or CLOSED), so a worker that wakes late, after
thread 0 has done the work without it, is not waited for: it finds the run
closed and waits for the next (threads.py says why nothing waits for a thread
that is not on a core). A worker waits
for a new job by spinning (x86 `pause`), then yielding the core (threads.back_off),
so back-to-back runs start within a microsecond, then by sleeping until the next
job, so an idle pool costs no CPU: on Linux in the kernel (a futex on the
generation word, woken by the run that publishes a job, so the first run after
an idle spell waits microseconds, not a nap), elsewhere in growing naps.
`glowsdk_pool_stop(state)` makes every worker return.

The state, one cache line per field: the job generation (0 before the first
job), the count of workers done with it, the stop flag, the job (the three
pointers and the thread count), the failing statuses or-ed together, the
count of workers asleep on the futex (a run makes the wake-up call only when
there are any), and the join word.
"""
from __future__ import annotations

from llvmlite import ir

from .kinds import I8, I32, I64, PTR, i64
from .threads import SPINS, YIELDS, back_off, nap, wait_until

WORKER, RUN, STOP = "glowsdk_worker", "glowsdk_run", "glowsdk_pool_stop"
GENERATION, DONE, STOPPED, JOB, STATUS, SLEEPERS, JOINED = 0, 64, 128, 192, 256, 320, 384
POOL_BYTES = 448
"""Bytes of pool state the host allocates (zeroed, 64-byte aligned)."""
FUTEX_SYSCALL = {"x86_64": 202, "aarch64": 98, "riscv64": 98}
"""Linux's futex system call number per architecture (the first part of the target triple)."""
FUTEX_WAIT, FUTEX_WAKE = 128, 129
"""FUTEX_WAIT and FUTEX_WAKE on a process-private word."""
PARK_TIMEOUT_NS = 10_000_000
"""A parked worker looks again after this long even unwoken (a safety net, not the wake-up)."""
RUN_BITS, CLOSED = 8, 255
"""The join word: the run's generation (low 24 bits) shifted by RUN_BITS, plus the count of
workers that joined it, or CLOSED once thread 0 is done."""


def futex_number(triple: str) -> int | None:
    """The futex system call number for `triple`, or None where workers nap instead."""
    arch = triple.split("-", 1)[0]
    return FUTEX_SYSCALL.get(arch) if "linux" in triple else None


def add_pool(module: ir.Module, thread_entry: ir.Function, sync: tuple[int, int] | None) -> None:
    """Define the worker, run and stop entry points around `thread_entry` in `module`. `sync`: the
    offset and size of the threads' synchronisation words in the activations region, or None in a
    program that shares no kernel: its run is thread 0 of 1 and wakes no worker (a worker could
    only come and find nothing to do)."""
    _define_stop(module)
    _define_worker(module, thread_entry)
    if sync is None:
        _define_alone(module, thread_entry)
    else:
        _define_run(module, thread_entry, *sync)


def _syscall(builder: ir.IRBuilder, number: int, *arguments: ir.Value) -> None:
    module = builder.module
    function = module.globals.get("syscall") or ir.Function(module, ir.FunctionType(I64, [I64], var_arg=True),
                                                            "syscall")
    builder.call(function, [i64(number), *arguments])


def _park(builder: ir.IRBuilder, state: ir.Value, seen: ir.Value, tries: ir.Value) -> None:
    """Sleep until the generation moves on from `seen` (or PARK_TIMEOUT_NS pass): on a futex
    where the kernel has one (it sleeps only while the word still holds `seen`), else a nap."""
    number = futex_number(builder.module.triple)
    if number is None:
        nap(builder, tries)
        return
    timeout_type = ir.LiteralStructType([I64, I64])
    timeout = builder.module.globals.get("glowsdk_park_timeout")
    if timeout is None:
        timeout = ir.GlobalVariable(builder.module, timeout_type, "glowsdk_park_timeout")
        timeout.linkage, timeout.global_constant = "internal", True
        timeout.initializer = ir.Constant(timeout_type, [0, PARK_TIMEOUT_NS])
    sleepers = _field(builder, state, SLEEPERS)
    builder.atomic_rmw("add", sleepers, ir.Constant(I32, 1), "seq_cst")
    _syscall(builder, number, _field(builder, state, GENERATION), i64(FUTEX_WAIT), builder.zext(seen, I64),
             timeout, ir.Constant(PTR, None), i64(0))
    builder.atomic_rmw("sub", sleepers, ir.Constant(I32, 1), "seq_cst")


def _wake(builder: ir.IRBuilder, state: ir.Value) -> None:
    """Wake the workers asleep on the generation word, if any (after it moved on)."""
    number = futex_number(builder.module.triple)
    if number is None:
        return
    asleep = builder.load_atomic(_field(builder, state, SLEEPERS), "seq_cst", 4, typ=I32)
    with builder.if_then(builder.icmp_unsigned("!=", asleep, ir.Constant(I32, 0)), likely=False):
        _syscall(builder, number, _field(builder, state, GENERATION), i64(FUTEX_WAKE), i64(2 ** 31 - 1))


def _field(builder: ir.IRBuilder, state: ir.Value, offset: int) -> ir.Value:
    return builder.gep(state, [i64(offset)], inbounds=True, source_etype=I8) if offset else state


def _function(module: ir.Module, name: str, arguments: list[ir.Type], names: list[str]) -> ir.Function:
    function = ir.Function(module, ir.FunctionType(I32, arguments), name)
    function.attributes.add("nounwind")
    for arg, label in zip(function.args, names):
        arg.name = label
    return function


def _define_stop(module: ir.Module) -> None:
    function = _function(module, STOP, [PTR], ["state"])
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    state = function.args[0]
    builder.atomic_rmw("xchg", _field(builder, state, STOPPED), ir.Constant(I32, 1), "release")
    builder.atomic_rmw("add", _field(builder, state, GENERATION), ir.Constant(I32, 1), "seq_cst")
    _wake(builder, state)
    builder.ret(ir.Constant(I32, 0))


def _define_worker(module: ir.Module, thread_entry: ir.Function) -> None:
    """Loop: wait for the generation to move on, stop or run this thread's share, report done."""
    function = _function(module, WORKER, [PTR, I32], ["state", "index"])
    state, index = function.args
    entry = function.append_basic_block("entry")
    wait = function.append_basic_block("wait")
    idle = function.append_basic_block("idle")
    job = function.append_basic_block("job")
    stop = function.append_basic_block("stop")
    builder = ir.IRBuilder(entry)
    generation = _field(builder, state, GENERATION)
    builder.branch(wait)

    builder.position_at_end(wait)
    seen = builder.phi(I32, name="seen")
    seen.add_incoming(ir.Constant(I32, 0), entry)
    tries = builder.phi(I32, name="tries")
    tries.add_incoming(ir.Constant(I32, 0), entry)
    now = builder.load_atomic(generation, "acquire", 4, typ=I32)
    builder.cbranch(builder.icmp_unsigned("!=", now, seen), job, idle)

    builder.position_at_end(idle)
    with builder.if_else(builder.icmp_unsigned("<", tries, ir.Constant(I32, SPINS + YIELDS))) as (wait_more, park):
        with wait_more:
            back_off(builder, tries, nap=False)
        with park:
            _park(builder, state, seen, tries)
    seen.add_incoming(seen, builder.block)
    tries.add_incoming(builder.add(tries, ir.Constant(I32, 1)), builder.block)
    builder.branch(wait)

    builder.position_at_end(job)
    stopped = builder.load_atomic(_field(builder, state, STOPPED), "acquire", 4, typ=I32)
    work = function.append_basic_block("work")
    builder.cbranch(builder.icmp_unsigned("!=", stopped, ir.Constant(I32, 0)), stop, work)
    builder.position_at_end(work)
    with builder.if_then(_join(builder, state, now)):
        pointers = [builder.load(_field(builder, state, JOB + 8 * i), typ=PTR) for i in range(3)]
        threads = builder.load(_field(builder, state, JOB + 24), typ=I32)
        with builder.if_then(builder.icmp_unsigned("<", index, threads)):
            status = builder.call(thread_entry, [*pointers, index, threads])
            builder.atomic_rmw("or", _field(builder, state, STATUS), status, "monotonic")
        builder.atomic_rmw("add", _field(builder, state, DONE), ir.Constant(I32, 1), "release")
    seen.add_incoming(now, builder.block)
    tries.add_incoming(ir.Constant(I32, 0), builder.block)
    builder.branch(wait)

    builder.position_at_end(stop)
    builder.ret(ir.Constant(I32, 0))


def _define_alone(module: ir.Module, thread_entry: ir.Function) -> None:
    """`glowsdk_run` of a program that splits no kernel: thread 0 of 1 on the caller's thread."""
    function = _function(module, RUN, [PTR, PTR, PTR, PTR, I32],
                         ["state", "constants", "activations", "bindings", "threads"])
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    builder.ret(builder.call(thread_entry, [*function.args[1:4], ir.Constant(I32, 0), ir.Constant(I32, 1)]))


def _run_word(builder: ir.IRBuilder, generation: ir.Value) -> ir.Value:
    """The join word of run `generation` with nobody joined yet."""
    return builder.shl(generation, ir.Constant(I32, RUN_BITS))


def _join(builder: ir.IRBuilder, state: ir.Value, generation: ir.Value) -> ir.Value:
    """Count this worker into run `generation` unless thread 0 closed it: an i1, true if joined."""
    word = _field(builder, state, JOINED)
    function = builder.function
    head = function.append_basic_block("join.try")
    attempt = function.append_basic_block("join.attempt")
    done = function.append_basic_block("join.done")
    builder.branch(head)
    builder.position_at_end(head)
    current = builder.load_atomic(word, "acquire", 4, typ=I32)
    same_run = builder.icmp_unsigned("==", builder.lshr(current, ir.Constant(I32, RUN_BITS)),
                                     builder.and_(generation, ir.Constant(I32, (1 << (32 - RUN_BITS)) - 1)))
    open_ = builder.icmp_unsigned("!=", builder.and_(current, ir.Constant(I32, CLOSED)), ir.Constant(I32, CLOSED))
    builder.cbranch(builder.and_(same_run, open_), attempt, done)
    builder.position_at_end(attempt)
    swapped = builder.extract_value(builder.cmpxchg(word, current, builder.add(current, ir.Constant(I32, 1)),
                                                    "acq_rel", "acquire"), 1)
    builder.cbranch(swapped, done, head)
    builder.position_at_end(done)
    joined = builder.phi(ir.IntType(1), name="joined")
    joined.add_incoming(ir.Constant(ir.IntType(1), 0), head)
    joined.add_incoming(ir.Constant(ir.IntType(1), 1), attempt)
    return joined


def _define_run(module: ir.Module, thread_entry: ir.Function, sync_offset: int, sync_size: int) -> None:
    """Zero the synchronisation words, publish the job, run as thread 0, close the run and wait for
    the workers that joined it; the first failing status (0 if none)."""
    function = _function(module, RUN, [PTR, PTR, PTR, PTR, I32],
                         ["state", "constants", "activations", "bindings", "threads"])
    state, *pointers, threads = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    memset = module.declare_intrinsic("llvm.memset", [PTR, I64])
    sync = builder.gep(pointers[1], [i64(sync_offset)], inbounds=True, source_etype=I8)
    builder.call(memset, [sync, ir.Constant(I8, 0), i64(sync_size), ir.Constant(ir.IntType(1), 0)])
    for i, pointer in enumerate(pointers):
        builder.store(pointer, _field(builder, state, JOB + 8 * i))
    builder.store(threads, _field(builder, state, JOB + 24))
    done = _field(builder, state, DONE)
    builder.atomic_rmw("xchg", done, ir.Constant(I32, 0), "monotonic")
    builder.atomic_rmw("xchg", _field(builder, state, STATUS), ir.Constant(I32, 0), "monotonic")
    generation = builder.add(builder.load_atomic(_field(builder, state, GENERATION), "monotonic", 4, typ=I32),
                             ir.Constant(I32, 1))
    joined = _field(builder, state, JOINED)
    builder.atomic_rmw("xchg", joined, _run_word(builder, generation), "release")
    builder.atomic_rmw("xchg", _field(builder, state, GENERATION), generation, "seq_cst")
    _wake(builder, state)
    own = builder.call(thread_entry, [*pointers, ir.Constant(I32, 0), threads])
    closed = builder.or_(_run_word(builder, generation), ir.Constant(I32, CLOSED))
    workers = builder.and_(builder.atomic_rmw("xchg", joined, closed, "acq_rel"), ir.Constant(I32, CLOSED))
    wait_until(builder, lambda: builder.icmp_unsigned(
        ">=", builder.load_atomic(done, "acquire", 4, typ=I32), workers), nap=True, name="join")
    failed = builder.load_atomic(_field(builder, state, STATUS), "acquire", 4, typ=I32)
    builder.ret(builder.or_(own, failed))
