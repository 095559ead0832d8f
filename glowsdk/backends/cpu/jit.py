"""JIT compilation for the host CPU with llvmlite's MCJIT (paper 5).

The target machine is the host's: its real CPU name and feature string, so
LLVM uses AVX-512 where the host has it, AVX2 or NEON elsewhere; nothing is
hard-coded. The module is optimised with LLVM's O3 pipeline (loop and SLP
vectorisation on), then compiled to machine code in this process; the entry
point is called through ctypes with the three region pointers.
"""
from __future__ import annotations

import ctypes
from functools import lru_cache

import llvmlite.binding as llvm
from llvmlite import ir

from ...errors import UnsupportedError

EntryPoint = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
"""The C signature of the module's entry point."""


@lru_cache(maxsize=1)
def host_cpu() -> tuple[str, str]:
    """This CPU's name and feature string, as LLVM detects them."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def host_machine() -> llvm.TargetMachine:
    """A new target machine for this CPU with every feature it reports (an execution engine
    takes ownership of its machine, so each module gets its own)."""
    name, features = host_cpu()
    return llvm.Target.from_default_triple().create_target_machine(
        cpu=name, features=features, opt=3, reloc="default", codemodel="jitdefault", jit=True)


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


class JitModule:
    """A module compiled to machine code in this process; keeps the engine (and the code) alive."""

    def __init__(self, module: ir.Module, entry: str) -> None:
        machine = host_machine()
        try:
            parsed = llvm.parse_assembly(str(module))
            parsed.verify()
        except RuntimeError as err:
            raise UnsupportedError(f"cpu backend generated invalid LLVM IR: {str(err).splitlines()[0]}") from None
        optimise(parsed, machine)
        self.optimised_ir = str(parsed)
        self._engine = llvm.create_mcjit_compiler(parsed, machine)
        self._engine.finalize_object()
        self.entry = EntryPoint(self._engine.get_function_address(entry))

    def assembly(self) -> str:
        """The optimised module as host assembly."""
        return host_machine().emit_assembly(llvm.parse_assembly(self.optimised_ir))
