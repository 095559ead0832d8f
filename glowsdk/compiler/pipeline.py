"""The compilation pipeline from an imported graph to a backend's compiled function (paper 3.6).

verify -> graph optimisation -> lowering (driven by the backend) -> post-lowering
optimisation -> quantization (when a profile is given) and its pipeline -> the
backend's target-specific transform -> the memory-minimising schedule -> compile. The input function is cloned first, so one imported network
can be compiled many times.
Called without stage hooks, instrumentation, quantization or passes of its own, the pipeline first asks
the backend for a compile of the imported function it kept (`Backend.load_compiled`, the cpu compile
cache), before doing any of that work, and tells it after a whole compile (`Backend.keep_compiled`).
`on_stage(stage, function)` lets callers dump or count nodes between stages.
`instrument(function)` edits the lowered, optimised function in place right after
the post-lowering pipeline (and its "lowered" hook), before the backend's
transform; profiling adds its Saves there (glowsdk.quantization), so profiles
are keyed by the names of the lowered graph's values. The quantize step is a
`Quantization` the caller passes in (glowsdk.quantization.QuantizationConfig, a
layer above), so the compiler runs it without importing it.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Protocol, Sequence

from ..errors import GraphError, UnsupportedOpsError
from ..graph.function import Function
from ..graph.node import Node
from ..progress import Progress
from .backend import Backend, CompiledFunction, CompileOptions, QuantizationReport, unsupported_nodes
from .lowering.driver import lower_function
from .partition.hetero import PartitionedFunction, compile_partitioned
from .partition.placement import FALLBACK, compute_nodes, place, supported_sides
from .passes import FLOAT_WEIGHTS, GRAPH_OPTIMIZATION, POST_LOWERING, QUANTIZATION, PassManager
from .schedule import schedule

StageHook = Callable[[str, Function], None]
Instrument = Callable[[Function], None]
STAGES = ("imported", "optimized", "lowered", "quantized", "transformed", "scheduled")


class Quantization(Protocol):
    """The pipeline's quantize step: converts the lowered, optimised float function in place into integer
    islands that `backend` runs, and runs `manager`'s QUANTIZATION pipeline over them."""

    def quantize(self, function: Function, backend: Backend, manager: PassManager) -> QuantizationReport: ...


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
                     quantization: Quantization | None = None,
                     fallbacks: Sequence[Backend] = ()) -> CompiledFunction:
    """Optimise, lower (and quantize, given a profile) and compile a copy of `function` for `backend`;
    or, called with none of the optional hooks or passes, what `backend.load_compiled` kept of it.

    Support is decided on the graph `backend` will see (lowered, constant-folded, quantized). Nodes it
    cannot run go to the first of `fallbacks` that runs them (a `PartitionedFunction` then runs the
    parts end to end); without fallbacks they are refused, named after the model's nodes.
    The compiled function's `quantization_report` says what was quantized (None without a profile).
    """
    options = options or CompileOptions()
    fallbacks = [f for f in fallbacks if f.name != backend.name]
    options = _check_options(backend, fallbacks, options)
    backend.compile_options = options
    reusable = passes is None and on_stage is None and instrument is None and quantization is None \
        and not verify_each
    with Progress(f"compiling for {backend.name}", None, "") as bar:
        if reusable:
            bar.label("looking for a kept compile")
            function.verify()
            kept = backend.load_compiled(function, options)
            if kept is not None:
                return kept
        bar.label("copying the graph")
        hook = _showing_steps(bar, backend, quantization is not None, on_stage or (lambda stage, fn: None))
        compiled = _compile(function, backend, options, passes or PassManager(), hook, verify_each, instrument,
                            quantization, fallbacks, on_stage)
    if reusable and not isinstance(compiled, PartitionedFunction):
        backend.keep_compiled(function, options, compiled)
    return compiled


def _showing_steps(bar: Progress, backend: Backend, quantizing: bool, hook: StageHook) -> StageHook:
    """`hook`, and the bar told which step comes next (the backend's code generation can take seconds)."""
    after = {"imported": "optimising", "optimized": "lowering",
             "lowered": "quantizing" if quantizing else f"{backend.name} transform",
             "quantized": f"{backend.name} transform", "transformed": "scheduling",
             "scheduled": f"{backend.name} code generation"}

    def on_stage(stage: str, function: Function) -> None:
        hook(stage, function)
        bar.step(after.get(stage, stage))

    return on_stage


def _compile(function: Function, backend: Backend, options: CompileOptions, manager: PassManager,
             hook: StageHook, verify_each: bool, instrument: Instrument | None,
             quantization: Quantization | None, fallbacks: list[Backend],
             on_stage: StageHook | None = None) -> CompiledFunction:
    """Prepare `function` and compile it whole, or in parts where `fallbacks` take what `backend` cannot run.
    A whole compile may release the lowered copy's constant data when no caller's hook (`on_stage`,
    `instrument`, `quantization`) saw that copy."""
    function, quantization_report = prepare_function(function, backend, manager=manager, hook=hook,
                                                     verify_each=verify_each, instrument=instrument,
                                                     quantization=quantization, partial=bool(fallbacks))
    sides = supported_sides(function, backend)
    unsupported = [n for n in compute_nodes(function) if sides[id(n)] == FALLBACK]
    if unsupported and not fallbacks:
        raise unsupported_error(unsupported, backend, quantized=quantization is not None)
    if unsupported:
        placement = place(function, backend, fallbacks[0])
        compiled = compile_partitioned(
            function, placement, backend, fallbacks,
            lambda part: _compile_prepared(part, backend, options, lambda stage, fn: None),
            lambda part, host: _compile_host_part(part, host, _options_for(host, options), manager))
    else:
        private = on_stage is None and instrument is None and quantization is None
        compiled = _compile_prepared(function, backend, replace(options, release_constants=private), hook)
    compiled.quantization_report = quantization_report
    return compiled


def prepare_function(function: Function, backend: Backend, *, manager: PassManager, hook: StageHook,
                     verify_each: bool = False, instrument: Instrument | None = None,
                     quantization: Quantization | None = None,
                     partial: bool = False) -> tuple[Function, QuantizationReport | None]:
    """A copy of `function` optimised, lowered for `backend` and quantized: the graph whose support counts.
    `partial` (a fallback device exists) lets alternative lowerings leave part of their result to it."""
    function.verify()
    function = function.module.clone().functions[function.name]
    hook("imported", function)
    manager.run(GRAPH_OPTIMIZATION, function)
    hook("optimized", function)
    lower_function(function, backend, verify_each=verify_each, check_support=False, partial=partial)
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
        quantization_report = quantization.quantize(function, backend, manager)
        hook("quantized", function)
    elif any(node.kind == "Dequantize" for node in function.nodes):
        function = _optimised_quantized(function, backend, manager)
        hook("quantized", function)
    return function, quantization_report


def _compile_prepared(function: Function, backend: Backend, options: CompileOptions,
                      hook: StageHook) -> CompiledFunction:
    """The backend's transform, the memory-minimising schedule and the backend's compile."""
    if backend.transform_post_lowering(function):
        try:
            function.verify()
        except GraphError as err:
            raise GraphError(f"after {backend.name}'s post-lowering transform: {err}") from None
    hook("transformed", function)
    report = schedule(function)
    hook("scheduled", function)
    compiled = backend.compile(function, options)
    compiled.schedule_report = report
    return compiled


def _check_options(backend: Backend, fallbacks: list[Backend], options: CompileOptions) -> CompileOptions:
    """Refuse option keys neither the target nor a fallback takes; the target's own share of them."""
    declared = [b.options for b in [backend, *fallbacks[:1]]]
    if not fallbacks or None in declared:
        backend.check_options(options.extra)
        return options
    unknown = sorted(set(options.extra) - set(declared[0]) - set(declared[1]))
    if unknown:
        backend.check_options({k: options.extra[k] for k in unknown})
    return CompileOptions(extra={k: v for k, v in options.extra.items() if k in declared[0]},
                          ir_passes=options.ir_passes)


def compile_host_part(part: Function, hosts: Sequence[Backend]) -> tuple[CompiledFunction, str]:
    """A host partition read back from a partitioned-model file, on the first of `hosts` that runs it."""
    for k, host in enumerate(hosts):
        try:
            work = part.module.clone().functions[part.name]
            return _compile_host_part(work, host, CompileOptions(), PassManager()), host.name
        except UnsupportedOpsError:
            if k == len(hosts) - 1:
                raise
    raise UnsupportedOpsError([], "no host backend")


def _compile_host_part(part: Function, host: Backend, options: CompileOptions, manager: PassManager) -> CompiledFunction:
    """A fallback part, already optimised, lowered and quantized for the target: lowered further for the
    host and compiled as it is (no second optimisation, so a quantized part computes the same integers)."""
    lower_function(part, host, check_support=True)
    manager.run(POST_LOWERING, part)
    return _compile_prepared(part, host, options, lambda stage, fn: None)


def _options_for(backend: Backend, options: CompileOptions) -> CompileOptions:
    """The options a fallback backend takes out of the target's (the ones it declares)."""
    if backend.options is None:
        return CompileOptions()
    return CompileOptions(extra={k: v for k, v in options.extra.items() if k in backend.options})


def unsupported_error(nodes: list[Node], backend: Backend, quantized: bool) -> UnsupportedOpsError:
    """The refusal, in the user's terms: the lowered kinds, then the model's nodes they came from."""
    why = " (integer-only: these stay float after quantization)" if backend.requires_quantization and quantized \
        else ""
    error = UnsupportedOpsError({n.kind for n in nodes}, f"target '{backend.name}'{why}")
    reasons = [backend.unsupported_reason(n) for n in nodes]
    limits = list(dict.fromkeys(r for r in reasons if r))
    origins = list(dict.fromkeys(str(n.origin) for n in nodes if n.origin is not None))
    detail = ""
    if limits:
        detail += "; " + "; ".join(limits[:4]) + (f"; and {len(limits) - 4} more" if len(limits) > 4 else "")
    if origins:
        detail += "; in model node(s) " + ", ".join(origins[:6]) + (
            f" and {len(origins) - 6} more" if len(origins) > 6 else "")
    error.args = (str(error) + detail + "; --fallback cpu runs them on the host",)
    return error
