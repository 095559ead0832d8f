"""The compilation pipeline from an imported graph to a backend's compiled function (paper 3.6).

verify -> graph optimisation -> lowering (driven by the backend) -> post-lowering
optimisation -> quantization (when a profile is given) and its pipeline -> the
backend's target-specific transform -> the memory-minimising schedule -> compile. The input function is cloned first, so one imported network
can be compiled many times.
`on_stage(stage, function)` lets callers dump or count nodes between stages.
`instrument(function)` edits the lowered, optimised function in place right after
the post-lowering pipeline (and its "lowered" hook), before the backend's
transform; profiling adds its Saves there (glowsdk.quantization), so profiles
are keyed by the names of the lowered graph's values.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ..backends.base import Backend, CompiledFunction, CompileOptions, unsupported_nodes
from ..errors import GraphError, UnsupportedOpsError
from ..graph.function import Function
from .lowering import lower_function
from .passes import FLOAT_WEIGHTS, GRAPH_OPTIMIZATION, POST_LOWERING, QUANTIZATION, PassManager
from .schedule import schedule

if TYPE_CHECKING:
    from ..quantization.convert import QuantizationConfig

StageHook = Callable[[str, Function], None]
Instrument = Callable[[Function], None]
STAGES = ("imported", "optimized", "lowered", "quantized", "transformed", "scheduled")


def _optimised_quantized(function: Function, backend: Backend, manager: PassManager) -> Function:
    """An imported quantized model (QDQ pairs) after the quantization pipeline, if `backend` runs the result;
    else `function` as it is (a backend without integer Conv runs the float ops between the conversions)."""
    trial = function.module.clone().functions[function.name]
    manager.run(QUANTIZATION, trial)
    if not unsupported_nodes(trial, backend):
        return trial
    manager.run(FLOAT_WEIGHTS, function)
    return function


def compile_function(function: Function, backend: Backend, options: CompileOptions | None = None, *,
                     passes: PassManager | None = None, on_stage: StageHook | None = None,
                     verify_each: bool = False, instrument: Instrument | None = None,
                     quantization: QuantizationConfig | None = None) -> CompiledFunction:
    """Optimise, lower (and quantize, given a profile) and compile a copy of `function` for `backend`.

    The compiled function's `quantization_report` says what was quantized (None without a profile).
    """
    function.verify()
    function = function.module.clone().functions[function.name]
    hook = on_stage or (lambda stage, fn: None)
    manager = passes or PassManager()
    hook("imported", function)
    manager.run(GRAPH_OPTIMIZATION, function)
    hook("optimized", function)
    lower_function(function, backend, verify_each=verify_each, check_support=not backend.requires_quantization)
    manager.run(POST_LOWERING, function)
    hook("lowered", function)
    if instrument is not None:
        instrument(function)
        try:
            function.verify()
        except GraphError as err:
            raise GraphError(f"after instrumenting the lowered graph: {err}") from None
    quantization_report = None
    if quantization is not None:
        from ..quantization.convert import dequantize_accumulators, quantize_function

        quantization_report = quantize_function(function, quantization, backend)
        manager.run(QUANTIZATION, function)
        dequantize_accumulators(function, backend)
        hook("quantized", function)
    elif any(node.kind == "Dequantize" for node in function.nodes):
        function = _optimised_quantized(function, backend, manager)
        hook("quantized", function)
    if backend.requires_quantization:
        remaining = unsupported_nodes(function, backend)
        if remaining:
            why = "" if quantization is None else " (integer-only: these stay float after quantization)"
            raise UnsupportedOpsError({n.kind for n in remaining}, f"target '{backend.name}'{why}")
    if backend.transform_post_lowering(function):
        try:
            function.verify()
        except GraphError as err:
            raise GraphError(f"after {backend.name}'s post-lowering transform: {err}") from None
    hook("transformed", function)
    report = schedule(function)
    hook("scheduled", function)
    compiled = backend.compile(function, options or CompileOptions())
    compiled.schedule_report = report
    compiled.quantization_report = quantization_report
    return compiled
