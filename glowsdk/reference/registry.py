"""The reference kernels, one per node kind, registered with `@kernel(Kind)`.

A kernel takes the node (for its attributes and types) and one numpy array per
operand (None for an absent optional operand, a list for a variadic one), and
returns an array, or a tuple of arrays for a multi-result node. Quantized values
arrive and leave as raw integers; their scale and offset are in the node's types.
"""
from __future__ import annotations

from typing import Callable

from ..graph.table import KindTable

Kernel = Callable[..., object]
KERNELS = KindTable("a reference kernel")
kernel = KERNELS.register
"""`@kernel(Kind, ...)` registers the reference semantics of each kind."""
