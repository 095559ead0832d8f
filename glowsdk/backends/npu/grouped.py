"""Grouped and depthwise convolutions as block-diagonal GEMM layers, or groups side by side (GMATMUL).

A convolution of G groups (C/G input and O/G output channels each) is cut into layers of m
consecutive groups; each layer is an ordinary convolution layer (gemm.py) over the channel slices of
its groups, with the m group filters placed on the diagonal of an (m O/G) x (m C/G) filter and
zeros elsewhere. The zeros add nothing to the int32 accumulator and nothing to the zero-point
correction (sum of the weights), so every layer is exact; they cost array cycles, which is what m
trades: one group per layer leaves the array almost idle when a group is narrow (a depthwise 3x3
has K = 9 and N = 1 against a 32 x 32 array), all groups in one layer multiplies the MACs by G.
`groups_per_layer` takes the m with the fewest estimated cycles (the array's stall-free formula in
its better dataflow, plus a fixed cost per layer): for a depthwise 3x3 on a 32 x 32 array, m of
the array's width (24 to 32: K = 9m in nearly full folds); for wide groups (AlexNet's two,
ShuffleNet's four), one group per layer. Where m is fewer than all the groups, the groups are still one
layer (one pipeline fill and drain, not G): its block diagonal tiled by whole groups or parts of one
(tiling.choose_grouped_tiling), each output tile's steps reading only its own groups' input channels, so
no step multiplies a block off the diagonal.

Up to 8 groups, each on a column block of the array, run side by side as GMATMUL steps instead (no zero
multiplied, `_packing`): always where a channel shuffle of as many groups follows (GMATMUL writes the
groups' outputs interleaved, the shuffle's order: ShuffleNet's), else where its estimate beats the
block diagonal's tiles.

A depthwise convolution (one input channel per group) runs on the vector engine instead
(depthwise.py), except where a channel shuffle follows it: the shuffle mixes the groups of every
output pixel, so the layer that writes it in shuffled order is one block diagonal over all groups.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterator

import numpy as np

from isa.config import ArchConfig
from sim.timing import matmul_cycles

from ...errors import UnsupportedError
from ...graph.node import Node
from .epilogue import AddTensor, EpilogueOp, compact, vector_passes
from .gemm import GemmLayer, Packing, Requant, prologue_loads
from .step_cost import ConvShape, Pitches
from .tensors import DramTensor
from .tile_loads import Image
from .tiling import choose_grouped_tiling, packable

LAYER_OVERHEAD_CYCLES = 400
"""A layer's fixed cost: the closing barrier, the DRAM latency of its first loads, the last store."""


def layer_cycles(shape: ConvShape, config: ArchConfig) -> int:
    """Estimated array cycles of one image of a convolution layer, in the better dataflow."""
    pixels = shape.out_height * shape.out_width
    k = shape.kh * shape.kw * shape.channels
    return min(matmul_cycles(pixels, k, shape.out_channels, flow, config) for flow in config.dataflows)


def dram_cycles(shape: ConvShape, groups: int, m: int, config: ArchConfig) -> float:
    """Estimated DRAM cycles of one image of a layer of m of the `groups` groups (`shape` is one group's geometry):
    its input and output are channel slices, moved in runs of m groups' channels per pixel (whole rows once m is
    every group), and a short run is a request whose latency only the others in flight hide."""
    def time(size: int, run: int) -> float:
        request = min(run, config.dma_burst_bytes)
        rate = config.dram_max_outstanding * request / (config.dram_latency_cycles
                                                         + -(-request // config.dram_bytes_per_cycle))
        return size / min(config.dram_bytes_per_cycle, rate)
    whole = m == groups
    cin, cout = shape.channels * m, shape.out_channels * m
    return (time(shape.height * shape.width * cin, shape.width * cin if whole else cin)
            + time(shape.out_height * shape.out_width * cout, shape.out_width * cout if whole else cout))


def groups_per_layer(shape: ConvShape, groups: int, config: ArchConfig) -> int:
    """The m (groups per layer) with the fewest estimated cycles (the busier of the array and the DRAM, plus a
    fixed cost per layer); `shape` is one group's geometry."""
    def cost(m: int) -> float:
        merged = replace(shape, channels=shape.channels * m, out_channels=shape.out_channels * m)
        busiest = max(layer_cycles(merged, config), dram_cycles(shape, groups, m, config))
        return -(-groups // m) * (LAYER_OVERHEAD_CYCLES + busiest)
    return min(range(1, groups + 1), key=cost)


def block_diagonal(filters: np.ndarray, groups: int) -> np.ndarray:
    """The dense (O x C x KH x KW) filter of `groups` group filters ((O x C/G x KH x KW) stacked)."""
    out_per, in_per = filters.shape[0] // groups, filters.shape[1]
    dense = np.zeros((filters.shape[0], in_per * groups, *filters.shape[2:]), filters.dtype)
    for g in range(groups):
        dense[g * out_per:(g + 1) * out_per, g * in_per:(g + 1) * in_per] = filters[g * out_per:(g + 1) * out_per]
    return dense


def grouped_layers(node: Node, x: DramTensor, out: DramTensor, requant: Requant, config: ArchConfig,
                   add_constant: Callable[[bytes], int], epilogue: tuple[EpilogueOp, ...] = (),
                   order: np.ndarray | None = None) -> Iterator[tuple[str, GemmLayer]]:
    """(name, layer) per block of groups of a quantized grouped Conv from NHWC `x` into NHWC `out`; each block
    applies `epilogue` to its own output channels (a residual operand sliced to them). With `order` (a channel
    shuffle: output channel c is the convolution's channel order[c]) one layer holds every group, its block
    diagonal's rows permuted: a shuffle mixes the groups of every output pixel."""
    groups = node.group
    _, c, h, w = node.input.type.shape
    _, oc, oh, ow = node.type.shape
    cg, og = c // groups, oc // groups
    pads = (node.pads[0], node.pads[1], node.pads[2], node.pads[3])
    one = ConvShape(cg, h, w, og, oh, ow, *node.kernel, tuple(node.strides), tuple(node.dilations), pads)
    m = groups if order is not None else groups_per_layer(one, groups, config)
    filters = np.asarray(node.filter.node.value)
    bias = np.zeros(oc, np.int64) if node.bias is None else np.asarray(node.bias.node.value, np.int64)
    x_zero = int(node.input.type.offsets.reshape(-1)[0])
    whole = replace(one, channels=c, out_channels=oc)
    packing = _packing(whole, groups, order, m, Image.of(x), Image.of(out), requant, epilogue, config)
    if packing is not None:
        yield node.name, GemmLayer.plan_packed(whole, config, Image.of(x), Image.of(out), filters, bias, requant,
                                               x_zero, add_constant, epilogue, packing)
        return
    if order is None and m < groups:  # one layer, its tiles following the groups (no step off the diagonal)
        yield node.name, GemmLayer.plan(replace(one, channels=c, out_channels=oc), config, Image.of(x), Image.of(out),
                                        block_diagonal(filters, groups), bias, requant, x_zero, add_constant,
                                        epilogue, groups=groups, diagonal=True)
        return
    for g0 in range(0, groups, m):
        k = min(m, groups - g0)
        outs = slice(g0 * og, (g0 + k) * og)
        shape = replace(one, channels=cg * k, out_channels=og * k)
        dense, part = block_diagonal(filters[outs], k), Requant(requant.multipliers[outs], requant.shifts[outs],
                                                                  requant.zero)
        part_bias = bias[outs]
        if order is not None:
            dense, part, part_bias = dense[order], part.take(order), part_bias[order]
        layer = GemmLayer.plan(shape, config, Image.of(x.sliced(1, g0 * cg, cg * k)),
                               Image.of(out.sliced(1, g0 * og, og * k)), dense, part_bias, part, x_zero,
                               add_constant, _sliced(epilogue, g0 * og, og * k), groups=k)
        yield (node.name if m == groups else f"{node.name}/groups{g0}-{g0 + k - 1}"), layer


def _packing(shape: ConvShape, groups: int, order: np.ndarray | None, m: int, x: Image, out: Image, requant: Requant,
             epilogue: tuple[EpilogueOp, ...], config: ArchConfig) -> Packing | None:
    """GMATMUL's way when it runs the layer (`packable`): always for a shuffle of as many groups as the
    convolution has (its result interleaves them), else when its estimate beats the block diagonal's tiles."""
    if not packable(shape, groups, config):
        return None
    if order is not None:
        packing = Packing(groups, True)
        return packing if np.array_equal(order, packing.order(shape.out_channels)) else None
    packing = Packing(groups, False)
    try:
        packed = GemmLayer.packed_tiling(shape, config, x, out, requant, epilogue, packing).cycles
    except UnsupportedError:
        return None
    if m == groups:
        return packing
    chain = compact(epilogue)
    diagonal = choose_grouped_tiling(shape, groups, config, 0, sum(isinstance(op, AddTensor) for op in chain),
                                     vector_passes(chain), Pitches(x.pixel_stride, out.pixel_stride),
                                     prologue_loads(shape, requant.per_channel, chain))
    return packing if packed < diagonal.cycles else None


def _sliced(epilogue: tuple[EpilogueOp, ...], start: int, size: int) -> tuple[EpilogueOp, ...]:
    """The epilogue of the output channels [start, start + size): a residual operand's channels sliced alike
    (rescales and clamps are per tensor)."""
    return tuple(replace(op, operand=Image.of(op.operand.tensor.sliced(1, start, size)))
                 if isinstance(op, AddTensor) else op for op in epilogue)
