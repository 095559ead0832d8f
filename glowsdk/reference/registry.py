"""The reference kernels, one per node kind, registered with `@kernel(Kind)`.

A kernel takes the node (for its attributes and types) and one numpy array per
operand (None for an absent optional operand, a list for a variadic one), and
returns an array, or a tuple of arrays for a multi-result node. Quantized values
arrive and leave as raw integers; their scale and offset are in the node's types.
"""
from __future__ import annotations

from typing import Callable

from ..graph.node import Node

Kernel = Callable[..., object]
KERNELS: dict[str, Kernel] = {}


def kernel(*kinds: type[Node]) -> Callable[[Kernel], Kernel]:
    """Register `fn` as the reference semantics of each kind in `kinds`."""

    def register(fn: Kernel) -> Kernel:
        for kind in kinds:
            name = kind.spec.name
            if name in KERNELS:
                raise ValueError(f"a reference kernel for {name} is registered twice")
            KERNELS[name] = fn
        return fn

    return register
