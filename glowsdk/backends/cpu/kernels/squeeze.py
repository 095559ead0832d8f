"""A 1x1 convolution of 1 x 1 maps as rows of a GEMM: C[N, M] = X[N, K] @ W^T[K, M] + bias.

A squeeze-and-excitation block's two convolutions read a 1 x 1 map (a vector of
channels per image). As a plain pointwise GEMM (conv.py), C[M, 1] = W[M, K] @ X[K, 1],
such a convolution has one column: every register tile is MR rows of one vector
holding a single value (1/16 of an AVX-512 FMA's lanes), and each of its four tile
variants (the first row tile that packs, the rest, their edges) is a K loop of its
own: efficientnet_b0's 16 blocks gave 14 kernels of about 1000 lines of LLVM IR each.
Transposed, the images are the rows and the filters the columns: the filter is
packed at compile time into column panels [K, NR] (as a MatMul's constant weights,
packing.pack_column_panels), the input is read as it lies, the bias starts each
column's accumulators, the stacked element-wise instructions run as C is stored
(the flat index n x M + m is the convolution's too), and threads share the column
tiles.
"""
from __future__ import annotations

from typing import Any

from llvmlite import ir

from ....graph.types import ElemKind
from ..codegen.kinds import i64
from ..codegen.module import KernelContext, Step
from .epilogue import stacked_epilogue
from .gemm import Gemm, Panel, bias_init, emit_gemm, load_vector, offset
from .packing import constant_filter, edge_panel_columns, pack_column_panels
from .window import window_dims


def applies(instr: Any) -> bool:
    """A float32 ungrouped convolution with a constant filter whose every spatial dim is a 1 x 1
    window of a size-1 input giving a size-1 output (no padding)."""
    if instr.types[0].elem is not ElemKind.FLOAT32 or instr.group != 1 or constant_filter(instr) is None:
        return False
    return all((d.size, d.out, d.kernel, d.begin, d.end) == (1, 1, 1, 0, 0) for d in window_dims(instr))


def emit_squeeze(ctx: KernelContext, step: Step) -> None:
    """The kernel of the module doc for `step`'s Conv instruction and its stacked epilogue."""
    instr = step.instrs[0]
    builder = ctx.builder
    images, channels = instr.input.type.shape[:2]
    filters = instr.filter.type.shape[0]
    gemm = Gemm(images, filters, channels)
    nr, lanes = gemm.tile_columns, gemm.lanes
    edge = edge_panel_columns(gemm.edge_columns(), lanes)
    panels = ctx.constant(constant_filter(instr), "columns", ("columns", nr, lanes),
                          lambda value: pack_column_panels(value.reshape(filters, channels).T, nr, lanes))
    x, out = ctx.address(instr.input), ctx.address(instr.operands[0])
    bias = ctx.address(instr.bias) if instr.bias is not None else None

    def a_of(mt: ir.Value) -> Panel:
        return Panel(offset(builder, x, builder.mul(mt, i64(gemm.tile_rows * channels))), 1, channels)

    def b_of(nt: ir.Value) -> Panel:
        return Panel(offset(builder, panels, builder.mul(nt, i64(channels * nr))), nr, streamed=True,
                     edge_k_stride=edge)

    def column_bias(nt: ir.Value, columns: int) -> list[ir.Value]:
        first = builder.mul(nt, i64(nr))
        return [load_vector(ctx, offset(builder, bias, builder.add(first, i64(v))), lanes, min(lanes, columns - v))
                for v in range(0, columns, lanes)]

    emit_gemm(ctx, gemm, a_of, False, b_of, out, filters, bias_init(ctx, None, images), stacked_epilogue(ctx, step),
              column_init=column_bias if bias is not None else None)
