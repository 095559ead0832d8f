"""One LLVM module for a whole Program: an entry point calling one specialised kernel per step.

The entry point `glowsdk_main(ptr constants, ptr activations, ptr placeholders)`
takes the three regions the static allocator laid out. A weight's or an
activation's address is its region's base plus the constant byte offset the
allocator chose. An input or output is reached through a bindings table
instead, one pointer per placeholder in `placeholder_weights` order:
`glowsdk_main` fills it with the placeholder region's base plus each planned
offset, and the JIT (backend.py) fills it with the caller's input arrays and
the output arrays it returns, so a run copies no tensor in or out.
Each step (one instruction, or a stack of element-wise ones) becomes an internal
function of (activations, packed, one pointer per group of its operands,
thread, threads, slot, phase), named after its instructions so a dump reads like the IR, and
the entry point calls them in program order, passing each group's address
(sharing.py: steps that differ only in their operands' addresses share one
function). Every pointer argument is `noalias` (groups share no byte), which
lets LLVM vectorise and reorder a kernel's loops freely. Kernels return a status
(0, or 1 for a run-time error such as a Gather index out of range); the entry
point stops at the first failure. A kernel is printed as soon as it is built and its llvmlite
body dropped (`_printed`), so the module's objects never exist whole: `finish` returns the
module's text.

Threads (threads.py): `glowsdk_thread(constants, activations, bindings, thread,
threads)` is the same program run by thread `thread` of `threads`; a kernel that
splits its work and is worth splitting (threads.PARALLEL_MIN_US) is shared in
chunks the threads take, any other runs on thread 0 only (as thread 0 of 1). A
kernel's (thread, threads) say which share of its work a call computes; `slot` is
the thread making the call, whose per-thread scratch it uses (a thread may run
another's share, threads.py). A kernel may run in phases (`KernelContext.phases`): the
entry calls it once per phase, `phase` 0, 1, .., each call shared (or alone) like a kernel
of its own, so every thread has finished a phase before any starts the next: a GEMM
split by input channels sums the threads' partial products in its second phase.
`glowsdk_main` is thread 0 of 1; pool.py adds a persistent worker pool that runs
the thread entry on the caller's thread and every worker that joins (or, in a
program that shares no kernel, on the caller's alone). The entry's calls are
emitted by `finish`, once the number of shared kernels, and so the size of their
synchronisation words after the scratch area, is known. With the `profile`
option, counters.py charges each step's cycles to a counter.

Kernels may also add packed constants (weights re-laid out at compile time,
appended to the constants region as new weights, reached from the `packed`
argument: the address of the step's first one) and use scratch memory (one
area after the activations, shared by kernels since they run one after another).
`finish` then keeps in the constants region only the weights the code reads.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Hashable, Iterable, Sequence

import numpy as np
from llvmlite import ir

from ....compiler.ir.allocator import aligned
from ....compiler.ir.function import Instruction, Value, Weight, base_of
from ....compiler.ir.program import Program
from ....graph.types import ElemKind, Type
from ....names import fresh_name
from .kinds import I8, I32, I64, PTR, i64
from .counters import StepCounters
from .pool import add_pool
from .sharing import Anchor, Operands, distinct_operands, signature, step_operands
from .threads import (
    CHUNK_STATE_WORDS,
    MAX_THREADS,
    PARALLEL_MIN_US,
    SYNC_LINE,
    emit_shared,
    serial_nanoseconds,
    split,
    sync_bytes,
)

ENTRY = "glowsdk_main"
THREAD_ENTRY = "glowsdk_thread"
REGIONS = ("constants", "activations", "placeholders")
"""The entry point's arguments, in order."""
THREAD_ARGUMENTS = ("constants", "activations", "bindings")
"""The pointer arguments of the thread entry (then thread and threads, i32)."""
KERNEL_ARGUMENTS = ("activations", "packed")
"""A kernel's first pointer arguments (then one per operand group, thread, threads, slot and
phase): the activations region (its scratch area) and the step's first packed constant."""
KERNEL_COUNTS = ("thread", "threads", "slot", "phase")
"""A kernel's last arguments (i32): the share it computes (`thread` of `threads`), the thread
making the call, and the phase (KernelContext.phases)."""
SCRATCH_SLOT_GAP = 64
"""Unused bytes (a cache line) between two threads' scratch slots, which start on cache lines: no
aligned pair of lines (Intel's L2 prefetcher fetches lines in pairs) holds bytes of two slots.
Packed back to back, the depthwise kernel's 644-byte slots (a 7 x 7 plane) shared a line, and 2
threads ran mnasnet's 1152-channel depthwise layers no faster than 1."""


def placeholder_weights(program: Program) -> list[Weight]:
    """The inputs, then the outputs of `program`: the order of the bindings table."""
    weights = program.ir.weights.values()
    return [w for w in weights if w.role == "input"] + [w for w in weights if w.role == "output"]

STATUS_OK, STATUS_OUT_OF_RANGE = 0, 1


class KernelContext:
    """What a kernel builder sees: an IRBuilder inside the kernel's function, and operand addresses."""

    def __init__(self, owner: ModuleBuilder, function: ir.Function, operands: Operands) -> None:
        self.owner = owner
        self.module = owner.module
        self.function = function
        self._locals = ir.IRBuilder(function.append_basic_block("entry"))
        self._body = function.append_basic_block("body")
        self.builder = ir.IRBuilder(self._body)
        self._activations, self._packed = function.args[:2]
        self._operands = operands
        self._groups = function.args[len(KERNEL_ARGUMENTS):-len(KERNEL_COUNTS)]
        self.subroutines: list[ir.Function] = []
        """Functions of this kernel's own (`subroutine`), printed with it."""
        self.packing: list[tuple[_Packing, int]] = []
        """The packed constants this kernel reads and their constants-region offsets, in the order
        it asked for them."""
        self.thread, self.threads, self.slot, self._phase = function.args[-len(KERNEL_COUNTS):]
        self.parallel = False
        self.phase_count = 1
        self._scratch_used = 0
        self.position: Callable[[], ir.Value] | None = None
        """The flat index in the result of the element being computed, where a loop sets it (the
        element-wise kernel): per-channel constants of a scalar find their channel from it."""

    def share(self, count: int) -> tuple[ir.Value, ir.Value]:
        """This thread's [start, stop) of `count` independent work items; a kernel that asks
        runs on every thread (any other runs on thread 0 alone)."""
        self.parallel = True
        return split(self.builder, count, self.thread, self.threads)

    def phases(self, count: int) -> ir.Value:
        """The phase this call runs (i32, 0 to `count` - 1): the kernel is called `count` times, each
        call shared among the threads (or alone) like a kernel of its own, so all threads have
        finished a phase before any starts the next. Scratch memory keeps its contents between
        the phases of one run."""
        self.phase_count = count
        return self._phase

    def thread_scratch(self, nbytes: int) -> ir.Value:
        """A pointer to `nbytes` of scratch memory (64-byte aligned) of the thread making the
        call (its `slot`), this kernel's alone while it runs: per-thread planes or panels. The
        slots lie SCRATCH_SLOT_GAP apart, so threads writing their own share no cache line."""
        stride = aligned(nbytes, 64) + SCRATCH_SLOT_GAP
        base = self.scratch(MAX_THREADS * stride)
        return self.builder.gep(base, [self.builder.mul(self.builder.zext(self.slot, I64), i64(stride))],
                                inbounds=True, source_etype=I8)

    def address(self, value: Value) -> ir.Value:
        """A pointer to the first byte of `value`, an operand of the step (a weight, activation or view)."""
        group, offset = self._operands.place(value)
        base = self._groups[group]
        if offset == 0:
            return base
        return self.builder.gep(base, [i64(offset)], inbounds=True, source_etype=I8)

    def constant(self, weight: Weight, name: str, key: tuple[Hashable, ...],
                 pack: Callable[[np.ndarray], np.ndarray]) -> ir.Value:
        """A pointer to `pack(weight.value)`, a compile-time constant array (e.g. the weight packed
        into panels) made once per (weight, `name`, `key`) and appended to the constants region as
        a weight named `weight`.`name`. `weight` is an operand of the step, and `pack` depends on
        nothing but the array it is given and `key` (the step's shapes and attributes): a step
        sharing this kernel packs its own weight with it."""
        packing = _Packing(self._operands.index(weight), name, tuple(key), pack)
        _, offset = self.owner.packed(weight, packing)
        self.packing.append((packing, offset))
        return self.builder.gep(self._packed, [i64(offset - self.packing[0][1])], inbounds=True, source_etype=I8)

    def scratch(self, nbytes: int) -> ir.Value:
        """A pointer to `nbytes` of scratch memory in the activations region, this kernel's alone
        while it runs (64-byte aligned), after any it asked for before."""
        start = self._scratch_used
        self._scratch_used = aligned(start + nbytes, 64)
        offset = self.owner.scratch_offset(self._scratch_used) + start
        return self.builder.gep(self._activations, [i64(offset)], inbounds=True, source_etype=I8)

    def subroutine(self, name: str, arguments: Sequence[ir.Type]) -> ir.Function:
        """A new internal function of `arguments` returning nothing, for code the kernel calls from
        several places instead of copying it into each (noinline, so LLVM optimises it once). Its
        definition goes with the kernel's: the kernel's alone, shared with no other."""
        function = ir.Function(self.module, ir.FunctionType(ir.VoidType(), list(arguments)),
                               self.owner.unique(f"{self.function.name}.{name}"))
        function.linkage = "internal"
        function.attributes.add("noinline")
        function.attributes.add("nounwind")
        self.subroutines.append(function)
        return function

    def declare(self, name: str, signature: ir.FunctionType) -> ir.Function:
        """An intrinsic by its full mangled name (for vector overloads llvmlite cannot name)."""
        existing = self.module.globals.get(name)
        return existing if existing is not None else ir.Function(self.module, signature, name)

    def intrinsic(self, name: str, types: Sequence[ir.Type], signature: ir.FunctionType | None = None) -> ir.Function:
        """The LLVM intrinsic `name` overloaded on `types` (declared once per module; vector types
        too, which llvmlite cannot mangle); `signature` for those llvmlite cannot infer (it
        assumes one argument of the first type otherwise)."""
        if not any(isinstance(t, ir.VectorType) for t in types):
            return self.module.declare_intrinsic(name, list(types), signature)
        suffix = ".".join(f"v{t.count}{t.element.intrinsic_name}" if isinstance(t, ir.VectorType)
                          else t.intrinsic_name for t in types)
        return self.declare(f"{name}.{suffix}", signature or ir.FunctionType(types[0], [types[0]]))

    def table(self, name: str, element: ir.Type, values: Sequence[int | float]) -> ir.Value:
        """A constant global array holding `values`: compile-time facts looked up per index. Its
        initializer is kept as text: an llvmlite constant per element would live as long as the
        module (82,000 of them, 25 MB, in resnet50's im2col row and column tables)."""
        array = ir.ArrayType(element, len(values))
        global_ = ir.GlobalVariable(self.module, array, self.owner.unique(f"{self.function.name}.{name}"))
        global_.linkage = "internal"
        global_.global_constant = True
        if isinstance(element, ir.IntType) and element.width > 1:
            text = ", ".join(f"{element} {int(v)}" for v in values)  # what llvmlite prints, 20x sooner
        else:
            text = ", ".join(str(ir.Constant(element, v)) for v in values)
        global_.initializer = ir.FormattedConstant(array, f"[{text}]")
        return global_

    def local(self, type_: ir.Type, name: str = "acc") -> ir.Value:
        """A stack slot in the kernel's entry block: a value carried across loops (LLVM keeps it
        in a register after mem2reg)."""
        return self._locals.alloca(type_, name=name)

    def close(self) -> None:
        """End the kernel: return success from its last block, enter the body from its entry."""
        if not self.builder.block.is_terminated:
            self.builder.ret(ir.Constant(I32, STATUS_OK))
        self._locals.branch(self._body)

    def lookup(self, table: ir.Value, element: ir.Type, index: ir.Value) -> ir.Value:
        """`table[index]` for a table made by `table`."""
        pointer = self.builder.gep(table, [i64(0), index], inbounds=True, source_etype=table.value_type)
        return self.builder.load(pointer, typ=element)

    def fail_unless(self, ok: ir.Value, status: int = STATUS_OUT_OF_RANGE) -> None:
        """Return `status` from the kernel where `ok` is false."""
        with self.builder.if_then(self.builder.not_(ok), likely=False):
            self.builder.ret(ir.Constant(I32, status))


@dataclass(frozen=True)
class Step:
    """What one kernel computes: instructions run in program order (one, or a stack of
    element-wise ones), and the indices of those whose destination nobody reads afterwards,
    so a stacked loop need not store it."""

    instrs: tuple[Instruction, ...]
    unstored: frozenset[int] = frozenset()
    epilogue: tuple[Instruction, ...] | None = None
    """Element-wise instructions applied to a compute kernel's result as it is stored (None for
    a kernel that takes none)."""

    @property
    def name(self) -> str:
        first = self.instrs[0]
        if len(self.instrs) == 1:
            return f"{first.kind.lower()}.{first.name}"
        return f"stack{len(self.instrs)}.{first.name}"


def last_reads(steps: Sequence[Step]) -> list[tuple[Weight, ...]]:
    """Per step, the constant weights it reads that no later step reads: their data is needed no
    longer once its kernel is built (ModuleBuilder.release)."""
    last: dict[str, tuple[int, Weight]] = {}
    for index, step in enumerate(steps):
        for value in distinct_operands((*step.instrs, *(step.epilogue or ()))):
            weight = base_of(value)
            if isinstance(weight, Weight) and weight.role == "constant":
                last[weight.name] = (index, weight)
    finished: list[list[Weight]] = [[] for _ in steps]
    for index, weight in last.values():
        finished[index].append(weight)
    return [tuple(weights) for weights in finished]


PURE = frozenset({"getelementptr", "add", "sub", "mul", "shl", "lshr", "ashr", "and", "or", "xor", "udiv", "sdiv",
                  "zext", "sext", "trunc", "ptrtoint", "inttoptr", "bitcast", "select", "icmp"})
"""Instructions with no effect but their value: one nobody uses uses nothing either."""


def used_values(functions: Iterable[ir.Function]) -> set[int]:
    """The ids of the values (arguments included) some instruction of `functions` uses, not
    counting uses by a PURE instruction that is itself unused (transitively): what LLVM's
    dead-code elimination keeps. One walk back from the instructions that are not PURE (each PURE
    one visited once, when a live instruction first uses it): counting every use and then taking
    back those of dead instructions took twice as long (0.2 s of resnet50's compile)."""
    used: set[int] = set()
    live = [i for f in functions for block in f.blocks for i in block.instructions if i.opname not in PURE]
    reached: set[int] = set()
    while live:
        instruction = live.pop()
        operands = [v for v, _ in instruction.incomings] if isinstance(instruction, ir.PhiInstr) \
            else instruction.operands
        for operand in operands:
            used.add(id(operand))
            if isinstance(operand, ir.Instruction) and operand.opname in PURE and id(operand) not in reached:
                reached.add(id(operand))
                live.append(operand)
    return used


@dataclass(frozen=True)
class _Packing:
    """One packed constant a kernel reads: the operand (by position among the step's operands)
    whose data `pack` re-lays out, the name and key it is packed under (KernelContext.constant)."""

    operand: int
    name: str
    key: tuple[Hashable, ...]
    pack: Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class _Kernel:
    """A built kernel: its function, whether it splits its work among threads, the constants it
    packs and their byte offsets from the first (where it reads them from its `packed` argument),
    which of its operand groups it reads at all (a kernel that packs a filter never reads the
    original: the entry passes no address for it, and `finish` drops the weight), and its phases."""

    function: ir.Function
    parallel: bool
    packing: tuple[_Packing, ...]
    layout: tuple[int, ...]
    reads: tuple[bool, ...]
    phases: int = 1


@dataclass(frozen=True)
class _Call:
    """A step's kernel as the entry point calls it: the kernel, the anchors of its operand groups,
    the constants-region offset of its first packed constant, and whether its work is shared among
    threads."""

    kernel: _Kernel
    anchors: tuple[Anchor, ...]
    packed: tuple[str, int] | None
    shared: bool


KernelBuilder = Callable[[KernelContext, Step], None]
"""Emits the body of one step's kernel."""


class ModuleBuilder:
    """Builds the module of `program`: call `add_step` per step, then `finish`."""

    def __init__(self, program: Program, triple: str, data_layout: str, profile_steps: int = 0,
                 split_min_us: float = PARALLEL_MIN_US) -> None:
        """`profile_steps`: compile cycle counters for that many steps (counters.py), or none;
        `split_min_us`: split among threads only kernels estimated to take this long on one."""
        self.program = program
        self._split_min_ns = 1e3 * split_min_us
        self.module = ir.Module(name=program.ir.name)
        self.module.triple = triple
        self.module.data_layout = data_layout
        self.placeholders = placeholder_weights(program)
        self._names: set[str] = set()
        self._packed: dict[tuple, tuple[str, int]] = {}
        self._kernels: dict[Hashable, _Kernel] = {}
        self._relocations: dict[str, list[tuple[ir.Instruction, ir.Constant, int]]] = {}
        """Per constant weight, every pointer into it: the instruction, its constant offset, and
        how far into the weight it points."""
        self._scratch_base = aligned(program.plan.activation_bytes, 64)
        self.entry = self._function(THREAD_ENTRY, "external", THREAD_ARGUMENTS)
        self._builder = ir.IRBuilder(self.entry.append_basic_block("entry"))
        self._bindings = {w.name: self._builder.load(self._builder.gep(
            self.entry.args[2], [i64(index)], inbounds=True, source_etype=PTR), typ=PTR, name=f"{w.name}.at")
            for index, w in enumerate(self.placeholders)}
        self._status = self._builder.alloca(I32, name="status")
        self._builder.store(ir.Constant(I32, STATUS_OK), self._status)
        self._chunk_state = self._builder.alloca(I32, size=i64(CHUNK_STATE_WORDS), name="chunks")
        self.scratch_offset(0)
        self._counters = StepCounters(self.module, profile_steps) if profile_steps else None
        self._calls: list[_Call] = []
        self._unpacked: set[str] = set()
        """The constant weights some kernel reads as they are (not only packed)."""
        self.definitions: list[str] = []
        """Every kernel's definition, printed as soon as it was built (`_printed`)."""
        self._sites: dict[tuple[str, ...], ir.Function] = {}
        self.units: dict[str, list[str]] = {}
        """Per kernel, its function and the call sites the entry reaches it through (`_call_site`):
        what split.py may move to another part together."""
        self.sync_offset = self.sync_bytes = 0
        """Where the threads' synchronisation words are in the activations region, and their size
        (none in a program that shares no kernel); set by `finish`."""

    def packed(self, weight: Weight, packing: _Packing) -> tuple[str, int]:
        """The weight holding `weight` packed by `packing` and its constants-region byte offset (see
        KernelContext.constant). Packed weights come after every other and are all kept by
        `finish`, so the distances between them (where a kernel reads them) do not change."""
        key = (weight.name, packing.name, packing.key)
        if key not in self._packed:
            value = np.ascontiguousarray(packing.pack(weight.value))
            weight = self.program.ir.add_weight(f"{weight.name}.{packing.name}",
                                                Type(ElemKind.from_dtype(value.dtype), (value.size,)),
                                                "constant", value.reshape(-1))
            plan = self.program.plan
            offset = aligned(plan.constant_bytes, plan.alignment)
            plan.constant_offsets[weight.name] = offset
            plan.constant_bytes = offset + aligned(weight.type.nbytes, plan.alignment)
            self._packed[key] = (weight.name, offset)
        return self._packed[key]

    def relocate(self, weight: str, pointer: ir.Instruction, offset: ir.Constant) -> None:
        """Note that `pointer` addresses weight `weight` at constant byte offset `offset`, so that
        `_compact_constants` can drop the weight if nothing uses the pointer, or move the offset."""
        inside = offset.constant - self.program.plan.constant_offsets[weight]
        self._relocations.setdefault(weight, []).append((pointer, offset, inside))

    def _compact_constants(self) -> None:
        """Lay out again only the constant weights the code reads (and every packed one), and move
        every offset it uses to match. A kernel that packs a weight (a convolution's or matrix
        product's filter, re-laid out into panels) never reads the original: keeping the original
        too doubled resnet50's constants region to 205 MB."""
        plan = self.program.plan
        used = used_values(self.module.functions)
        packed = {name for name, _ in self._packed.values()}
        live = sorted((w for w in self.program.ir.weights.values() if w.role == "constant" and (
                       w.name in packed or any(id(p) in used for p, _, _ in self._relocations.get(w.name, ())))),
                      key=lambda w: plan.address(w)[1])
        offsets, end = {}, 0
        for weight in live:
            offsets[weight.name] = end
            end = aligned(end + weight.type.nbytes, plan.alignment)
        for name, uses in self._relocations.items():
            for _, value, inside in uses:
                value.constant = offsets.get(name, 0) + inside
        plan.constant_offsets, plan.constant_bytes = offsets, end

    def scratch_offset(self, nbytes: int) -> int:
        """The activations-region byte offset of the shared scratch area, grown to `nbytes`."""
        start = self._scratch_base
        plan = self.program.plan
        plan.activation_bytes = max(plan.activation_bytes, start + aligned(nbytes, 64))
        return start

    def unique(self, base: str) -> str:
        """A symbol name from `base` not used before in this module."""
        candidate = fresh_name(re.sub(r"[^A-Za-z0-9_.]", "_", base), self._names, separator=".")
        self._names.add(candidate)
        return candidate

    def _function(self, name: str, linkage: str, pointers: Sequence[str], slot: bool = False) -> ir.Function:
        """A function of the named noalias pointers, then (thread, threads), then with `slot` (a
        kernel) the thread making the call and the phase."""
        counts = list(KERNEL_COUNTS) if slot else ["thread", "threads"]
        signature = ir.FunctionType(I32, [PTR] * len(pointers) + [I32] * len(counts))
        function = ir.Function(self.module, signature, self.unique(name))
        function.linkage = linkage
        function.attributes.add("nounwind")
        for arg, pointer in zip(function.args, pointers):
            arg.name = pointer
            arg.add_attribute("noalias")
        for arg, label in zip(function.args[len(pointers):], counts):
            arg.name = label
        return function

    def add_step(self, step: Step, build: KernelBuilder) -> None:
        """A kernel for `step`, built by `build` (or the kernel of an earlier step with the same
        signature, sharing.py), called next by the entry point."""
        instrs = (*step.instrs, *(step.epilogue or ()))
        operands = step_operands(self.program.plan, step.instrs, step.epilogue)
        key = (build, signature(step.instrs, step.epilogue, step.unstored, operands))
        kernel = self._kernels.get(key)
        packed = self._packed_like(kernel, operands) if kernel is not None else False
        if packed is False:
            kernel, packed = self._build(step, build, operands)
            self._kernels.setdefault(key, kernel)
        shared = kernel.parallel and serial_nanoseconds(instrs) >= self._split_min_ns
        self._calls.append(_Call(kernel, operands.anchors, packed, shared))
        self._unpacked.update(anchor.buffer for anchor, reads in zip(operands.anchors, kernel.reads)
                              if reads and anchor.region == "constants")

    def release(self, weights: Iterable[Weight]) -> None:
        """Let go of the data of each of `weights` (constants no later step reads) that no kernel
        reads as it is: its packed forms are all made, so they alone hold it from now on (with the
        graph's copy released too, resnet50's folded filters give way to their panels one by one
        instead of both living until the constants region is made)."""
        for weight in weights:
            if weight.name not in self._unpacked:
                weight.value = None

    def _build(self, step: Step, build: KernelBuilder, operands: Operands) -> tuple[_Kernel, tuple[str, int] | None]:
        """A new kernel for `step`, and its first packed constant's (weight, offset), if it packs any."""
        groups: dict[int, str] = {}
        for value, (group, _) in zip(operands.values, operands.places):
            groups.setdefault(group, base_of(value).name)
        function = self._function(step.name, "internal", [*KERNEL_ARGUMENTS, *groups.values()], slot=True)
        function.attributes.add("noinline")
        context = KernelContext(self, function, operands)
        build(context, step)
        context.close()
        offsets = [offset for _, offset in context.packing]
        layout = tuple(offset - offsets[0] for offset in offsets)
        used = used_values([function])
        reads = tuple(id(group) in used for group in function.args[len(KERNEL_ARGUMENTS):-len(KERNEL_COUNTS)])
        kernel = _Kernel(function, context.parallel, tuple(p for p, _ in context.packing), layout, reads,
                         context.phase_count)
        self.definitions.append("\n".join(_printed(self.module, f) for f in (function, *context.subroutines)))
        self.units[function.name] = [function.name, *(f.name for f in context.subroutines)]
        return kernel, self._packed_like(kernel, operands)

    def _packed_like(self, kernel: _Kernel, operands: Operands) -> tuple[str, int] | None | bool:
        """For a step sharing `kernel`: its own weights packed as the kernel packs its step's, and
        the first (weight, offset), None where the kernel packs none, False where they do not lie
        at the kernel's distances from the first."""
        packed = [self.packed(operands.values[p.operand], p) for p in kernel.packing]
        if not packed:
            return None
        offsets = tuple(offset - packed[0][1] for _, offset in packed)
        return packed[0] if offsets == kernel.layout else False

    def _emit_calls(self) -> None:
        """The thread entry's body: every step's call in program order (shared kernels through
        threads.emit_shared, the others on thread 0), after laying out the synchronisation words."""
        builder, (thread, threads) = self._builder, self.entry.args[-2:]
        shared = sum(call.kernel.phases for call in self._calls if call.shared)
        plan = self.program.plan
        self.sync_offset = aligned(plan.activation_bytes, SYNC_LINE)
        self.sync_bytes = sync_bytes(shared) if shared else 0
        plan.activation_bytes = self.sync_offset + self.sync_bytes
        sync = builder.gep(self.entry.args[1], [i64(self.sync_offset)], inbounds=True, source_etype=I8)
        zero = ir.Constant(I32, 0)
        index = 0
        for number, call in enumerate(self._calls):
            started = self._counters.now(builder) if self._counters is not None else None

            def run(chunk: ir.Value, chunks: ir.Value, call: _Call = call, phase: int = 0, alone: bool = False) -> None:
                ok = builder.icmp_unsigned("==", builder.load(self._status), ir.Constant(I32, STATUS_OK))
                if alone:
                    ok = builder.and_(ok, builder.icmp_unsigned("==", thread, zero))
                with builder.if_then(ok):
                    packed = self._constant_at(*call.packed) if call.packed is not None else ir.Constant(PTR, None)
                    anchors = [self._anchor(anchor) if reads else ir.Constant(PTR, None)
                               for anchor, reads in zip(call.anchors, call.kernel.reads)]
                    slot = zero if alone else thread  # alone: thread 0, a constant its call site keeps (split.py)
                    arguments = [self.entry.args[1], packed, *anchors, chunk, chunks, slot, ir.Constant(I32, phase)]
                    builder.store(builder.call(self._call_site(call.kernel.function, arguments),
                                               [a for a in arguments if not isinstance(a, ir.Constant)]),
                                  self._status)

            for phase in range(call.kernel.phases):
                if call.shared:
                    emit_shared(builder, sync, index, thread, threads, self._chunk_state,
                                lambda chunk, chunks, phase=phase: run(chunk, chunks, phase=phase))
                    index += 1
                else:
                    run(zero, ir.Constant(I32, 1), phase=phase, alone=True)
            if self._counters is not None:
                self._counters.charge(builder, number, started, thread)

    def _call_site(self, kernel: ir.Function, arguments: Sequence[ir.Value]) -> ir.Function:
        """A function calling `kernel` with `arguments`, taking those that are not constants: the
        entry calls it instead of the kernel. LLVM inlines it where it lies beside the entry; in
        another part (split.py) it keeps the kernel's calls, with their constant arguments, in the
        kernel's module, so the kernel is specialised as in the whole module. Calls passing the
        same constants share one (a GRU's 50 steps call a few kernels hundreds of times)."""
        pattern = (kernel.name, *(str(a) if isinstance(a, ir.Constant) else str(a.type) for a in arguments))
        site = self._sites.get(pattern)
        if site is not None:
            return site
        variable = [a for a in arguments if not isinstance(a, ir.Constant)]
        site = ir.Function(self.module, ir.FunctionType(I32, [a.type for a in variable]),
                           self.unique(f"{kernel.name}.call"))
        site.linkage = "internal"
        site.attributes.add("nounwind")
        builder = ir.IRBuilder(site.append_basic_block("entry"))
        passed = iter(site.args)
        builder.ret(builder.call(kernel, [a if isinstance(a, ir.Constant) else next(passed) for a in arguments]))
        self.units[kernel.name].append(site.name)
        self._sites[pattern] = site
        return site

    def _anchor(self, anchor: Anchor) -> ir.Value:
        """The address of `anchor` in the thread entry: in its region (a constant's noted for
        `_compact_constants`), or in its placeholder's binding."""
        if anchor.region == "constants":
            return self._constant_at(anchor.buffer, anchor.offset)
        if anchor.region == "placeholders":
            base = self._bindings[anchor.buffer]
            offset = anchor.offset - self.program.plan.placeholder_offsets[anchor.buffer]
        else:
            base = self.entry.args[THREAD_ARGUMENTS.index(anchor.region)]
            offset = anchor.offset
        return self._builder.gep(base, [i64(offset)], inbounds=True, source_etype=I8) if offset else base

    def _constant_at(self, weight: str, offset: int) -> ir.Value:
        """A pointer `offset` bytes into the constants region, inside weight `weight`, in the thread entry."""
        value = ir.Constant(I64, offset)  # its own object, not i64's shared one: `relocate` moves it
        pointer = self._builder.gep(self.entry.args[0], [value], inbounds=True, source_etype=I8)
        self.relocate(weight, pointer, value)
        return pointer

    def finish(self) -> str:
        """Close the thread entry point, add `glowsdk_main` (thread 0 of 1, its bindings the
        planned offsets in the placeholder region) and the thread pool's entry points (pool.py),
        return the module's text: the module, then the kernels' definitions."""
        self._emit_calls()
        self._compact_constants()
        self._builder.ret(self._builder.load(self._status))
        main = ir.Function(self.module, ir.FunctionType(I32, [PTR] * len(REGIONS)), ENTRY)
        main.attributes.add("nounwind")
        for arg, region in zip(main.args, REGIONS):
            arg.name = region
            arg.add_attribute("noalias")
        builder = ir.IRBuilder(main.append_basic_block("entry"))
        table = builder.alloca(PTR, size=i64(max(1, len(self.placeholders))), name="bindings")
        offsets = self.program.plan.placeholder_offsets
        for index, weight in enumerate(self.placeholders):
            at = builder.gep(main.args[2], [i64(offsets[weight.name])], inbounds=True, source_etype=I8)
            builder.store(at, builder.gep(table, [i64(index)], inbounds=True, source_etype=PTR))
        builder.ret(builder.call(self.entry, [main.args[0], main.args[1], table, ir.Constant(I32, 0),
                                              ir.Constant(I32, 1)]))
        add_pool(self.module, self.entry, (self.sync_offset, self.sync_bytes) if self.sync_bytes else None)
        return "\n".join([str(self.module), *self.definitions])


def _printed(module: ir.Module, function: ir.Function) -> str:
    """The definition of `function`, which then leaves `module` and drops its body: the calls to it
    still name it. A module's llvmlite objects (about 1.5 KB an instruction with the strings that
    printing caches on each) would otherwise all live until the whole module is printed: 170 MB
    for resnet50's 73,000 instructions, most of which stayed resident after they were freed. The
    body's objects go as soon as nothing refers to them, without a cyclic collection: the lists
    of blocks, instructions and phi incomings and the blocks' terminators held the only cycles."""
    text = str(function)
    del module.globals[function.name]
    for block in function.blocks:
        for instruction in block.instructions:
            if isinstance(instruction, ir.PhiInstr):
                instruction.incomings.clear()
        block.instructions.clear()
        block.terminator = None
    function.blocks.clear()
    return text
