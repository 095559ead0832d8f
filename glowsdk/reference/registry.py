"""The reference kernels, one per node kind, registered with `@kernel(Kind)`.

A kernel takes the node (for its attributes and types) and one numpy array per
operand (None for an absent optional operand, a list for a variadic one), and
returns an array, or a tuple of arrays for a multi-result node. Quantized values
arrive and leave as raw integers; their scale and offset are in the node's types.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..graph.table import KindTable

Kernel = Callable[..., object]
KERNELS = KindTable("a reference kernel")
kernel = KERNELS.register
"""`@kernel(Kind, ...)` registers the reference semantics of each kind."""


def group_variadic(operands: Sequence, args: list) -> list:
    """Kernels take a variadic operand as one list: group the trailing arguments into it.

    `operands` are the record's operand slots (node Operand or the node operands of a derived
    instruction); every kernel caller goes through here, so all agree on the convention.
    """
    if operands and operands[-1].variadic:
        fixed = len(operands) - 1
        return [*args[:fixed], list(args[fixed:])]
    return args


def kernel_results(produced: object, count: int, what: str) -> list[np.ndarray]:
    """A kernel's return value as a list of `count` arrays (AssertionError naming `what` otherwise)."""
    results = list(produced) if isinstance(produced, (tuple, list)) else [produced]
    if len(results) != count:
        raise AssertionError(f"{what} kernel returned {len(results)} results for {count}")
    return [np.asarray(r) for r in results]
