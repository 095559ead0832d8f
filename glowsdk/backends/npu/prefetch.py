"""Weights across a barrier: a convolution layer (a depthwise one too) loads the next one's first weight block.

Layers run one after another (emitter.py): the next layer's first step waits for the barrier, then for its
input rows and its weight block, before the array starts. The weights are constants, which no layer writes,
so their load need not wait: the layer before issues it after its own last load, while its array, vector
engine and stores finish (the load engine is idle then), into the top of the scratchpad, above both
layers' buffers. The load signals PREFETCH; the next layer's first step waits for it before its matrix work
instead of loading the block. On big arrays the layers are short and this load is a large part of each
(server preset, resnet50: about 80k of 1.9M cycles).

The region is free while the layer before runs: its buffers end below it, and the block it read from there
itself (if the layer before it prefetched one) was read by its first step's matrix work, which its third
step's loads wait for; so a layer that was prefetched prefetches for the next only if it has three steps.
"""
from __future__ import annotations

from isa.config import ArchConfig

from .emitter import Emitter, Sync
from .depthwise import DepthwiseLayer
from .gemm import GemmLayer
from .layers import Layer
from .pipeline import PREFETCH
from .scratchpad import align, align_down
from .tile_loads import config_load, load


def plan_prefetches(layers: list[Layer], config: ArchConfig) -> None:
    """Mark each convolution layer whose first weight block the convolution layer before can load
    (`GemmLayer.prefetched`: where that block goes); a depthwise layer before is never prefetched itself."""
    if config.semaphores <= PREFETCH:
        return
    for before, layer in zip(layers, layers[1:]):
        prev, body = before.body, layer.body
        if not isinstance(body, GemmLayer) or not _whole_steps(body) or body.pool:
            continue
        if isinstance(prev, GemmLayer):
            if not _whole_steps(prev) or prev.pool or prev.prefetched is not None and prev.steps() < 3:
                continue
        elif not isinstance(prev, DepthwiseLayer):
            continue
        _, rows, width = body.first_weights()
        address = align_down(config.scratchpad_bytes - align(rows * width))
        if max(prev.spad_end(), body.spad_end()) <= address:
            body.prefetched = address


def _whole_steps(layer: GemmLayer) -> bool:
    """A layer whose every weight block is a step (not a block diagonal's, whose blocks off it are none): one of
    a single group, or of groups side by side (GMATMUL)."""
    return layer.groups == 1 or layer.packing is not None


def emit_prefetch(em: Emitter, body: GemmLayer, constants: int) -> None:
    """The load of `body`'s first weight block into its prefetch region, signalling PREFETCH (the layer before
    emits it after its own last load)."""
    offset, rows, width = body.first_weights()
    em.emit(config_load(width, 0, width))
    em.emit(load(constants + offset, "spad", body.prefetched, rows, 1), Sync(signal=PREFETCH, signal_count=1))
