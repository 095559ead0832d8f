"""Reference kernels of the core node kinds."""
from __future__ import annotations

import numpy as np

from ...graph.nodes.core import Splat
from ..registry import kernel


@kernel(Splat)
def _splat(node):
    return np.full(node.shape, node.value, dtype=node.type.dtype)
