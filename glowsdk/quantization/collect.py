"""Collecting a profile: compile the instrumented network once, run every calibration sample (paper 4.2)."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import numpy as np

from ..backends.registry import get_backend
from ..compiler.backend import CompileOptions
from ..compiler.pipeline import compile_function
from ..errors import GlowError
from ..graph.function import Function
from ..graph.node import NodeValue
from .histogram import DEFAULT_BINS
from .instrument import instrument_for_profiling
from .profile import Profile, ValueProfile

ProgressHook = Callable[[int, int], None]  # (samples done, samples in all, or 0 if unknown)


def collect_profile(network, calibration_inputs: Iterable[Mapping[str, np.ndarray]], target: str = "interpreter",
                    progress: ProgressHook | None = None, *, bins: int = DEFAULT_BINS,
                    model_info: Mapping[str, Any] | None = None) -> Profile:
    """The profile of `network`'s lowered graph on `target` over all `calibration_inputs`.

    Each sample maps every input name to an array. The network's float inputs
    are profiled from the samples, every other value from the instrumented
    outputs. `model_info` adds keys (load options, say) to the profile's `model`.
    A `CalibrationSet` describes itself in the profile; other iterables are
    described as given by the caller.
    """
    saved: dict[str, NodeValue] = {}

    def instrument(function: Function) -> None:
        saved.update(instrument_for_profiling(function))

    compiled = compile_function(network.function, get_backend(target), CompileOptions(), instrument=instrument)
    describe = getattr(calibration_inputs, "describe", None)
    calibration = describe() if describe else {"count": 0, "how": "inputs given by the caller"}
    profile = Profile(model={"source": network.source, "target": target, **(model_info or {})},
                      calibration=calibration, bins=bins)
    inputs = [info for info in compiled.inputs if info.type.elem.is_float]
    for info in inputs:
        profile.values[info.name] = ValueProfile(info.name, "Placeholder", info.type.elem.value, info.shape, bins)
    for value in saved.values():
        profile.values[value.name] = ValueProfile(value.name, value.node.kind, value.type.elem.value,
                                                  value.type.shape, bins)
    total = len(calibration_inputs) if hasattr(calibration_inputs, "__len__") else 0
    done = 0
    for sample in calibration_inputs:
        outputs = compiled.execute(sample)  # checks the sample's names, shapes and kinds
        for info in inputs:
            profile.values[info.name].add(np.asarray(sample[info.name], dtype=info.type.dtype))
        for output, value in saved.items():
            profile.values[value.name].add(outputs[output])
        done += 1
        if progress is not None:
            progress(done, total)
    if done == 0:
        raise GlowError("no calibration samples: a profile needs at least one")
    profile.calibration["count"] = done
    return profile
