"""A layer's first weight block and input rows loaded three layers back, past layers with no DRAM time to spare.

Where the layers between are DRAM-bound or nearly (their loads as long as their array work), the one right before a
convolution has no time to load its first operands (prefetch.py) but after its own last load, and the array waits
for them (resnet50's conv__45 -> conv__46 on the server preset: 3.1k cycles behind a 196 KB block and 50 KB of
rows). The layer before those may have idle load time to spare (prefetch._in_pieces): the operands move to regions
clear of every region the four layers and the two after use, `plan_far` names the layer that loads them in pieces in
its gaps, and where all of them fit there, the layer right before makes only the PREFETCH signals the convolution's
first step waits for (each a CONFIG_LOAD restated, at its end: the pieces are in by then, as they came before its
loads on the in-order load engine, barriers between). Only rows in DRAM before the layer three back begins qualify.
"""
from __future__ import annotations

from isa.config import ArchConfig

from .gemm import GemmLayer
from .kept_inputs import kept_region
from .layers import Layer
from .operands_ahead import operand_region
from .pipeline import STORED
from .prefetch import memory_bound, place_region, tensors_overlap, weight_region
from .scratchpad import align

BACK = 3
"""How many layers before a convolution the one that loads its first operands early is."""


def plan_far(layers: list[Layer], config: ArchConfig, across: dict) -> dict[int, int]:
    """For each convolution whose first operands the layer `BACK` before it may load (that one not DRAM-bound, one
    of the two between it and the convolution so, every one of them a convolution layer), with its first input (if
    prefetched) written before that layer begins: its prefetched regions moved clear of those of the layers from
    that one to two after it and of their buffers. Returns {the loading layer's index: the convolution's}; run after
    every other plan of regions (prefetch.py's, operands_ahead.py's, kept_inputs.py's)."""
    far: dict[int, int] = {}
    if config.semaphores <= STORED:
        return far
    bodies = [layer.body for layer in layers]
    for k in range(BACK, len(bodies)):
        j, body = k - BACK, bodies[k]
        chain = bodies[j:k]
        if not isinstance(body, GemmLayer) or body.prefetched is None or body.kept_input is not None \
                or j in across or k - 1 in across or not all(isinstance(b, GemmLayer) for b in chain) \
                or memory_bound(chain[0], config) or not any(memory_bound(b, config) for b in chain[1:]):
            continue
        if body.prefetched_input is not None and any(tensors_overlap(b.result.tensor, body.source.tensor)
                                                     for b in chain):
            continue
        busy = []
        for b in bodies[j:k + 3]:
            if not isinstance(b, GemmLayer):
                continue
            busy.append(operand_region(b))  # (the convolution's own too: the layer before loads them there)
            if b is not body:
                busy += [weight_region(b), kept_region(b)]
                if b.prefetched_input is not None:
                    busy.append((b.prefetched_input[0], b.prefetched_input[0] + b.first_input_bytes()))
        busy = [region for region in busy if region is not None]
        floor = max(b.spad_end() for b in bodies[j:k + 1])
        _, rows, width = body.first_weights()
        weights = place_region(align(rows * width), busy, floor, config)
        if weights is None:
            continue
        busy.append((weights, weights + align(rows * width)))
        if body.prefetched_input is not None:
            rows_at = place_region(body.first_input_bytes(), busy, floor, config)
            if rows_at is None:
                continue
            body.prefetched_input = (rows_at, body.prefetched_input[1])
        body.prefetched = weights
        far[j] = k
    return far
