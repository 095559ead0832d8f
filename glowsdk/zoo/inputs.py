"""Seeded random inputs for a network: what `glowsdk run` feeds to inputs not given, and
what calibration and conformance use when no data is provided."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..compiler.backend import TensorInfo
from ..graph.function import Module
from ..graph.types import ElemKind


def random_inputs(inputs: Module | Sequence[TensorInfo], seed: int) -> dict[str, np.ndarray]:
    """Seeded random values for a module's (or compiled function's) inputs, by name.

    Float inputs are standard normal; integers lie in [0, 10), booleans are fair
    coin flips, quantized inputs span their storage range.
    """
    if isinstance(inputs, Module):
        infos = [TensorInfo(p.name, p.type) for p in inputs.placeholders.values() if not p.is_output]
    else:
        infos = list(inputs)
    rng = np.random.default_rng(seed)
    feeds = {}
    for info in infos:
        elem, shape = info.type.elem, info.type.shape
        if elem.is_float:
            values = rng.standard_normal(shape)
        elif elem is ElemKind.BOOL:
            values = rng.random(shape) < 0.5
        elif elem.is_quantized:
            limits = np.iinfo(elem.dtype)
            values = rng.integers(limits.min, limits.max, shape, endpoint=True)
        else:
            values = rng.integers(0, 10, shape)
        feeds[info.name] = np.asarray(values).astype(elem.dtype)
    return feeds
