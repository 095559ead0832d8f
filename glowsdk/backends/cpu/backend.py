"""The LLVM CPU backend: the low-level IR program compiled to host machine code (paper 5).

Compiling builds the Program every IR backend builds (IRGen, IR optimisation,
static allocation), groups its instructions into steps (operator stacking),
emits one specialised kernel per step into one LLVM module, and compiles it (in
parts, one per core: codegen/split.py, jit.py) to
an image (image.py: object code plus memory layout) that the JIT links into
this process. With the `cache` option the image is looked up first in the
compile cache (cache.py) and stored there after a miss. Executing fills the
module's bindings table (codegen/module.py) and runs the thread entry (with more
than one thread, through a persistent pool of workers started at the first run,
parallel.py). The kernels read each input where the caller's array holds it and
write each output into the new array returned for it: no tensor is copied in or
out (a memory-bound network would otherwise spend as long copying as computing;
the 4M-float element-wise chain copied 16 MB in and 16 MB out around a 2 ms
kernel). Only an input that is not a C-contiguous array starting on an
INPLACE_ALIGNMENT boundary is first copied into its slot of the placeholder
region. The supported primitives are exactly the kernel table's kinds; the table's other kinds
(LayerNorm, Softmax, bilinear Resize) are kept unlowered where their kernel takes the node.
"""
from __future__ import annotations

import ctypes
import gc
import threading
from contextlib import contextmanager
from typing import Any, Iterator, Mapping

import numpy as np

from ...compiler.backend import Backend, CompiledFunction, CompileOptions, DeviceInfo, Flag, FlagKind
from ...compiler.ir.program import Program, build_program
from ...compiler.lowering.primitives import PRIMITIVES
from ...errors import GlowError, UnsupportedError
from ...files import write_text
from ...graph.function import Function
from ...graph.inputs import check_inputs, declared_inputs
from ...graph.node import Node, Placeholder
from . import bundle, heap
from .gate_filter import fold_gates
from .cache import CompileCache, cache_key, imported_key
from .codegen.module import ENTRY, THREAD_ENTRY, ModuleBuilder, Step, last_reads
from .codegen.split import split_module
from .codegen.threads import PARALLEL_MIN_US
from .image import CpuImage, aligned_bytes, constant_region
from .jit import MOST_PARTS, JitModule, compile_parts, default_parts, host_cpu, host_description, host_machine
from .kernels import KERNELS
from .parallel import ThreadPool, thread_count
from .profile import format_profile, profile_steps
from .stacking import plan_steps

OPTIONS = {
    "dump_llvm": "write the generated LLVM module (before optimisation) to this file",
    "dump_asm": "write the host assembly of the optimised module to this file",
    "stacking": "fuse runs of element-wise instructions into one loop (default true)",
    "threads": "run the heavy kernels on this many threads of this process (default 1, see parallel.py)",
    "pin_threads": "bind worker thread i to the i-th CPU the process may use (Linux; default true, parallel.py)",
    "split_min_us": "split among threads only kernels estimated to take this many microseconds on one "
                    f"(default {PARALLEL_MIN_US:g}; 0: every kernel that can split, codegen/threads.py)",
    "profile": "count each step's cycles (profile.py; compiles afresh instead of loading from the cache)",
    "cache": "look the compiled image up in the compile cache, store it there after a miss (default false)",
    "compile_threads": "optimise and emit the LLVM module in this many parts at once, a thread each (default: the "
                       "cores this process may use, at most 4, fewer for a small module; jit.default_parts)",
}
"""The backend-specific CompileOptions.extra keys the CPU backend understands."""

FLAGS = (
    Flag("--dump-llvm", "dump_llvm", "write the generated LLVM module to FILE", FlagKind.FILE, "FILE"),
    Flag("--dump-asm", "dump_asm", "write the host assembly of the optimised module to FILE", FlagKind.FILE, "FILE"),
    Flag("--threads", "threads", "run the heavy kernels on N threads of this process (default 1)", FlagKind.COUNT,
         "N", commands=("run", "compile", "partition")),
)
"""The options the `glowsdk` commands offer as flags of their own (`glowsdk compile --target cpu --threads 4`)."""

UNKEYED = frozenset({"dump_llvm", "dump_asm", "cache", "threads", "pin_threads", "compile_threads"})
"""Options that change no kernel's machine code, so the cache key leaves them out (an image compiled in
any number of parts runs the same kernels: a cached one is as good)."""
INPLACE_ALIGNMENT = 16
"""Byte boundary an input array must start on to be read in place: what numpy's allocations give,
and more than any kernel assumes (vector loads of inputs assume an element's alignment)."""


def data_address(array: np.ndarray) -> int:
    """Where `array`'s data starts. Through a ctypes view of its buffer where it is writable, not
    empty and of a numpy kind (bfloat16 exports no buffer): a third of the cost of
    `array.ctypes.data`, which builds Python objects (a run of a 0.15 ms network takes the
    address of every input and output)."""
    if array.flags.writeable and array.size and array.dtype.isbuiltin == 1:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    return array.ctypes.data


class CpuFunction(CompiledFunction):
    """A compiled image linked into this process; `execute` runs its entry point.

    `program`, `steps` and `llvm_ir` are what this compile built (None and empty
    for an image loaded from the cache); `from_cache` says which it was.
    """

    def __init__(self, function: Function, image: CpuImage, program: Program | None = None,
                 steps: tuple[Step, ...] = (), llvm_ir: str | None = None) -> None:
        super().__init__(function)
        # Detached copies: a placeholder's users reach the lowered graph's module, whose folded
        # constants (94 MB of resnet50's batch-norm-folded filters) would live as long as this.
        self._wanted = [Placeholder(p.name, p.type) for p in function.input_placeholders()]
        self._declared = declared_inputs(function)
        self.image = image
        self.program = program
        self.steps = steps
        self.llvm_ir = llvm_ir
        self.from_cache = program is None
        self.cache_key: str | None = None
        """The compile cache key it was stored or found under (None without the `cache` option)."""
        self.jit = JitModule(image.objects, image.exports, ENTRY)
        self._thread_entry = self.jit.functions[THREAD_ENTRY]
        self._constants = image.constants
        self._activations = aligned_bytes(image.activation_bytes)
        self._placeholders = aligned_bytes(image.placeholder_bytes)
        self._slots = {b.name: self._placeholders[b.offset:b.offset + b.type.nbytes].view(b.type.dtype)
                       .reshape(b.type.shape) for b in image.bindings if b.role == "input"}
        self._inputs = [(index, b.name) for index, b in enumerate(image.bindings) if b.role == "input"]
        self._outputs = [(index, b.name, b.type.shape, b.type.dtype) for index, b in enumerate(image.bindings)
                         if b.role == "output"]
        self._expected = [(p.name, p.type.shape, p.type.dtype) for p in self._wanted]
        self._wanted_names = frozenset(p.name for p in self._wanted)
        self._table = np.zeros(max(1, len(image.bindings)), np.uintp)
        self._in_place: dict[int, tuple[np.ndarray, int]] = {}
        self._pointers = (self._constants.ctypes.data, self._activations.ctypes.data, self._table.ctypes.data)
        self._lock = threading.Lock()
        self._pool: ThreadPool | None = None
        self.threads = 1
        self.pin_threads = True

    def close(self) -> None:
        """Stop the worker threads, if any run (they are stopped when this is collected too), and
        let go of the input arrays the last run read in place."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self._in_place.clear()

    def _checked(self, inputs: Mapping[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        """`inputs` as they are when they are exactly the wanted ones, each an array of its shape and
        kind (the usual call, checked in a few attribute reads: a network of a fraction of a
        millisecond would feel more), else what check_inputs makes of them (converted, or refused)."""
        if inputs.keys() != self._wanted_names:
            return check_inputs(self._wanted, self._declared, inputs)
        for name, shape, dtype in self._expected:
            array = inputs[name]
            if type(array) is not np.ndarray or array.shape != shape or array.dtype != dtype:
                return check_inputs(self._wanted, self._declared, inputs)
        return inputs

    def _input_address(self, index: int, name: str, array: np.ndarray | None) -> int:
        """Where the kernels read input `name`: in the caller's array, or in its slot of the
        placeholder region, copied there when the array is not C-contiguous and aligned. An array
        read in place is remembered with its address until the next run, which binds the same
        array (a caller reusing its input buffer) without looking again; the reference also keeps
        numpy from resizing it meanwhile."""
        seen, address = self._in_place.get(index, (None, 0))
        if array is not None and array is seen:
            return address
        self._in_place.pop(index, None)
        if array is not None and array.flags.c_contiguous:
            address = data_address(array)
            if address % INPLACE_ALIGNMENT == 0:
                self._in_place[index] = (array, address)
                return address
        slot = self._slots[name]
        if array is not None:
            np.copyto(slot, array)
        return slot.ctypes.data

    def execute(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        checked = self._checked(inputs)
        outputs = {name: np.empty(shape, dtype) for _, name, shape, dtype in self._outputs}
        with self._lock:
            table = self._table
            for index, name in self._inputs:
                table[index] = self._input_address(index, name, checked.get(name))
            for index, name, _, _ in self._outputs:
                table[index] = data_address(outputs[name])
            if self.threads == 1:
                status = self._thread_entry(*self._pointers, 0, 1)
            else:
                if self._pool is None or self._pool.threads != self.threads:
                    if self._pool is not None:
                        self._pool.close()
                    self._pool = ThreadPool(self.jit, self.threads, self.pin_threads)
                status = self._pool.run(*self._pointers)
        if status:
            raise GlowError("cpu backend: a Gather index is outside its axis")
        return outputs

    def write_bundle(self, folder: str, source: str) -> list[str]:
        return bundle.write_bundle(self, folder, source)

    def profile_kernels(self, inputs: Mapping[str, np.ndarray], runs: int) -> tuple[str, list[dict[str, Any]]]:
        times = profile_steps(self, inputs, runs)
        return format_profile(times), [t.as_dict() for t in times]


def fused_kernel(node: Node) -> bool:
    """Whether `node` is a kind that is no primitive but has a kernel of its own in the table, and
    the kernel takes it (its element kinds, its `accepts` rule)."""
    record = KERNELS.get(node.kind)
    if record is None or node.kind in PRIMITIVES:
        return False
    kinds = [t.elem for t in node.types] + [v.type.elem for v in node.present_inputs()]
    return all(kind in record.elems for kind in kinds) and record.supports(node)


class CpuBackend(Backend):
    """Compiles to host machine code with LLVM; runs what the kernel table covers."""

    name = "cpu"
    compile_cache = True
    profiles_kernels = True
    options = OPTIONS
    flags = FLAGS
    primitives = {kind: record.elems for kind, record in KERNELS.items() if kind in PRIMITIVES}
    _imported: tuple[Function, str, CompileCache] | None = None
    """The imported function `load_compiled` missed, its key and the cache asked, until `keep_compiled`."""

    def is_op_supported(self, node: Node) -> bool:
        return fused_kernel(node) or (super().is_op_supported(node) and KERNELS[node.kind].supports(node))

    def should_lower(self, node: Node) -> bool:
        """A high-level node the kernel table computes in one kernel (a LayerNorm, a Softmax:
        kernels/normalize.py; a bilinear Resize: kernels/resize.py) is kept; every other one is lowered."""
        return not fused_kernel(node)

    def transform_post_lowering(self, function: Function) -> bool:
        """Squeeze-and-excitation gates fold into the filter of the 1x1 convolution after them (gate_filter.py)."""
        return fold_gates(function)

    def device_info(self) -> DeviceInfo:
        # one core's measured order of magnitude (resnet50 runs at ~70 GMAC/s a thread); on the host, so no link
        return DeviceInfo(memory_bytes=0, description=f"host CPU, LLVM JIT for {host_description()}",
                          macs_per_second=5e10, bytes_per_second=2e10,
                          link_bytes_per_second=float("inf"), launch_seconds=0.0)

    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        return _configured(self._compile(function, options), options)

    def load_compiled(self, function: Function, options: CompileOptions) -> CompiledFunction | None:
        """With the `cache` option, the entry compiled from the imported `function` (cache.py's `.glowkey`
        records): loaded without optimising, lowering or building the IR."""
        self._imported = None
        if not options.extra.get("cache") or _dumps(options):
            return None
        _settings(options)
        cache = CompileCache()
        key = imported_key(function, _keyed(options))
        found = cache.load_imported(key)
        if found is not None:
            compiled = CpuFunction(function, found[1])
            compiled.cache_key = found[0]
            return _configured(compiled, options)
        self._imported = (function, key, cache)
        return None

    def keep_compiled(self, function: Function, options: CompileOptions, compiled: CompiledFunction) -> None:
        imported = getattr(self, "_imported", None)
        self._imported = None
        if imported is not None and imported[0] is function and isinstance(compiled, CpuFunction) \
                and compiled.cache_key is not None:
            imported[2].store_imported(imported[1], compiled.cache_key)

    def _compile(self, function: Function, options: CompileOptions) -> CpuFunction:
        _settings(options)
        if not options.extra.get("cache"):
            return compile_fresh(function, options)
        cache = self._imported[2] if self._imported is not None else CompileCache()  # one warning a compile
        key = cache_key(function, _keyed(options))
        image = None if _dumps(options) else cache.load(key)  # a compile asked to dump or profile builds it
        if image is not None:
            compiled = CpuFunction(function, image)
        else:
            compiled = compile_fresh(function, options)
            cache.store(key, compiled.image)
        compiled.cache_key = key
        return compiled


def _keyed(options: CompileOptions) -> dict[str, Any]:
    """The options that change the machine code (what the cache keys)."""
    return {k: v for k, v in options.extra.items() if k not in UNKEYED}


def _dumps(options: CompileOptions) -> bool:
    """Whether the compile is asked to dump or profile what it builds (so it builds it, never loads it)."""
    passes = options.ir_passes
    return any(options.extra.get(k) for k in ("dump_llvm", "dump_asm", "profile")) or (
        passes is not None and bool(passes.dump_before or passes.dump_after))


def _settings(options: CompileOptions) -> tuple[int, bool]:
    """The run's thread count and pinning, once every option is checked (a bad one refused in one line)."""
    unknown = set(options.extra) - set(OPTIONS)
    if unknown:
        raise UnsupportedError(f"the cpu backend takes no option(s) {', '.join(sorted(unknown))}; "
                               f"it takes {', '.join(OPTIONS)}")
    threads = thread_count(options.extra.get("threads", 1))
    split_min_us = options.extra.get("split_min_us", PARALLEL_MIN_US)
    if isinstance(split_min_us, bool) or not isinstance(split_min_us, (int, float)) or not split_min_us >= 0:
        raise UnsupportedError(f"the cpu backend's split_min_us option must be a number of microseconds, "
                               f"at least 0, got {split_min_us!r}")
    parts = options.extra.get("compile_threads")
    if parts is not None and (isinstance(parts, bool) or not isinstance(parts, int) or not 1 <= parts <= MOST_PARTS):
        raise UnsupportedError(f"the cpu backend's compile_threads option must be a whole number from 1 to "
                               f"{MOST_PARTS}, got {parts!r}")
    pin = options.extra.get("pin_threads", True)
    if not isinstance(pin, bool):
        raise UnsupportedError(f"the cpu backend's pin_threads option must be true or false, got {pin!r}")
    return threads, pin


def _configured(compiled: CpuFunction, options: CompileOptions) -> CpuFunction:
    compiled.threads, compiled.pin_threads = _settings(options)
    return compiled


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block. Building the LLVM module allocates
    millions of llvmlite objects, and the collector, counting allocations, scans the live ones
    again and again (resnet50: 5 full collections, 0.15-0.2 CPU s) for garbage that is freed
    without it (each kernel's body is taken apart once printed, ModuleBuilder)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def compile_fresh(function: Function, options: CompileOptions) -> CpuFunction:
    """Compile `function` from scratch: program, steps, LLVM module, object code, image."""
    program = build_program(function, passes=options.ir_passes)
    if options.release_constants:
        function.module.release_constant_data()  # the program's weights hold the only copy from here
    steps = tuple(plan_steps(program, stacking=bool(options.extra.get("stacking", True))))
    machine = host_machine()
    with collector_paused():
        builder = ModuleBuilder(program, machine.triple, str(machine.target_data),
                                profile_steps=len(steps) if options.extra.get("profile") else 0,
                                split_min_us=options.extra.get("split_min_us", PARALLEL_MIN_US))
        for step, finished in zip(steps, last_reads(steps)):
            builder.add_step(step, KERNELS[step.instrs[0].kind].build)
            builder.release(finished)
        llvm_ir = builder.finish()
        units = tuple(builder.units.values())
        del builder
    if options.extra.get("dump_llvm"):
        write_text(options.extra["dump_llvm"], llvm_ir, "--dump-llvm")
    parts = split_module(llvm_ir, units, options.extra.get("compile_threads") or default_parts(len(llvm_ir)))
    # the constants first, not beside LLVM: its packed arrays are gone before LLVM's peak (resnet50
    # peaked at 406 MB instead of 373 with both at once, and two busy cores gain nothing from it)
    constants = constant_region(program)
    heap.trim()
    compiled = compile_parts(parts, assembly=bool(options.extra.get("dump_asm")))
    del parts
    heap.trim()
    if options.extra.get("dump_asm"):
        write_text(options.extra["dump_asm"], "\n".join(f"# part {index} of {len(compiled)}\n{part.assembly}"
                                                        for index, part in enumerate(compiled)), "--dump-asm")
    image = CpuImage.from_program(program, tuple(part.object_code for part in compiled),
                                  tuple(s for part in compiled for s in part.exports), machine.triple, host_cpu()[0],
                                  constants)
    return CpuFunction(function, image, program, steps, llvm_ir)

