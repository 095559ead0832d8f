"""Channel shuffle (ShuffleNet) as the order in which the producing layer writes its channels.

The graph spells a shuffle of g groups as Reshape N,C,H,W -> N,g,C/g,H,W, Transpose (0, 2, 1, 3, 4),
Reshape back to N,C,H,W. On a channels-innermost image that is a permutation of every pixel's bytes:
channel j*g + i of the result is channel i*C/g + j of the source. No DMA moves such bytes faster
than one DRAM request per byte (the copies it took cost 80% of ShuffleNet's cycles), so the NPU
never materialises it: the convolution that produces the source permutes its output channels
(filter rows, bias and requantize entries) and writes the shuffled tensor directly, and the three
nodes are no layer at all.
"""
from __future__ import annotations

import numpy as np

from ...graph.node import Node, NodeValue

SHUFFLE_PERM = (0, 2, 1, 3, 4)


def _only_user(value: NodeValue, kind: str) -> Node | None:
    users = list(value.node.users)
    return users[0] if len(users) == 1 and users[0].kind == kind else None


def channel_shuffle(value: NodeValue) -> tuple[np.ndarray, list[Node]] | None:
    """(order, nodes) when `value`'s only use is a channel shuffle: shuffled channel c is channel order[c] of
    `value`, and `nodes` are the Reshape, Transpose, Reshape, the last one giving the shuffled value."""
    shape = tuple(value.type.shape)
    split = _only_user(value, "Reshape")
    if len(shape) != 4 or split is None:
        return None
    n, c, h, w = shape
    grouped = tuple(split.type.shape)
    if len(grouped) != 5 or grouped[0] != n or grouped[3:] != (h, w) or grouped[1] * grouped[2] != c:
        return None
    swap = _only_user(split.result(), "Transpose")
    if swap is None or tuple(swap.perm) != SHUFFLE_PERM:
        return None
    join = _only_user(swap.result(), "Reshape")
    if join is None or tuple(join.type.shape) != shape:
        return None
    groups = grouped[1]
    return np.arange(c).reshape(groups, c // groups).T.reshape(-1), [split, swap, join]
