"""One LLVM module for a whole Program: an entry point calling one specialised kernel per step.

The entry point `glowsdk_main(ptr constants, ptr activations, ptr placeholders)`
takes the three regions the static allocator laid out, and every operand's
address is its region's base plus the constant byte offset the allocator chose.
Each step (one instruction, or a stack of element-wise ones) becomes an internal
function of the same three pointers, named after its instructions so a dump
reads like the IR, and the entry point calls them in program order. Kernels
return a status (0, or 1 for a run-time error such as a Gather index out of
range); the entry point stops at the first failure and returns it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

from llvmlite import ir

from ....compiler.ir.function import Instruction, Value
from ....compiler.ir.program import Program
from ....names import fresh_name
from .kinds import I8, I32, PTR, i64

ENTRY = "glowsdk_main"
REGIONS = ("constants", "activations", "placeholders")
"""The entry point's arguments, in order."""

STATUS_OK, STATUS_OUT_OF_RANGE = 0, 1


class KernelContext:
    """What a kernel builder sees: an IRBuilder inside the kernel's function, and operand addresses."""

    def __init__(self, owner: ModuleBuilder, function: ir.Function) -> None:
        self.owner = owner
        self.module = owner.module
        self.function = function
        self._locals = ir.IRBuilder(function.append_basic_block("entry"))
        self._body = function.append_basic_block("body")
        self.builder = ir.IRBuilder(self._body)
        self._bases = dict(zip(REGIONS, function.args))

    def address(self, value: Value) -> ir.Value:
        """A pointer to the first byte of `value` (a weight, activation or view)."""
        region, offset = self.owner.program.plan.address(value)
        base = self._bases[region]
        if offset == 0:
            return base
        return self.builder.gep(base, [i64(offset)], inbounds=True, source_etype=I8)

    def intrinsic(self, name: str, types: Sequence[ir.Type], signature: ir.FunctionType | None = None) -> ir.Function:
        """The LLVM intrinsic `name` overloaded on `types` (declared once per module); `signature`
        for those llvmlite cannot infer (it assumes one argument of the first type otherwise)."""
        return self.module.declare_intrinsic(name, list(types), signature)

    def table(self, name: str, element: ir.Type, values: Sequence[int | float]) -> ir.Value:
        """A constant global array holding `values`: compile-time facts looked up per index."""
        array = ir.ArrayType(element, len(values))
        global_ = ir.GlobalVariable(self.module, array, self.owner.unique(f"{self.function.name}.{name}"))
        global_.linkage = "internal"
        global_.global_constant = True
        global_.initializer = ir.Constant(array, list(values))
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

    @property
    def name(self) -> str:
        first = self.instrs[0]
        if len(self.instrs) == 1:
            return f"{first.kind.lower()}.{first.name}"
        return f"stack{len(self.instrs)}.{first.name}"


KernelBuilder = Callable[[KernelContext, Step], None]
"""Emits the body of one step's kernel."""


class ModuleBuilder:
    """Builds the module of `program`: call `add_step` per step, then `finish`."""

    def __init__(self, program: Program, triple: str, data_layout: str) -> None:
        self.program = program
        self.module = ir.Module(name=program.ir.name)
        self.module.triple = triple
        self.module.data_layout = data_layout
        self._signature = ir.FunctionType(I32, [PTR] * len(REGIONS))
        self._names: set[str] = set()
        self.entry = self._function(ENTRY, linkage="external")
        self._builder = ir.IRBuilder(self.entry.append_basic_block("entry"))

    def unique(self, base: str) -> str:
        """A symbol name from `base` not used before in this module."""
        candidate = fresh_name(re.sub(r"[^A-Za-z0-9_.]", "_", base), self._names, separator=".")
        self._names.add(candidate)
        return candidate

    def _function(self, name: str, linkage: str) -> ir.Function:
        function = ir.Function(self.module, self._signature, self.unique(name))
        function.linkage = linkage
        function.attributes.add("nounwind")
        for arg, region in zip(function.args, REGIONS):
            arg.name = region
            arg.add_attribute("noalias")
        return function

    def add_step(self, step: Step, build: KernelBuilder) -> None:
        """A kernel for `step`, built by `build`, called next by the entry point."""
        function = self._function(step.name, linkage="internal")
        function.attributes.add("noinline")
        context = KernelContext(self, function)
        build(context, step)
        context.close()
        status = self._builder.call(function, list(self.entry.args))
        failed = self._builder.icmp_unsigned("!=", status, ir.Constant(I32, STATUS_OK))
        with self._builder.if_then(failed, likely=False):
            self._builder.ret(status)

    def finish(self) -> ir.Module:
        """Close the entry point and return the module."""
        self._builder.ret(ir.Constant(I32, STATUS_OK))
        return self.module
