"""Machine code for the host CPU with llvmlite: one object file, loaded by MCJIT (paper 5).

The target machine is the host's: its real CPU name and feature string, so
LLVM uses AVX-512 where the host has it, AVX2 or NEON elsewhere; nothing is
hard-coded. The module is optimised with LLVM's O3 pipeline (loop and SLP
vectorisation on) and emitted once as a position-independent object file: the
JIT links that object into this process, the compile cache stores it, and an
AOT bundle ships it, so all three run the same code. Every function the object
exports is called through ctypes with a prototype read from the module's own
declaration of it.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from functools import lru_cache

import llvmlite.binding as llvm

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


def host_description() -> str:
    """The host's triple and CPU name, as the backend reports its device."""
    return f"{llvm.get_process_triple()} ({host_cpu()[0]})"


def optimise(module: llvm.ModuleRef, machine: llvm.TargetMachine) -> None:
    """Run LLVM's O3 module pipeline with loop and SLP vectorisation."""
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    tuning.loop_unrolling = True
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(module, builder)


def exported_signatures(module: llvm.ModuleRef) -> tuple[Signature, ...]:
    """The C signature of every function `module` defines with external linkage."""
    return tuple(_signature(f) for f in module.functions
                 if not f.is_declaration and f.linkage == llvm.Linkage.external)


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
    with `assembly`, also the host assembly of exactly that code (what --dump-asm shows)."""
    machine = host_machine()
    context = llvm.create_context()
    try:
        parsed = llvm.parse_assembly(llvm_ir, context)
        parsed.verify()
    except RuntimeError as err:
        context.close()
        raise UnsupportedError(f"cpu backend generated invalid LLVM IR: {str(err).splitlines()[0]}") from None
    exports = exported_signatures(parsed)
    optimise(parsed, machine)
    compiled = CompiledObject(machine.emit_object(parsed), exports,
                              machine.emit_assembly(parsed) if assembly else None)
    parsed.close()
    context.close()
    return compiled


class JitModule:
    """An object file linked into this process: `functions` by symbol, `entry` the one named
    `entry`; keeps the engine (and so the code) alive."""

    def __init__(self, object_code: bytes, exports: tuple[Signature, ...], entry: str) -> None:
        host_cpu()
        self._engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), host_machine(jit=True))
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
