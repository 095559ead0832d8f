"""Per-step cycle counters compiled into a module (the `profile` option).

With profiling on, thread 0 reads the CPU's cycle counter (llvm.readcyclecounter:
the TSC on x86) before each step's kernel and after the barrier that ends it,
and adds the difference to the step's counter, so a step is charged for its
slowest thread. The counters are a zeroed module global; the module exports
`glowsdk_profile_counters()` (their address) and `glowsdk_cycles()` (the
counter now, so the host can convert cycles to seconds). The host reads them
through cpu/profile.py.
"""
from __future__ import annotations

from llvmlite import ir

from .kinds import I32, I64, PTR, i64

COUNTERS, CYCLES = "glowsdk_profile_counters", "glowsdk_cycles"


class StepCounters:
    """`count` i64 counters in `module` and the code that charges a step to one of them."""

    def __init__(self, module: ir.Module, count: int) -> None:
        array = ir.ArrayType(I64, count)
        self._global = ir.GlobalVariable(module, array, "glowsdk.profile")
        self._global.linkage = "internal"
        self._global.initializer = ir.Constant(array, [0] * count)
        self._clock = module.declare_intrinsic("llvm.readcyclecounter", fnty=ir.FunctionType(I64, []))
        for name, returns, body in ((COUNTERS, PTR, self._address), (CYCLES, I64, self.now)):
            function = ir.Function(module, ir.FunctionType(returns, []), name)
            function.attributes.add("nounwind")
            builder = ir.IRBuilder(function.append_basic_block("entry"))
            builder.ret(body(builder))

    def _address(self, builder: ir.IRBuilder) -> ir.Value:
        """The counters as a plain pointer (llvmlite types a global's address as a pointer to
        its array, which it will not store an i64 through)."""
        return builder.inttoptr(builder.ptrtoint(self._global, I64), PTR)

    def now(self, builder: ir.IRBuilder) -> ir.Value:
        return builder.call(self._clock, [])

    def charge(self, builder: ir.IRBuilder, index: int, start: ir.Value, thread: ir.Value) -> None:
        """On thread 0, add the cycles since `start` to counter `index`."""
        with builder.if_then(builder.icmp_unsigned("==", thread, ir.Constant(I32, 0))):
            slot = builder.gep(self._address(builder), [i64(index)], inbounds=True, source_etype=I64)
            elapsed = builder.sub(self.now(builder), start)
            builder.store(builder.add(builder.load(slot, typ=I64), elapsed), slot)
