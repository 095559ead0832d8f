"""The `.npub` image of a compiled function: instructions per layer, constants, plan, tensors, bindings.

Layers are planned first (tensors and constants placed by region offset), the memory plan then fixes
the region bases, and only then are instructions generated, with absolute DRAM addresses. Each
layer's roofline workload goes into the metadata beside its debug range (isa/roofline.py).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from isa.config import ArchConfig, config_hash
from isa.container import NpuBinary
from isa.roofline import METADATA_KEY, Workload, to_metadata
from isa.sections import Bindings, MemoryPlan

from .bmm import BatchMatMulLayer
from .depthwise import DepthwiseLayer
from .dma import copy_tiles, transfers
from .emitter import Emitter
from .far import plan_far
from .gemm import GemmLayer
from .accplace import place
from .handoff import can_hand_off, hand_off
from .layernorm import LayerNormLayer, TransposeLayer
from .globalpool import GlobalPoolLayer
from .kept_inputs import emit_kept_signal, plan_kept_inputs
from .layers import CopyLayer, Layer, LayerBuilder
from .operands_ahead import emit_operands_ahead, inserted_before_steps, plan_operand_prefetches
from .overlap import RIDERS, Beside, Footprint, config_state, interleave, pair_layers
from .pipeline import emit_layer
from .rowplan import plan_first_rows
from .prefetch import emit_ahead, emit_prefetch, plan_input_prefetches, plan_prefetches
from .softmax import SoftmaxLayer
from .tensors import DramTensor, tensor_info
from .vector import PoolLayer


def _emit_body(em: Emitter, body: Any, config: ArchConfig, plan: MemoryPlan, after: Any, far: Any = None,
               preloaded: set[int] | None = None) -> list[tuple[int, int]]:
    """Emit one layer's instructions (and the first weights, input rows and residual operands of the layer `after`
    it where it prefetches them, and those of the layer `far` ahead where it can: far.py), without its barrier;
    where each of its tiles and its tiles' vector work start (pipeline.emit_layer)."""
    def base(tensor: DramTensor) -> int:
        return getattr(plan, tensor.region).base + tensor.offset

    if isinstance(body, GemmLayer):
        prologue, tiles, matmul_config = body.tiles(base, plan.constants.base)
        starts: list[int] = []
        marks = emit_layer(em, tiles, prologue, matmul_config, late_prologue=True,  # the bias and tables: REQUANT's
                           step_starts=starts)
        if not isinstance(after, GemmLayer):
            return marks
        inserted = emit_ahead(em, body, tiles, starts, after, base, plan.constants.base, config, far, preloaded) \
            if after.prefetched is not None or after.prefetched_input is not None else []
        if after.ahead_operands is not None and body.kept_results is None:  # (kept ones: nothing to load)
            before = inserted_before_steps(em.instructions, inserted, starts, config)
            for where, count in inserted:
                starts = [i + count if i >= where else i for i in starts]
            inserted += emit_operands_ahead(em, body, tiles, starts, before, after, base, config)
        if after.kept_input is not None:
            inserted.append(emit_kept_signal(em, body, after))
        for where, count in inserted:
            marks = [tuple(i + count if i >= where else i for i in mark) for mark in marks]
        return marks
    if isinstance(body, DepthwiseLayer):
        prologue, tiles, matmul_config = body.tiles(base, plan.constants.base)
        marks = emit_layer(em, tiles, prologue, matmul_config)
        if isinstance(after, GemmLayer) and after.prefetched is not None:
            emit_prefetch(em, after, plan.constants.base)
        return marks
    if isinstance(body, BatchMatMulLayer):
        tiles, matmul_config = body.tiles(base, plan.constants.base, config)
        return emit_layer(em, tiles, body.prologue(plan.constants.base), matmul_config)
    if isinstance(body, TransposeLayer):
        tiles, transpose = body.tiles(base, config)
        return emit_layer(em, tiles, body.prologue(base), transpose)
    if isinstance(body, LayerNormLayer):
        tiles, transpose = body.tiles(base, config)
        return emit_layer(em, tiles, body.prologue(plan.constants.base, base), transpose)
    if isinstance(body, SoftmaxLayer):
        return emit_layer(em, body.tiles(base, config), body.prologue(plan.constants.base))
    if isinstance(body, (GlobalPoolLayer, PoolLayer)):
        return emit_layer(em, body.tiles(base, config), body.prologue(base, config))
    if isinstance(body, CopyLayer):
        slot = config.scratchpad_bytes // 2
        moves = transfers(body.source, body.result, base(body.source), base(body.result), slot)
        return emit_layer(em, copy_tiles(moves, (0, slot)))
    return emit_layer(em, body.tiles(base, config))


def _workload(body: Any) -> Workload | None:
    """A layer's roofline workload (None for a free layer: isa/roofline.py); a pair's is its convolution's."""
    if isinstance(body, Beside):
        return _workload(body.host.body)
    return body.workload() if isinstance(body, (GemmLayer, DepthwiseLayer, BatchMatMulLayer)) else None


def _emit(em: Emitter, layer: Layer, config: ArchConfig, plan: MemoryPlan, after: Any, far: Any = None,
          preloaded: set[int] | None = None) -> Workload | None:
    """Emit one layer (a pair interleaved, `overlap.py`) and its barrier; its roofline workload."""
    body = layer.body
    em.begin_layer()
    if isinstance(body, Beside):
        alone = [Emitter(), Emitter()]
        marks = [_emit_body(part, side.body, config, plan, None) for part, side in zip(alone, (body.host, body.rider))]
        merged = interleave(alone[0].instructions, marks[0], alone[1].instructions, marks[1], config,
                            config_state(em.instructions, config))
        if merged is None:
            raise AssertionError(f"'{layer.name}': too few semaphores to run two layers at once")
        em.extend(merged)
        em.end_layer(layer.name, layer.kind, dones=2)
    else:
        _emit_body(em, body, config, plan, after, far, preloaded)
        em.end_layer(layer.name, layer.kind)
    return _workload(body)


def _footprint(layer: Layer, config: ArchConfig, plan: MemoryPlan) -> Footprint:
    """The DRAM a layer reads and writes, from its instructions emitted alone."""
    alone = Emitter()
    _emit_body(alone, layer.body, config, plan, None)
    return Footprint.of(alone.instructions, config)


def build_binary(builder: LayerBuilder, layers: list[Layer], config: ArchConfig,
                 metadata: dict) -> tuple[NpuBinary, list[Layer]]:
    """Generate every layer's instructions and assemble the binary; the layers as it runs them (a max pool that
    runs beside a convolution is one layer with it: overlap.py)."""
    plan = builder.planner.plan(len(builder.constants))
    em = Emitter()
    if any(isinstance(layer.body, RIDERS) for layer in layers):
        layers = pair_layers(layers, lambda layer: _footprint(layer, config, plan), config)
    across = plan_prefetches(layers, config)
    plan_first_rows(layers, config, across)  # (the rows whose first input the layer before can load: with the regions
    # above)
    plan_input_prefetches(layers, config, across)
    plan_operand_prefetches(layers, config, across)
    plan_kept_inputs(layers, config, across)
    far, preloaded = plan_far(layers, config, across), set()
    workloads = []
    for k, (layer, after) in enumerate(zip(layers, [*layers[1:], None])):
        start = len(em.instructions)
        handed = can_hand_off(layer.body, config)  # its first product runs while the layer before drains
        following = after.body if after and can_hand_off(after.body, config) else None
        waited = place(em, layer.body, config, following) if handed else None
        workloads.append(_emit(em, layer, config, plan, across.get(k, after.body if after else None),
                               layers[far[k]].body if k in far else None, preloaded))
        if handed:
            hand_off(em, start, layer.body, waited, config)
    tensors = list(builder.planner.tensors)
    infos = []
    seen: set[str] = set()
    for tensor in tensors:
        name = tensor.name
        while name in seen:
            name += "'"
        seen.add(name)
        infos.append(replace(tensor_info(tensor, plan), name=name))
    index = {id(t): k for k, t in enumerate(tensors)}
    bindings = Bindings(inputs={name: index[id(t)] for name, t in builder.inputs.items()},
                        outputs={name: index[id(t)] for name, t in builder.outputs.items()})
    return NpuBinary(config_hash=bytes.fromhex(config_hash(config)), plan=plan, instructions=em.finish(),
                     constants=bytes(builder.constants), tensors=infos, bindings=bindings, debug=em.debug,
                     metadata={**metadata, METADATA_KEY: to_metadata(workloads)}), layers

