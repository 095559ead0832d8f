"""Checking the arrays a caller binds to a function's inputs, so every backend (the compiler's contract,
compiler/backend.py) and the reference evaluator refuse bad input alike, in one line naming the input.
They live with the graph because the evaluator, below the compiler, checks inputs too."""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

from ..errors import InputError
from .function import Function
from .node import Placeholder


def check_input(placeholder: Placeholder, array: np.ndarray) -> np.ndarray:
    """`array` as the placeholder's dtype; InputError if its shape or kind does not fit."""
    expected = placeholder.type
    array = np.asarray(array)
    if array.shape != expected.shape:
        raise InputError(f"input '{placeholder.name}': expected shape {list(expected.shape)}, "
                         f"got {list(array.shape)}")
    if array.dtype != expected.dtype:
        same_family = array.dtype.kind == expected.dtype.kind or (
            array.dtype.kind in "fiu" and expected.dtype.kind in "fiu" and expected.elem.is_float)
        if not same_family:
            raise InputError(f"input '{placeholder.name}': expected {expected.elem.value}, got {array.dtype}")
        array = array.astype(expected.dtype)
    return array


def check_inputs(wanted: Sequence[Placeholder], declared: Iterable[str],
                 inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The `wanted` inputs by name, each through `check_input`.

    InputError for a name that is not among the `declared` input names (a module
    input the function no longer reads is still accepted) or a missing input; every
    backend validates inputs through this, so all report bad input alike.
    """
    declared = set(declared)
    unknown = set(inputs) - declared
    if unknown:
        raise InputError(f"unknown input(s): {', '.join(sorted(unknown))}; "
                         f"the inputs are {', '.join(sorted(declared))}")
    checked = {}
    for ph in wanted:
        if ph.name not in inputs:
            raise InputError(f"missing input '{ph.name}' ({ph.type})")
        checked[ph.name] = check_input(ph, inputs[ph.name])
    return checked


def declared_inputs(function: Function) -> list[str]:
    """Every input name of the function's module, read or not."""
    return [name for name, ph in function.module.placeholders.items() if not ph.is_output]
