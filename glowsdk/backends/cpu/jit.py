"""Machine code for the host CPU with llvmlite: object files, loaded by MCJIT (paper 5).

The target machine is the host's: its real CPU name and feature string, so
LLVM uses AVX-512 where the host has it, AVX2 or NEON elsewhere; nothing is
hard-coded. A module is optimised with LLVM's O3 pipeline (loop and SLP
vectorisation on) and emitted as a position-independent object file. A network's
module comes in parts (codegen/split.py), each compiled on a thread of its own,
all at once: the JIT links the objects into this process together, the compile
cache stores them, and an AOT bundle ships them, so all three run the same code.
Every function the objects export is called through ctypes with a prototype read
from the module's own declaration of it.

llvmlite serialises every call into LLVM behind one process-wide lock, so threads
compiling through it take turns. The heavy calls (parse, verify, optimise, emit)
touch only what the calling thread made for itself (its context, module, target
machine and pass builder), which LLVM lets threads use at once, so `_Unlocked` makes
those calls around the lock, through the same library; every other call goes
through llvmlite as usual. Where an llvmlite release does not expose its library that
way, `_Locked` makes the same calls through its public API and a module compiles whole.
"""
from __future__ import annotations

import ctypes
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import llvmlite.binding as llvm
from llvmlite.binding import ffi

from ...errors import UnsupportedError
from .image import Argument, Signature

C_TYPES: dict[str, tuple[str, type]] = {
    "void": ("void", type(None)),
    "ptr": ("void *", ctypes.c_void_p),
    "i8": ("int8_t", ctypes.c_int8),
    "i16": ("int16_t", ctypes.c_int16),
    "i32": ("int32_t", ctypes.c_int32),
    "i64": ("int64_t", ctypes.c_int64),
    "float": ("float", ctypes.c_float),
    "double": ("double", ctypes.c_double),
}
"""LLVM parameter types an entry point may use: their C spelling (bundle headers) and ctypes type."""
_CTYPES_BY_C = {c: t for c, t in C_TYPES.values()}


ISA_VARIABLE = "GLOWSDK_CPU_ISA"
"""Set to `avx2` to compile for this CPU without its AVX-512 and AMX features: the code an
AVX2-only host gets, tested and measured on an AVX-512 host (anything else, or unset: every feature)."""
_WIDER_THAN_AVX2 = ("+avx512", "+amx", "+evex512", "+avx10")


@lru_cache(maxsize=1)
def host_cpu() -> tuple[str, str]:
    """This CPU's name and feature string, as LLVM detects them (narrowed by GLOWSDK_CPU_ISA=avx2)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    features = llvm.get_host_cpu_features().flatten()
    if os.environ.get(ISA_VARIABLE, "").lower() == "avx2":
        features = ",".join("-" + f[1:] if f.startswith(_WIDER_THAN_AVX2) else f for f in features.split(","))
    return llvm.get_host_cpu_name(), features


def host_isa() -> str:
    """The widest x86 vector ISA the generated code uses (AVX-512, AVX2, AVX, SSE), else the CPU name."""
    features = set(host_cpu()[1].split(","))
    for feature, isa in (("+avx512f", "AVX-512"), ("+avx2", "AVX2"), ("+avx", "AVX"), ("+sse2", "SSE2")):
        if feature in features:
            return isa
    return host_cpu()[0]


def host_machine(jit: bool = False) -> llvm.TargetMachine:
    """A new target machine for this CPU with every feature it reports: position-independent code
    for object files, or the JIT's settings for an execution engine (which takes ownership of it)."""
    name, features = host_cpu()
    if "+avx512f" in features.split(","):
        # LLVM's tuning for AVX-512 CPUs vectorises loops 8 wide (256-bit) to dodge the clock
        # penalty of 512-bit code on early parts; our kernels' GEMMs are 16 wide anyway, and the
        # element-wise loops (polynomial Exp/Erf/Sigmoid) and depthwise planes run up to 1.7x
        # faster 16 wide on the untuned set's shapes.
        features += ",-prefer-256-bit"
    return llvm.Target.from_default_triple().create_target_machine(
        cpu=name, features=features, opt=3, reloc="default" if jit else "pic",
        codemodel="jitdefault" if jit else "default", jit=jit)


MAX_PARTS = 4
"""The most parts a module is compiled in at once (each part costs a fixed setup: a target machine,
a pass pipeline, an object file)."""
MOST_PARTS = 16
"""The most parts the compile_threads option may ask for: each is a thread with its own target machine
and module in memory at once."""
PART_MIN_CHARS = 150_000
"""Module text a part should hold for a split to pay (the default, `default_parts`): a part costs LLVM
about 5 ms however small, and 150 K characters about 0.1 s."""


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def default_parts(module_chars: int) -> int:
    """How many parts to compile a module of `module_chars` characters of text in: one per usable
    core, at most MAX_PARTS and at most one per PART_MIN_CHARS (a one-core host, or an llvmlite whose
    lock the parts cannot go around: the whole module)."""
    if not parallel_compiles():
        return 1
    return max(1, min(usable_cores(), MAX_PARTS, module_chars // PART_MIN_CHARS))


def host_description() -> str:
    """The host's triple and CPU name, as the backend reports its device."""
    return f"{llvm.get_process_triple()} ({host_cpu()[0]})"


def _invalid(complaint: object) -> UnsupportedError:
    """The one-line error for a module LLVM cannot parse or verify: its first complaint."""
    return UnsupportedError(f"cpu backend generated invalid LLVM IR: {str(complaint).splitlines()[0]}")


class _Locked:
    """The four calls a compile spends its time in, through llvmlite's public API (and so behind its
    lock: parts compiled at once take turns). What a compile uses when `_Unlocked` cannot be built."""

    def parse(self, text: bytes, context: llvm.context.ContextRef) -> llvm.ModuleRef:
        """The module in `text`, in `context`; UnsupportedError naming LLVM's first complaint."""
        try:
            module = llvm.parse_assembly(text.decode(), context)
        except RuntimeError as err:
            raise _invalid(err) from None
        try:
            module.verify()
        except RuntimeError as err:
            module.close()
            raise _invalid(err) from None
        return module

    def optimise(self, module: llvm.ModuleRef, machine: llvm.TargetMachine) -> None:
        """Run LLVM's O3 module pipeline with loop and SLP vectorisation."""
        builder = self._pass_builder(machine)
        self._run_passes(builder.getModulePassManager(), module, builder)

    def emit(self, module: llvm.ModuleRef, machine: llvm.TargetMachine, object_file: bool) -> bytes:
        """The object file (or with `object_file` false the assembly) of `module`."""
        return machine.emit_object(module) if object_file else machine.emit_assembly(module).encode()

    @staticmethod
    def _pass_builder(machine: llvm.TargetMachine) -> llvm.PassBuilder:
        tuning = llvm.create_pipeline_tuning_options(speed_level=3)
        tuning.loop_vectorization = True
        tuning.slp_vectorization = True
        tuning.loop_unrolling = True
        return llvm.create_pass_builder(machine, tuning)

    @staticmethod
    def _run_passes(manager: llvm.ModulePassManager, module: llvm.ModuleRef, builder: llvm.PassBuilder) -> None:
        manager.run(module, builder)


class _Unlocked(_Locked):
    """The same four calls without llvmlite's lock (see the module docstring): the same functions of
    the same library, with llvmlite's own prototypes. Building it fails (AttributeError, OSError)
    where an llvmlite release no longer exposes its library's path or these functions."""

    PARAMETERS = {"LLVMPY_ParseAssembly": ("LLVMContextRef", None, None),
                  "LLVMPY_VerifyModule": ("LLVMModuleRef", None),
                  "LLVMPY_RunNewModulePassManager": ("LLVMModulePassManagerRef", "LLVMModuleRef", "LLVMPassBuilderRef"),
                  "LLVMPY_TargetMachineEmitToMemory": ("LLVMTargetMachineRef", "LLVMModuleRef", None, None)}
    """Each function's parameters as this module calls it: llvmlite's handle type where it names one (None: any),
    checked against llvmlite's own prototype so that a release that reorders them falls back to `_Locked`."""

    def __init__(self) -> None:
        library = ctypes.CDLL(ffi.lib._name)  # llvmlite's library object mimics ctypes.CDLL, _name included
        self.functions = {}
        for name, parameters in self.PARAMETERS.items():
            function, locked = getattr(library, name), getattr(ffi.lib, name)
            if locked.argtypes is None or len(locked.argtypes) != len(parameters) or any(
                    handle is not None and given is not getattr(ffi, handle)
                    for given, handle in zip(locked.argtypes, parameters)):
                raise AttributeError(f"llvmlite's {name} takes other parameters than this module passes")
            function.argtypes, function.restype = locked.argtypes, locked.restype
            self.functions[name] = function

    def parse(self, text: bytes, context: llvm.context.ContextRef) -> llvm.ModuleRef:
        with ffi.OutputString() as message:
            module = llvm.ModuleRef(self.functions["LLVMPY_ParseAssembly"](context, text, message), context)
            if message:
                module.close()
                raise _invalid(message)
        with ffi.OutputString() as message:
            if self.functions["LLVMPY_VerifyModule"](module, message):
                module.close()
                raise _invalid(message)
        return module

    def _run_passes(self, manager: llvm.ModulePassManager, module: llvm.ModuleRef, builder: llvm.PassBuilder) -> None:
        self.functions["LLVMPY_RunNewModulePassManager"](manager, module, builder)

    def emit(self, module: llvm.ModuleRef, machine: llvm.TargetMachine, object_file: bool) -> bytes:
        with ffi.OutputString() as message:
            buffer = self.functions["LLVMPY_TargetMachineEmitToMemory"](machine, module, int(object_file), message)
            if not buffer:
                raise UnsupportedError(f"cpu backend: LLVM cannot emit the module: {message}")
        try:
            return ctypes.string_at(ffi.lib.LLVMPY_GetBufferStart(buffer), ffi.lib.LLVMPY_GetBufferSize(buffer))
        finally:
            ffi.lib.LLVMPY_DisposeMemoryBuffer(buffer)


@lru_cache(maxsize=1)
def llvm_calls() -> _Locked:
    """The calls compiles make: unlocked where this llvmlite allows it, else through its lock."""
    try:
        return _Unlocked()
    except (AttributeError, OSError):
        return _Locked()


def parallel_compiles() -> bool:
    """Whether parts of a module compile at once here (else they take turns behind llvmlite's lock)."""
    return isinstance(llvm_calls(), _Unlocked)


def exported_signatures(module: llvm.ModuleRef) -> tuple[Signature, ...]:
    """The C signature of every function `module` defines and exports: external linkage, default
    visibility (a hidden one only links the parts of a module together, split.py)."""
    return tuple(_signature(f) for f in module.functions
                 if not f.is_declaration and f.linkage == llvm.Linkage.external
                 and f.visibility == llvm.Visibility.default)


def _signature(function: llvm.ValueRef) -> Signature:
    symbol = function.name
    spelled = [str(function.global_value_type.get_function_return())] + [str(a.type) for a in function.arguments]
    unknown = [t for t in spelled if t not in C_TYPES]
    if unknown:
        raise UnsupportedError(f"cpu backend: entry point {symbol} uses LLVM type {unknown[0]}, "
                               f"which has no C spelling here ({', '.join(C_TYPES)})")
    arguments = tuple(Argument(a.name or f"arg{i}", C_TYPES[str(a.type)][0])
                      for i, a in enumerate(function.arguments))
    return Signature(symbol, C_TYPES[spelled[0]][0], arguments)


@dataclass(frozen=True)
class CompiledObject:
    """A module compiled for the host: its object file and the signatures of what it exports."""

    object_code: bytes
    exports: tuple[Signature, ...]
    assembly: str | None = None


def compile_object(llvm_ir: str, assembly: bool = False) -> CompiledObject:
    """Verify, optimise and emit the module `llvm_ir` (its text: printing a large llvmlite module
    takes seconds, so the caller prints it once) as a position-independent object file for the host;
    with `assembly`, also the host assembly of exactly that code (what --dump-asm shows). Any thread
    may call it, alongside others (the module docstring)."""
    machine = host_machine()
    calls = llvm_calls()
    context = llvm.create_context()
    try:
        parsed = calls.parse(llvm_ir.encode(), context)
        try:
            exports = exported_signatures(parsed)
            calls.optimise(parsed, machine)
            return CompiledObject(calls.emit(parsed, machine, True), exports,
                                  calls.emit(parsed, machine, False).decode() if assembly else None)
        finally:
            parsed.close()
    finally:
        context.close()


def compile_parts(parts: Sequence[str], assembly: bool = False) -> tuple[CompiledObject, ...]:
    """The object of each module text of `parts` (compile_object), in order, each compiled on a thread
    of its own, all at once (one part: on the caller's thread); the first failing part's error."""
    if len(parts) == 1:
        return (compile_object(parts[0], assembly),)
    with ThreadPoolExecutor(max_workers=len(parts), thread_name_prefix="glowsdk-llvm") as pool:
        return tuple(pool.map(lambda part: compile_object(part, assembly), parts))


class JitModule:
    """Object files linked into this process together (each resolving the symbols it uses from
    the others): `functions` by symbol, `entry` the one named `entry`; keeps the engine (and so the
    code) alive."""

    def __init__(self, objects: Sequence[bytes], exports: tuple[Signature, ...], entry: str) -> None:
        host_cpu()
        self._engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), host_machine(jit=True))
        for object_code in objects:
            self._engine.add_object_file(llvm.ObjectFileRef.from_data(object_code))
        self._engine.finalize_object()
        self.functions = {}
        for signature in exports:
            prototype = ctypes.CFUNCTYPE(_CTYPES_BY_C[signature.returns],
                                         *(_CTYPES_BY_C[a.c_type] for a in signature.arguments))
            self.functions[signature.symbol] = prototype(self._engine.get_function_address(signature.symbol))
        if entry not in self.functions:
            raise UnsupportedError(f"cpu backend: the object file exports no {entry}")
        self.entry = self.functions[entry]
