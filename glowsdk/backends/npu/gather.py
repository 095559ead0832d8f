"""Gather (an embedding lookup) as indexed DMA: the load engine's GATHER picks table rows by index.

`Gather(table, indices)` along axis 0 of an int8 table [V, ...] (a row: everything after the first dim), its
indices a host input (int64 or int32 token ids, which the binding writes as int32) or a constant. Per chunk of N
indices: LOAD the N int32 indices into the accumulator, GATHER the N rows of D bytes from the table in DRAM into
the scratchpad (negative indices count from the end, an index outside the table is a fault, as the ISA reference
says), STORE them into the dense result. The table never passes through the SRAMs whole; only the rows asked for
cross the DRAM bus. Chunks alternate between two slots (pipeline.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from isa.config import ArchConfig

from ...errors import UnsupportedError
from ...graph.node import Constant, Node, NodeValue
from .instructions import CONFIG_LOAD, CONFIG_STORE, GATHER, LOAD, STORE, Op
from .pipeline import Step, Tile
from .tensors import DramTensor, dense_strides

if TYPE_CHECKING:
    from .layers import LayerBuilder

MAX_ROWS, MAX_ROW_BYTES = 65535, 65535
"""GATHER's 16-bit rows field and CONFIG_LOAD's 16-bit elem_bytes."""


def gather_limits(node: Node) -> list[str]:
    """What GATHER cannot do: an axis other than 0, a table of too many rows or too wide a row (a row is
    everything after the first dim: a [3, S, D] stack of Q, K and V picks whole matrices)."""
    shape = node.data.type.shape
    if not shape or node.axis not in (0, -len(shape)):
        return [f"a gather along axis {node.axis} (the NPU gathers along the first dim)"]
    rows, width = shape[0], int(np.prod(shape[1:], dtype=np.int64))
    return [*([f"a table of {rows} rows > {MAX_ROWS}"] if rows > MAX_ROWS else []),
            *([f"rows of {width} bytes > {MAX_ROW_BYTES}"] if width > MAX_ROW_BYTES else [])]


def _chunk(count: int, width: int, config: ArchConfig) -> int:
    """Indices per chunk: two slots of rows in the scratchpad and of indices in the accumulator."""
    chunk = min(count, config.scratchpad_bytes // (2 * width), config.accumulator_bytes // (2 * 4), MAX_ROWS,
                MAX_ROW_BYTES // 4)
    if chunk < 1:
        raise UnsupportedError(f"a gathered row of {width} bytes does not fit the scratchpad twice")
    return chunk


@dataclass
class GatherLayer:
    """Rows of `table` picked by `indices` (int32) into the dense `result`."""

    table: DramTensor
    indices: DramTensor
    result: DramTensor

    def tiles(self, base: Callable[[DramTensor], int], config: ArchConfig) -> list[Tile]:
        rows, width = self.table.shape[0], self.table.elements // self.table.shape[0]
        total = self.indices.elements
        chunk = _chunk(total, width, config)
        tiles = []
        for k, start in enumerate(range(0, total, chunk)):
            n = min(chunk, total - start)
            slot = k % 2
            acc, spad = slot * chunk, slot * chunk * width
            loads: list[Op] = [
                CONFIG_LOAD(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=4 * n),
                LOAD(dram=base(self.indices) + 4 * start, space="acc", sram=acc, planes=1, rows=1, cols=1),
                CONFIG_LOAD(row_stride=width, plane_stride=0, col_stride=0,
                            elem_bytes=width),
                GATHER(dram=base(self.table), idx=acc, sram=spad, count=n, rows=rows)]
            stores: list[Op] = [
                CONFIG_STORE(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=n * width),
                STORE(dram=base(self.result) + start * width, space="spad", sram=spad, planes=1, rows=1,
                      cols=1)]
            tiles.append(Tile([Step(loads)], [], stores))
        return tiles


def _indices(builder: LayerBuilder, value: NodeValue) -> DramTensor:
    """The indices as int32 in DRAM: a host input the binding writes, or a constant."""
    if value in builder.values:
        return builder.values[value]
    shape = value.type.shape
    if isinstance(value.node, Constant):
        data = np.asarray(value.node.value, np.int64).reshape(-1)
        if data.size and (data.min() < -(1 << 31) or data.max() >= 1 << 31):
            raise UnsupportedError(f"'{value.name}': indices outside int32")
        tensor = DramTensor(value.name, shape, dense_strides(shape, 4), "constants",
                            builder.add_constant(data.astype("<i4").tobytes()), itemsize=4)
    else:
        tensor = builder.planner.allocate(value.node.name, shape, "inputs", itemsize=4)
        builder.inputs[value.node.name] = tensor
    builder.values[value] = tensor
    return tensor


def gather_layer(builder: LayerBuilder, node: Node) -> GatherLayer:
    table = builder.laid_out(node.data, nhwc=False)
    out = builder._new(node.result())
    builder.values[node.result()] = out
    return GatherLayer(table, _indices(builder, node.indices), out)
